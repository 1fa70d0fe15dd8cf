package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// TestPoolsOfANameShareItsTag: every pool of a name starts with the name's
// tag, and the rest of the ID still tells keys, names and families apart.
func TestPoolsOfANameShareItsTag(t *testing.T) {
	t.Parallel()
	tag := store.TagOf(byte(keycap.FamilyApp), "api")
	seen := map[store.PoolID]bool{}
	for _, key := range []string{"", "a", "b", "alice@example.com"} {
		p := store.PoolOf(0, "api", key)
		if p.Tag() != tag || seen[p] {
			t.Fatalf("pool of key %q: tag %s (want %s), seen before %v", key, p.Tag(), tag, seen[p])
		}
		seen[p] = true
	}
	if store.TagOf(byte(keycap.FamilyJob), "api") == tag || store.TagOf(byte(keycap.FamilyApp), "apj") == tag {
		t.Fatal("another family or name has the same tag")
	}
	if l := (keycap.Spec{Name: "api", Max: 1, Shadow: true}).For("k"); l.Pool().Tag() == tag || l.Pool() == store.PoolOf(0, "api", "k") {
		t.Fatal("a shadow limit counts in the enforced limit's pools")
	}
}

// TestOwnersCarryTheirNodeAndTime: the owners of a Limiter's leases are
// unique and stamped with its node's tag and when they were asked for.
func TestOwnersCarryTheirNodeAndTime(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	l, _ := newLimiter(t, s, keycap.WithNode("stamp-node"))
	before := time.Now().Add(-3 * time.Millisecond) // stamps read the coarse clock: a ms or two off
	ls := acquire(t, l, limit(t, keycap.Spec{Name: "stamp", Max: 1}, "k"))
	defer ls.Release()
	page, err := s.InspectPools(context.Background(), store.PageQuery{Tag: store.TagOf(byte(keycap.FamilyApp), "stamp")})
	if err != nil || len(page.Pools) != 1 || len(page.Pools[0].Holders) != 1 {
		t.Fatalf("InspectPools: %+v, %v", page, err)
	}
	node, at, ok := keycap.Stamp(page.Pools[0].Holders[0].Owner)
	nodeTag := store.TagOf(store.Internal, "node:stamp-node")
	if !ok || node != nodeTag || at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now().Add(3*time.Millisecond)) {
		t.Fatalf("stamp: node %s (want %s), at %s (want about now), ok %v", node, nodeTag, at, ok)
	}
	// Many leases at once: never two equal owners.
	big := limit(t, keycap.Spec{Name: "stamp-many", Max: 10000}, "k")
	owners := map[store.Owner]bool{}
	var leases []*keycap.Lease
	for range 2000 {
		leases = append(leases, acquire(t, l, big))
	}
	page, err = s.InspectPools(context.Background(), store.PageQuery{Tag: big.Pool().Tag()})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range page.Pools[0].Holders {
		owners[h.Owner] = true
	}
	if len(owners) != 2000 {
		t.Fatalf("%d distinct owners among 2000 leases", len(owners))
	}
	for _, ls := range leases {
		ls.Release()
	}
}

// ctxObserver records the context values its events came with.
type ctxObserver struct {
	plain []keycap.EventKind
	ctx   map[keycap.EventKind]any
}

func (o *ctxObserver) Observe(e keycap.Event) { o.plain = append(o.plain, e.Kind) }
func (o *ctxObserver) ObserveContext(ctx context.Context, e keycap.Event) {
	o.ctx[e.Kind] = ctx.Value(ctxKey{})
}

type ctxKey struct{}

// TestContextObserverGetsTheCallersContext: acquisitions and refusals come
// with the Acquire's context, through Observers too; releases without one.
func TestContextObserverGetsTheCallersContext(t *testing.T) {
	t.Parallel()
	o := &ctxObserver{ctx: map[keycap.EventKind]any{}}
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(keycap.Observers(o, keycap.ObserverFunc(func(keycap.Event) {}))))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.WithValue(context.Background(), ctxKey{}, "the caller")
	lim := limit(t, keycap.Spec{Name: "ctx", Max: 1}, "k")
	ls, err := l.Acquire(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatal(err)
	}
	ls.Release()
	if o.ctx[keycap.SlotAcquired] != "the caller" || o.ctx[keycap.LimitExceeded] != "the caller" {
		t.Fatalf("context events %v, want acquired and exceeded with the caller's context", o.ctx)
	}
	if len(o.plain) != 1 || o.plain[0] != keycap.SlotReleased {
		t.Fatalf("plain events %v, want the release alone", o.plain)
	}
}

// TestShadowNeverRefusesNorFails: a shadow limit over its cap, of max 0, or
// on a failing store, lets the call through and reports what it saw.
func TestShadowNeverRefusesNorFails(t *testing.T) {
	t.Parallel()
	fs := newFaultStore()
	l, rec := newLimiter(t, fs, keycap.WithDefaultFailMode(keycap.FailClosed))
	zero := limit(t, keycap.Spec{Name: "shadow-zero", Max: 0, Shadow: true}, "k")
	ls := acquire(t, l, zero)
	ls.Release()
	if e, ok := last(rec, keycap.LimitExceeded); !ok || !e.Limit.Shadow() {
		t.Fatalf("max 0 shadow: no shadow refusal reported (%+v)", e)
	}
	fs.fail.Store(true)
	ls = acquire(t, l, limit(t, keycap.Spec{Name: "shadow-down", Max: 5, Shadow: true, FailMode: keycap.FailClosed}, "k"))
	ls.Release()
	if _, ok := last(rec, keycap.StoreFailed); !ok {
		t.Fatal("the shadow limit's store failure was not reported")
	}
	if rec.Count(keycap.SlotAcquired, "shadow-down") != 0 {
		t.Fatal("a slot was reported acquired in a failing store")
	}
}

// TestOverrideRules: an override changes max and share, never lifts a
// key above its parent, and a Limiter without WithOverrides ignores them.
func TestOverrideRules(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	l, _ := newLimiter(t, s, keycap.WithOverrides(time.Hour)) // loads at start and on each set
	parent := keycap.MustParent("override-parent", 4)
	kid := limit(t, keycap.Spec{Name: "override-kid", Max: 2, Parent: parent, Share: 1}, "k")
	if err := l.SetOverride(context.Background(), keycap.Override{Name: "override-kid", Key: "k", Max: 100, Share: 3}); err != nil {
		t.Fatal(err)
	}
	got := l.Overridden(kid)
	if got.Max() != 4 || got.Spec().Share != 3 {
		t.Fatalf("overridden kid: max %d share %d, want 4 (its parent's) and 3", got.Max(), got.Spec().Share)
	}
	if err := l.SetOverride(context.Background(), keycap.Override{Name: "override-kid", Key: "k", Max: keycap.KeepMax, Share: 2}); err != nil {
		t.Fatal(err)
	}
	if got := l.Overridden(kid); got.Max() != 2 || got.Spec().Share != 2 {
		t.Fatalf("share only: max %d share %d, want 2 and 2", got.Max(), got.Spec().Share)
	}
	plain, _ := newLimiter(t, s)
	if got := plain.Overridden(kid); got.Max() != 2 || got.Spec().Share != 1 {
		t.Fatalf("a Limiter without WithOverrides applies one: max %d share %d", got.Max(), got.Spec().Share)
	}
	for _, bad := range []keycap.Override{
		{Key: "k", Max: 1},
		{Name: "n", Max: -2},
		{Name: "n", Max: 1, Share: -1},
		{Name: "n", Max: 1, TTL: -time.Second},
		{Name: "n", Max: 1, Family: 9},
	} {
		var inv *keycap.InvalidLimitError
		if err := l.SetOverride(context.Background(), bad); !errors.As(err, &inv) {
			t.Fatalf("override %+v: %v, want an *InvalidLimitError", bad, err)
		}
	}
	if _, err := keycap.NewLimiter(newFaultStore(), keycap.WithOverrides(0)); !errors.Is(err, keycap.ErrNotSupported) {
		t.Fatalf("WithOverrides on a store without overrides: %v", err)
	}
	if _, err := plain.Inspect(context.Background(), keycap.Inspection{}); err == nil {
		t.Fatal("Inspect of an empty name was accepted")
	}
	np, _ := newLimiter(t, newFaultStore())
	if _, err := np.Inspect(context.Background(), keycap.Inspection{Name: "x"}); !errors.Is(err, keycap.ErrNotSupported) {
		t.Fatalf("Inspect on a store that cannot: %v", err)
	}
}

// TestShadowUnderAParentTakesNoEnforcedSlot: a shadow limit under the
// parent of an enforced one counts in a shadow of the parent, never in its
// total.
func TestShadowUnderAParentTakesNoEnforcedSlot(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New())
	parent := keycap.MustParent("shadow-parent", 2)
	enforced := func(key string) keycap.Limit {
		return limit(t, keycap.Spec{Name: "shadow-kid", Max: 2, Parent: parent}, key)
	}
	candidate := limit(t, keycap.Spec{Name: "shadow-kid", Max: 1, Parent: parent, Shadow: true}, "a")
	a := acquire(t, l, enforced("a"), candidate)
	defer a.Release()
	b := acquire(t, l, enforced("b"), limit(t, keycap.Spec{Name: "shadow-kid", Max: 1, Parent: parent, Shadow: true}, "b"))
	defer b.Release()
	// The parent's 2 slots are taken by the two enforced leases alone.
	refused(t, l, enforced("c"), enforced("c"))
}

// TestOverrideBelowTheWeightRefusesAtOnce: an override whose max leaves no
// room for the limit's weight refuses at once, rather than wait for room
// that can never be.
func TestOverrideBelowTheWeightRefusesAtOnce(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New(), keycap.WithOverrides(time.Hour))
	heavy := limit(t, keycap.Spec{Name: "override-heavy", Max: 5, Weight: 3, Wait: 5 * time.Second}, "k")
	if err := l.SetOverride(context.Background(), keycap.Override{Name: "override-heavy", Key: "k", Max: 2}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	refused(t, l, heavy, heavy)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refused after %s of its 5s wait, want at once", d)
	}
}

// TestShadowLeaseReleasedWhenAnObserverPanics: a panic while the enforced
// slots are reported gives back the shadow slots too.
func TestShadowLeaseReleasedWhenAnObserverPanics(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	l, err := keycap.NewLimiter(s, keycap.WithObserver(keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.SlotAcquired && !e.Limit.Shadow() {
			panic("observer")
		}
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	shadow := limit(t, keycap.Spec{Name: "panic-shadow", Max: 5, Shadow: true}, "k")
	func() {
		defer func() { _ = recover() }()
		_, _ = l.Acquire(context.Background(), limit(t, keycap.Spec{Name: "panic-shadow", Max: 5}, "k"), shadow)
	}()
	page, err := s.InspectPools(context.Background(), store.PageQuery{Tag: shadow.Pool().Tag()})
	if err != nil || len(page.Pools) != 0 {
		t.Fatalf("shadow pools after the panic: %+v, %v; want none held", page.Pools, err)
	}
}

// TestNodeAndOwnerTokensKeepTheirRandomness: node IDs and member owners take
// the hash after the tag that every such hash shares, and a job's owner is
// never read as a stamped one.
func TestNodeAndOwnerTokensKeepTheirRandomness(t *testing.T) {
	t.Parallel()
	seen := map[[4]byte]bool{}
	for i := range 64 {
		id := store.NodeOf(fmt.Sprint("node-", i))
		seen[[4]byte(id[:4])] = true
	}
	if len(seen) < 60 {
		t.Fatalf("64 node IDs have %d distinct first halves", len(seen))
	}
	a, b := store.MemberOf(store.NodeOf("n"), "x"), store.MemberOf(store.NodeOf("n"), "y")
	if [4]byte(a[8:12]) == [4]byte(b[8:12]) {
		t.Fatal("two members' owners share their first four hash bytes")
	}
	for i := range 2000 {
		if _, _, ok := keycap.Stamp(frontdoor.OwnerFor(fmt.Sprint("job-", i))); ok {
			t.Fatalf("OwnerFor(job-%d) reads as a stamped owner", i)
		}
	}
}

// TestRefusalRateIsPerLimit: a report's refusal rate counts its own limit's
// refusals over the window, however many other limits refuse, beyond what
// the ring of recent refusals keeps.
func TestRefusalRateIsPerLimit(t *testing.T) {
	t.Parallel()
	l, _ := newLimiter(t, memstore.New(), keycap.WithInspection(keycap.InspectOptions{Refusals: 8}))
	for range 50 {
		_, _ = l.Acquire(context.Background(), limit(t, keycap.Spec{Name: "rate-a", Max: 0}, "k"))
	}
	for range 300 {
		_, _ = l.Acquire(context.Background(), limit(t, keycap.Spec{Name: "rate-b", Max: 0}, "k"))
	}
	r, err := l.Inspect(context.Background(), keycap.Inspection{Name: "rate-a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := 50 / keycap.RefusalWindow.Seconds(); r.RefusalsPerSecond != want || r.RefusalsTotal != 350 || len(r.Refusals) != 0 {
		t.Fatalf("rate %.1f/s (want %.1f), total %d (want 350), %d recent (the ring holds only rate-b's)", r.RefusalsPerSecond, want, r.RefusalsTotal, len(r.Refusals))
	}
}
