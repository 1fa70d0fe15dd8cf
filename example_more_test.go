package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// A limit that waits: a second render of the same document queues behind the
// first for up to 5 s instead of being refused. It takes a place in the
// pool's line and is handed the slot the moment it is released, on any
// server sharing the store.
func ExampleSpec_wait() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	render := keycap.Spec{Name: "render", Max: 1, Wait: 5 * time.Second}.For("doc:9")
	ctx := context.Background()

	first, _ := limiter.Acquire(ctx, render)
	done := make(chan error)
	go func() {
		second, err := limiter.Acquire(ctx, render) // waits while first holds the slot
		if err == nil {
			second.Release()
		}
		done <- err
	}()
	first.Release() // hands the slot on
	fmt.Println("second render:", <-done)
	// Output: second render: <nil>
}

// An Observer sees every slot granted, refused and released, synchronously,
// on the caller's goroutine: a place for metrics or logs (NewSlogObserver,
// promobserver). Keys may be private: this one prints only the limit's name.
func ExampleObserverFunc() {
	observe := keycap.ObserverFunc(func(e keycap.Event) {
		fmt.Println(e.Kind, e.Limit.Name())
	})
	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithObserver(observe))
	defer limiter.Close()
	search := keycap.Spec{Name: "search", Max: 1}.For("user:42")
	ctx := context.Background()

	_ = limiter.Do(ctx, func(ctx context.Context) error {
		_, err := limiter.Acquire(ctx, search) // refused: the slot is taken
		return err
	}, search)
	// Output:
	// slot acquired search
	// limit exceeded search
	// slot released search
}

// downStore is a store that cannot answer, as during a network outage. It
// declares no feature (store.Unsupported).
type downStore struct{ store.Unsupported }

var errRefused = errors.New("connection refused")

func (downStore) Acquire(context.Context, store.PoolID, store.Owner, store.Demand) (store.Grant, error) {
	return store.Grant{}, errRefused
}

func (downStore) Release(context.Context, store.PoolID, store.Owner, store.Demand, bool) (bool, error) {
	return false, errRefused
}

func (downStore) Renew(context.Context, []store.Renewal) error { return errRefused }

// When the store cannot answer, a limit fails open by default: the caller runs
// without a slot, and the lease says so. A limit that must never be exceeded
// fails closed instead, and Acquire returns an error matching
// ErrStoreUnavailable. The outage is reported to the Observer once.
func ExampleFailMode() {
	outages := 0
	limiter, _ := keycap.NewLimiter(downStore{}, keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.StoreFailed {
			outages++
		}
	})))
	defer limiter.Close()
	ctx := context.Background()

	lease, err := limiter.Acquire(ctx, keycap.Spec{Name: "search", Max: 2}.For("user:42"))
	fmt.Println("fail open:", err, "guarded:", lease.Guarded())
	lease.Release()

	billing := keycap.Spec{Name: "billing", Max: 1, FailMode: keycap.FailClosed}.For("user:42")
	_, err = limiter.Acquire(ctx, billing)
	fmt.Println("fail closed:", errors.Is(err, keycap.ErrStoreUnavailable))
	fmt.Println("outages reported:", outages)
	// Output:
	// fail open: <nil> guarded: false
	// fail closed: true
	// outages reported: 1
}

// A total shared by tenants: at most 4 exports at once in all, at most 3 per
// tenant. A tenant alone borrows up to its own 3; a second tenant gets the
// fourth slot, and then the parent is full for everyone.
func ExampleParent() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	exports := keycap.MustParent("exports", 4)
	tenant := func(id string) keycap.Limit {
		return keycap.Spec{Name: "exports", Max: 3, Parent: exports}.For("tenant:" + id)
	}
	ctx := context.Background()
	for _, id := range []string{"acme", "acme", "acme", "acme", "globex", "globex"} {
		ls, err := limiter.Acquire(ctx, tenant(id))
		if err != nil {
			fmt.Println(id, "refused")
			continue
		}
		defer ls.Release()
		fmt.Println(id, "runs")
	}
	// Output:
	// acme runs
	// acme runs
	// acme runs
	// acme refused
	// globex runs
	// globex refused
}

// A call that costs more: a full export takes 3 of the tenant's 4 slots, a
// read 1, in the same pool.
func ExampleSpec_weight() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	full := keycap.Spec{Name: "api", Max: 4, Weight: 3}.For("tenant:acme")
	read := keycap.Spec{Name: "api", Max: 4}.For("tenant:acme")
	ctx := context.Background()
	export, _ := limiter.Acquire(ctx, full)
	defer export.Release()
	_, err1 := limiter.Acquire(ctx, read)
	_, err2 := limiter.Acquire(ctx, read)
	fmt.Println(err1 == nil, errors.Is(err2, keycap.ErrLimitExceeded))
	// Output: true true
}

// A shadow limit beside the enforced one: the candidate cap of 1 would
// refuse the second request, which the current cap of 3 lets through. The
// refusal is reported (and counted by promobserver with shadow="true"); the
// caller never sees it.
func ExampleSpec_shadow() {
	var wouldRefuse int
	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.LimitExceeded && e.Limit.Shadow() {
			wouldRefuse++
		}
	})))
	defer limiter.Close()
	current := keycap.Spec{Name: "exports", Max: 3}.For("team:7")
	candidate := keycap.Spec{Name: "exports", Max: 1, Shadow: true}.For("team:7")
	ctx := context.Background()
	a, _ := limiter.Acquire(ctx, current, candidate)
	b, err := limiter.Acquire(ctx, current, candidate)
	fmt.Println("second export:", err, "- the candidate would have refused", wouldRefuse)
	b.Release()
	a.Release()
	// Output: second export: <nil> - the candidate would have refused 1
}

// A live override: one key's max changed for every Limiter of the store
// built WithOverrides, without a deploy, and reset to the code's value.
func ExampleLimiter_SetOverride() {
	store := memstore.New()
	limiter, _ := keycap.NewLimiter(store, keycap.WithOverrides(time.Second))
	defer limiter.Close()
	ctx := context.Background()
	exports := keycap.Spec{Name: "exports", Max: 1}.For("team:7")

	_ = limiter.SetOverride(ctx, keycap.Override{Name: "exports", Key: "team:7", Max: 5, TTL: time.Hour})
	fmt.Println("max now:", limiter.Overridden(exports).Max())
	_ = limiter.ResetOverride(ctx, keycap.FamilyApp, "exports", "team:7")
	fmt.Println("max after the reset:", limiter.Overridden(exports).Max())
	// Output:
	// max now: 5
	// max after the reset: 1
}

// Who holds what: a page of a limit's pools, on every server of the store,
// with each holder's age and node, and the labels and keys this Limiter
// knows (keys only when it shows them: they may be personal data).
func ExampleLimiter_Inspect() {
	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithNode("web-1"),
		keycap.WithInspection(keycap.InspectOptions{ShowKeys: true}))
	defer limiter.Close()
	ctx := keycap.WithLabel(context.Background(), "req-42")
	lease, _ := limiter.Acquire(ctx, keycap.Spec{Name: "exports", Max: 3}.For("team:7"))
	defer lease.Release()

	report, _ := limiter.Inspect(context.Background(), keycap.Inspection{Name: "exports"})
	for _, p := range report.Pools {
		h := p.Holders[0]
		fmt.Printf("%s: %d of the slots held, by %s on %s\n", p.Key, p.Held, h.Label, h.Node)
	}
	// Output: team:7: 1 of the slots held, by req-42 on web-1
}
