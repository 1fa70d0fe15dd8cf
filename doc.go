// Package keycap gives every user, tenant or API key a fair share of a
// system: one key cannot hold more than N executions at once, whether they are
// HTTP requests in flight, jobs running or connections open.
//
// # The leased slot
//
// Everything rests on one primitive, a counting semaphore per pool whose
// permits are leases. A pool is a limit name and a key ("exports" ×
// "user:42"); a Limit says how many leases its pool may hold at once (Max),
// how long a lease lives without renewal (TTL), how long Acquire may wait for
// one (Wait) and what to do when the store cannot answer (FailMode).
//
//   - Acquire grants a lease only if the pool holds fewer than Max unexpired
//     leases, checked and added atomically by the store: a pool is never over
//     its cap, not even by one under a burst.
//   - Each lease has a random owner token. Release names it, so a late
//     release cannot free a slot that someone else took after expiry.
//   - While a lease is held, the Limiter renews it at about a third of its
//     TTL, in one background loop batched per store round trip. TTLs can
//     therefore be short: a crashed process frees its slots within one TTL,
//     and a long holder never loses its slot silently (Lease.Lost says so
//     when it does).
//   - Expiry follows the store's clock, never the caller's.
//   - Changing Max between deploys is safe: the cap is checked at acquire
//     time against the leases held.
//
// Keys may be any bytes. Stores see only a PoolID, a 128-bit SHA-256 of the
// name and the key.
//
// # Stores
//
// A Store holds the leases. memstore keeps them in this process (the default,
// nothing to install); redisstore keeps them in Redis, Redis Sentinel or
// Redis Cluster, so caps hold across servers, at one round trip per
// operation. storetest is the conformance suite every store passes.
//
// # Failures
//
// When the store fails, a limit fails open (the caller runs without a slot;
// the default) or closed (Acquire returns an error matching
// ErrStoreUnavailable). The failure is reported to the Observer once per
// outage, as a StoreFailed event, and StoreRecovered follows the first
// success. A context that the caller cancels is never a store failure.
//
// # Events
//
// An Observer receives SlotAcquired, LimitExceeded, SlotReleased, LeaseLost,
// StoreFailed and StoreRecovered. Acquired and released slots stay balanced,
// panics included. NewSlogObserver logs them; the front doors' packages offer
// Prometheus metrics as another observer.
package keycap
