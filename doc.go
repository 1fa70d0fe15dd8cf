// Package keycap gives every user, tenant or API key a fair share of a
// system: one key cannot hold more than N executions at once, whether they
// are HTTP requests in flight, jobs running or connections open.
//
// A Spec says how many at once, and Spec.For makes the Limit of one key. A
// Limiter takes slots from a Store:
//
//	limiter, err := keycap.NewLimiter(memstore.New()) // redisstore.New(client) across servers
//	exports := keycap.Spec{Name: "exports", Max: 2}
//
//	err = limiter.Do(ctx, func(ctx context.Context) error {
//		return runExport(ctx) // at most 2 at once per user
//	}, exports.For(userID))
//	if errors.Is(err, keycap.ErrLimitExceeded) {
//		// the user already runs 2: answer 429, requeue the job, ...
//	}
//
// Do holds the slot while its function runs. Acquire returns a Lease to
// release later instead, for work that does not end when a function
// returns; Limiter says which to use when. httplimit, joblimit (with
// riverlimit and asynqlimit), conncap and pause apply the same limits to
// HTTP handlers, job queues, connections and outbound calls.
//
// # The leased slot
//
// Everything rests on one primitive, a counting semaphore per pool whose
// permits are leases. A pool is a family, a limit name and a key ("exports"
// × "user:42").
//
//   - A lease is granted only if the pool holds fewer than Max unexpired
//     leases, checked and added atomically by the store: a pool is never over
//     its cap, not even by one under a burst.
//   - Each lease has an owner token; releasing names it, so a late release
//     cannot free a slot that someone else took after expiry.
//   - While a lease is held, the Limiter renews it at about a third of its
//     TTL, in one background loop batched per store round trip. TTLs can
//     therefore be short: a crashed process frees its slots within one TTL,
//     and a long holder never loses its slot silently (Lease.Lost says so
//     when it does).
//   - Expiry follows the store's clock, never the caller's.
//   - Changing Max between deploys is safe: the cap is checked at acquire
//     time against the leases held.
//
// Keys may be any bytes. Stores see only a 16-byte hash of the family, the
// name and the key (store.PoolID).
//
// # Waiting, weights and shares
//
// A Spec with a Wait lets a caller wait for a slot: it takes a ticket in the
// pool's line, on every server that shares the store, and a freed slot goes
// to the oldest ticket. A Weight makes a lease take several slots; a Parent
// is a total shared by many keys, split among the keys that wait by their
// Share. Shadow limits decide and report without refusing, and overrides
// (Limiter.SetOverride) change one key's limit at run time.
//
// # Stores
//
// A Store holds the leases. memstore keeps them in this process (nothing to
// install); redisstore in Redis, Redis Sentinel or Redis Cluster; pgstore in
// PostgreSQL; nullstore turns limits off. Each declares what it can do
// beyond plain slots (store.Features): a call that needs what the store
// lacks returns an error matching ErrNotSupported. Package store is what a
// store implements; storetest is the suite every store passes.
//
// # Failures
//
// Each store call has a time budget (WithDecisionBudget, Spec.Budget).
// When the store fails or the budget runs out, a limit fails open (the
// caller runs without a slot; the default) or closed (the error matches
// ErrStoreUnavailable). The outage is reported to the Observer once, as a
// StoreFailed event when it starts (per partition of a Redis Cluster), and
// a StoreRecovered event once the store has answered without a failure for
// the recover-after time (WithRecoverAfter). A context that the caller
// cancels is never a store failure, and neither is a budget that this
// process used up — its request waited to be sent, or the process was
// starved of CPU — rather than the store: the fail mode applies, and it is
// reported as ProcessOverloaded (BudgetError says how it is told).
//
// # Events
//
// An Observer receives the events of a Limiter and of the front doors built
// on it: slots acquired, refused, released and lost, ghosts dropped, store
// failures and recoveries, and outbound throttling (EventKind lists them).
// Acquired and released slots stay balanced, panics included.
// NewSlogObserver logs them; promobserver and otelobserver export them as
// metrics.
package keycap
