package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// testInspect runs the inspection tests on a store with store.Inspection.
func testInspect(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Inspection,
		"the store cannot be inspected (store.Inspection)", []namedTest{
			{"PoolsOfANameWithTheirHolders", testInspectPools},
			{"PagesCoverEveryPoolOnce", testInspectPaging},
			{"ShowsTheWaitLine", testInspectLine},
			{"ShowsPausesAndPaces", testInspectPauses},
			{"LimiterReportsAcrossClients", testInspectLimiter},
			{"ShadowLimitCountsApart", testShadow},
		})
}

// allPools reads every page of tag, at most pages of them.
func allPools(t *testing.T, s keycap.Store, tag store.Tag, limit int) ([]store.PoolState, int) {
	t.Helper()
	return pageAll(t, func(cursor string) ([]store.PoolState, string, error) {
		page, err := s.InspectPools(ctx(t), store.PageQuery{Tag: tag, Cursor: cursor, Limit: limit})
		if err == nil && limit > 0 && len(page.Pools) > limit {
			err = fmt.Errorf("a page of %d pools, asked for at most %d", len(page.Pools), limit)
		}
		return page.Pools, page.Next, err
	})
}

// pageAll reads every page that next gives, from the first, at most 1000 of
// them, and returns their entries and the number of pages.
func pageAll[T any](t *testing.T, next func(cursor string) ([]T, string, error)) ([]T, int) {
	t.Helper()
	var out []T
	cursor := ""
	for pages := 1; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging did not end after 1000 pages")
		}
		entries, c, err := next(cursor)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		out = append(out, entries...)
		if c == "" {
			return out, pages
		}
		cursor = c
	}
}

func byPool(ps []store.PoolState) map[store.PoolID]store.PoolState {
	m := map[store.PoolID]store.PoolState{}
	for _, p := range ps {
		m[p.Pool] = p
	}
	return m
}

// testInspectPools: the pools of a name, and only those, each with its
// live holders and their time left; released and expired leases are gone.
func testInspectPools(t *testing.T, open func() keycap.Store) {
	a, b := open(), open()
	name := "storetest-inspect"
	id := func(key string) store.PoolID { return appPool(name, key) }
	owners := map[store.PoolID][]store.Owner{}
	for i, key := range []string{"k0", "k1", "k2"} {
		for range i + 1 {
			o := store.NewOwner()
			mustAcquire(t, []keycap.Store{a, b}[i%2], id(key), o, 5, time.Minute, true)
			owners[id(key)] = append(owners[id(key)], o)
		}
	}
	gone := store.NewOwner()
	mustAcquire(t, a, id("gone"), gone, 5, time.Minute, true)
	mustRelease(t, a, id("gone"), gone)
	mustAcquire(t, a, id("lapsed"), store.NewOwner(), 5, 50*time.Millisecond, true)
	mustAcquire(t, a, appPool("storetest-other", "k0"), store.NewOwner(), 5, time.Minute, true)
	time.Sleep(100 * time.Millisecond) // the lapsed lease's TTL, on the store's clock

	pools, _ := allPools(t, b, store.TagOf(byte(keycap.FamilyApp), name), 0)
	got := byPool(pools)
	if len(got) != 3 || len(pools) != 3 {
		t.Fatalf("%d pools (%d distinct), want the 3 with leases: %+v", len(pools), len(got), pools)
	}
	for p, want := range owners {
		st, ok := got[p]
		if !ok {
			t.Fatalf("pool %s missing", p)
		}
		var have []store.Owner
		for _, h := range st.Holders {
			have = append(have, h.Owner)
			if h.Expires <= 0 || h.Expires > time.Minute {
				t.Fatalf("holder expires in %s, want within its 1m TTL", h.Expires)
			}
			if h.Weight != 1 {
				t.Fatalf("plain lease of weight %d", h.Weight)
			}
		}
		if !sameOwners(have, want) || st.Held() != len(want) {
			t.Fatalf("pool %s holders %v (held %d), want %v", p, have, st.Held(), want)
		}
	}
	if a.Features().Has(store.Shares) {
		d := store.Demand{Max: 5, TTL: time.Minute, Shared: &store.Shared{Weight: 3}}
		if g, err := a.Acquire(ctx(t), id("heavy"), store.NewOwner(), d); err != nil || !g.Granted {
			t.Fatalf("Acquire of weight 3: %v, %v", g.Granted, err)
		}
		st := byPool(mustPools(t, b, store.TagOf(byte(keycap.FamilyApp), name)))[id("heavy")]
		if len(st.Holders) != 1 || st.Holders[0].Weight != 3 || st.Held() != 3 {
			t.Fatalf("weighted pool: %+v, want one holder of weight 3", st)
		}
	}
}

func mustPools(t *testing.T, s keycap.Store, tag store.Tag) []store.PoolState {
	t.Helper()
	ps, _ := allPools(t, s, tag, 0)
	return ps
}

func sameOwners(a, b []store.Owner) bool {
	cmp := func(x, y store.Owner) int { return slices.Compare(x[:], y[:]) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// testInspectPaging: pages of at most the asked size that together show
// every pool once, and end.
func testInspectPaging(t *testing.T, open func() keycap.Store) {
	s := open()
	name := "storetest-pages"
	const n = 57
	want := map[store.PoolID]bool{}
	for i := range n {
		p := appPool(name, fmt.Sprint(i))
		mustAcquire(t, s, p, store.NewOwner(), 1, time.Minute, true)
		want[p] = true
	}
	for _, size := range []int{1, 10, 1000} {
		pools, pages := allPools(t, open(), store.TagOf(byte(keycap.FamilyApp), name), size)
		got := byPool(pools)
		if len(got) != n {
			t.Fatalf("page size %d: %d distinct pools in %d pages, want %d", size, len(got), pages, n)
		}
		for p := range want {
			if _, ok := got[p]; !ok {
				t.Fatalf("page size %d: pool %s never shown", size, p)
			}
		}
		if size == 1000 && len(pools) != n {
			t.Fatalf("one page of 1000 shows %d pools, want %d", len(pools), n)
		}
	}
	if _, err := s.InspectPools(ctx(t), store.PageQuery{Tag: store.TagOf(byte(keycap.FamilyApp), name), Cursor: "not a cursor"}); err == nil {
		t.Fatal("a forged cursor was accepted")
	}
}

// testInspectLine: the tickets of a pool's line, its head first.
func testInspectLine(t *testing.T, open func() keycap.Store) {
	s := open()
	if !s.Features().Has(store.Lines) {
		t.Skip("the store keeps no wait line (store.Lines)")
	}
	p := appPool("storetest-inspect-line", "k")
	holder := store.NewOwner()
	mustAcquire(t, s, p, holder, 1, time.Minute, true)
	var line []store.Owner
	for range 3 {
		o := store.NewOwner()
		if g, err := s.Acquire(ctx(t), p, o, store.Demand{Max: 1, TTL: time.Minute, Line: longTicket}); err != nil || g.Granted {
			t.Fatalf("Acquire with a ticket: %v, %v", g.Granted, err)
		}
		line = append(line, o)
	}
	st := byPool(mustPools(t, open(), p.Tag()))[p]
	if len(st.Holders) != 1 || st.Holders[0].Owner != holder {
		t.Fatalf("holders %+v, want the one holder", st.Holders)
	}
	var got []store.Owner
	for _, w := range st.Waiting {
		got = append(got, w.Owner)
		if w.Expires <= 0 || w.Expires > time.Minute {
			t.Fatalf("ticket expires in %s, want within its 1m TTL", w.Expires)
		}
	}
	if !slices.Equal(got, line) {
		t.Fatalf("line %v, want %v in arrival order", got, line)
	}
}

// testInspectPauses: running pauses and paces of a tag, and no others.
func testInspectPauses(t *testing.T, open func() keycap.Store) {
	s := open()
	if !s.Features().Has(store.Pauses | store.Paces) {
		t.Skip("the store keeps no pauses or paces (store.Pauses, store.Paces)")
	}
	pauseID := func(api string) store.PoolID { return store.PoolOf(byte(keycap.FamilyPause), "storetest-pause", api) }
	if _, err := s.Pause(ctx(t), pauseID("billing"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(ctx(t), pauseID("short"), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(ctx(t), store.PoolOf(byte(keycap.FamilyPause), "storetest-other", "x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	paceID := store.PoolOf(byte(keycap.FamilyPause), "storetest-pace", "mail")
	rate := store.Rate{Events: 1, Period: time.Minute, Burst: 1}
	if d, err := s.Pace(ctx(t), paceID, rate); err != nil || d != 0 {
		t.Fatalf("Pace: %s, %v", d, err)
	}
	time.Sleep(50 * time.Millisecond) // the short pause ends
	pauses := allPauses(t, open(), pauseID("").Tag())
	if len(pauses) != 1 || pauses[0].ID != pauseID("billing") || pauses[0].Pace {
		t.Fatalf("pauses %+v, want the running pause of billing only", pauses)
	}
	if left := pauses[0].Left; left <= 0 || left > time.Minute {
		t.Fatalf("pause left %s, want within 1m", left)
	}
	paces := allPauses(t, s, paceID.Tag())
	if len(paces) != 1 || paces[0].ID != paceID || !paces[0].Pace || paces[0].Left <= 0 {
		t.Fatalf("paces %+v, want the pace of mail, ahead of the clock", paces)
	}
}

// allPauses reads every page of tag's pauses and paces: a store may return
// a page with fewer than asked, even none, before the last.
func allPauses(t *testing.T, s keycap.Store, tag store.Tag) []store.PauseState {
	t.Helper()
	pauses, _ := pageAll(t, func(cursor string) ([]store.PauseState, string, error) {
		page, err := s.InspectPauses(ctx(t), store.PageQuery{Tag: tag, Cursor: cursor})
		return page.Pauses, page.Next, err
	})
	return pauses
}

// testInspectLimiter: a Limiter's report of a limit across two clients:
// its own leases with their keys (shown on request), labels and ages, the
// other client's with their node and age from the owner's stamp, and its
// refusals.
func testInspectLimiter(t *testing.T, open func() keycap.Store) {
	la, err := keycap.NewLimiter(open(), keycap.WithNode("node-a"), keycap.WithInspection(keycap.InspectOptions{ShowKeys: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = la.Close() })
	lb, err := keycap.NewLimiter(open(), keycap.WithNode("node-b"), keycap.WithInspection(keycap.InspectOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	lim := keycap.Spec{Name: "storetest-report", Max: 2}.For("alice@example.com")
	a, err := la.Acquire(keycap.WithLabel(ctx(t), "req-1"), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	time.Sleep(20 * time.Millisecond) // an age to see
	b, err := lb.Acquire(ctx(t), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if _, err := lb.Acquire(ctx(t), lim); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("third Acquire of max 2: %v", err)
	}

	ra := report(t, la, "storetest-report")
	if len(ra.Pools) != 1 || ra.Pools[0].Pool != lim.Pool() || ra.Pools[0].Held != 2 || len(ra.Pools[0].Holders) != 2 {
		t.Fatalf("report %+v, want one pool of 2 holders", ra.Pools)
	}
	p := ra.Pools[0]
	if !p.KeyShown || p.Key != "alice@example.com" {
		t.Fatalf("key %q (shown %v), want it in clear: node a shows keys", p.Key, p.KeyShown)
	}
	mine, theirs := p.Holders[0], p.Holders[1] // oldest first
	if !mine.Here || mine.Label != "req-1" || mine.Node != "node-a" || mine.Age < 20*time.Millisecond {
		t.Fatalf("own holder %+v, want here, labelled req-1, node-a, at least 20ms old", mine)
	}
	if theirs.Here || theirs.Label != "" || theirs.Node != store.TagOf(store.Internal, "node:node-b").String() || theirs.Age < 0 || theirs.Age > time.Minute {
		t.Fatalf("other holder %+v, want node-b's tag and an age from the stamp", theirs)
	}
	rb := report(t, lb, "storetest-report")
	if rb.Pools[0].KeyShown || rb.Pools[0].Key != "" {
		t.Fatalf("node b shows the key %q: it did not opt in", rb.Pools[0].Key)
	}
	if len(rb.Refusals) != 1 || rb.Refusals[0].Pool != lim.Pool() || rb.Refusals[0].Key != "" || rb.RefusalsTotal != 1 {
		t.Fatalf("node b's refusals %+v (total %d), want its one, keyless", rb.Refusals, rb.RefusalsTotal)
	}
	if len(ra.Refusals) != 0 {
		t.Fatalf("node a reports refusals it did not make: %+v", ra.Refusals)
	}
}

// report reads every page of a Limiter's report of name: a store may return
// a page with fewer pools than asked, even none, before the last.
func report(t *testing.T, l *keycap.Limiter, name string) *keycap.Report {
	t.Helper()
	var first *keycap.Report
	pools, _ := pageAll(t, func(cursor string) ([]keycap.PoolReport, string, error) {
		r, err := l.Inspect(ctx(t), keycap.Inspection{Name: name, Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		if first == nil {
			first = r
		}
		return r.Pools, r.Next, nil
	})
	first.Pools, first.Next = pools, ""
	return first
}

// testShadow: a shadow limit beside the enforced one of the same name and
// key decides and reports, in pools of its own, and never refuses.
func testShadow(t *testing.T, open func() keycap.Store) {
	var refusedShadow, refusedEnforced int
	obs := keycap.ObserverFunc(func(e keycap.Event) {
		if e.Kind == keycap.LimitExceeded {
			if e.Limit.Shadow() {
				refusedShadow++
			} else {
				refusedEnforced++
			}
		}
	})
	l, err := keycap.NewLimiter(open(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	enforced := keycap.Spec{Name: "storetest-shadow", Max: 3}.For("k")
	candidate := keycap.Spec{Name: "storetest-shadow", Max: 1, Shadow: true}.For("k")
	if enforced.Pool() == candidate.Pool() {
		t.Fatal("the shadow limit shares the enforced limit's pool")
	}
	var leases []*keycap.Lease
	for i := range 3 {
		ls, err := l.Acquire(ctx(t), enforced, candidate)
		if err != nil {
			t.Fatalf("acquire %d: %v; a shadow limit never refuses", i+1, err)
		}
		leases = append(leases, ls)
	}
	if _, err := l.Acquire(ctx(t), enforced, candidate); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("fourth acquire: %v, want the enforced limit's refusal", err)
	}
	if refusedShadow != 3 || refusedEnforced != 1 {
		t.Fatalf("refusals: %d shadow, %d enforced; want 3 (acquires 2, 3, 4) and 1", refusedShadow, refusedEnforced)
	}
	held := func(tag store.Tag) int {
		n := 0
		for _, p := range mustPools(t, open(), tag) {
			n += p.Held()
		}
		return n
	}
	if e, s := held(enforced.Pool().Tag()), held(candidate.Pool().Tag()); e != 3 || s != 1 {
		t.Fatalf("held: %d enforced, %d shadow; want 3 and 1", e, s)
	}
	for _, ls := range leases {
		ls.Release()
	}
	// A store may free a slot after Release returns (store.AsyncRelease),
	// and a read of another client is not ordered with it: Close waits for
	// the releases in flight.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if e, s := held(enforced.Pool().Tag()), held(candidate.Pool().Tag()); e != 0 || s != 0 {
		t.Fatalf("after release: %d enforced, %d shadow held; want none", e, s)
	}
	// A shadow under a parent counts in a shadow of the parent, and shows
	// under its own tag.
	if open().Features().Has(store.Shares) {
		pl, err := keycap.NewLimiter(open())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pl.Close() })
		parent := keycap.MustParent("storetest-shadow-parent", 2)
		kid := keycap.Spec{Name: "storetest-shadow-kid", Max: 2, Parent: parent}.For("k")
		shadowKid := keycap.Spec{Name: "storetest-shadow-kid", Max: 1, Parent: parent, Shadow: true}.For("k")
		ls, err := pl.Acquire(ctx(t), kid, shadowKid)
		if err != nil {
			t.Fatal(err)
		}
		pools := mustPools(t, open(), shadowKid.Pool().Tag())
		if len(pools) != 1 || pools[0].Pool != shadowKid.Pool() || pools[0].Held() != 1 {
			t.Fatalf("shadow kid's pools %+v, want its one lease", pools)
		}
		if e := mustPools(t, open(), kid.Pool().Tag()); len(e) != 1 || e[0].Held() != 1 {
			t.Fatalf("enforced kid's pools %+v, want its one lease", e)
		}
		ls.Release()
	}
	// A whole Limiter in shadow mode refuses nothing.
	sl, err := keycap.NewLimiter(open(), keycap.WithShadowMode())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sl.Close() })
	for i := range 3 {
		ls, err := sl.Acquire(ctx(t), keycap.Spec{Name: "storetest-shadow-mode", Max: 1}.For("k"))
		if err != nil {
			t.Fatalf("shadow mode, acquire %d: %v", i+1, err)
		}
		defer ls.Release()
	}
}

// testOverrides runs the override tests on a store with store.Overrides.
func testOverrides(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Overrides,
		"the store keeps no overrides (store.Overrides)", []namedTest{
			{"SetListDeleteWithVersions", testOverrideCRUD},
			{"ExpiresByItself", testOverrideTTL},
			{"TakesEffectOnEveryClient", testOverrideAcross},
		})
}

func override(family keycap.Family, name, key string, max, share int, ttl time.Duration) store.Override {
	return store.Override{Family: uint8(family), Name: name, Key: key, Max: max, Share: share, TTL: ttl, Pool: store.PoolOf(byte(family), name, key)}
}

func testOverrideCRUD(t *testing.T, open func() keycap.Store) {
	a, b := open(), open()
	v0, list, err := b.Overrides(ctx(t), 0)
	if err != nil || len(list) != 0 {
		t.Fatalf("Overrides of an empty store: %v, %v", list, err)
	}
	alice := override(keycap.FamilyApp, "api", "alice", 10, 0, 0)
	bob := override(keycap.FamilyJob, "export", "bob\x00 ü", keycap.KeepMax, 4, 0)
	for _, o := range []store.Override{alice, bob} {
		if err := a.SetOverride(ctx(t), o); err != nil {
			t.Fatalf("SetOverride: %v", err)
		}
	}
	v1, list, err := b.Overrides(ctx(t), v0)
	if err != nil {
		t.Fatal(err)
	}
	if v1 == v0 || len(list) != 2 {
		t.Fatalf("after two sets: version %d (was %d), %d overrides; want a new version and 2", v1, v0, len(list))
	}
	for _, o := range list {
		want := alice
		if o.Pool == bob.Pool {
			want = bob
		}
		if o != want {
			t.Fatalf("read back %+v, want %+v", o, want)
		}
	}
	if v, list, err := b.Overrides(ctx(t), v1); err != nil || v != v1 || list != nil {
		t.Fatalf("unchanged since %d: version %d, list %v, err %v; want the same version and no list", v1, v, list, err)
	}
	alice.Max = 20
	if err := b.SetOverride(ctx(t), alice); err != nil {
		t.Fatal(err)
	}
	v2, list, err := a.Overrides(ctx(t), v1)
	if err != nil || v2 == v1 || len(list) != 2 {
		t.Fatalf("after a replace: version %d (was %d), %d overrides, %v", v2, v1, len(list), err)
	}
	if err := a.DeleteOverride(ctx(t), bob.Pool); err != nil {
		t.Fatal(err)
	}
	v3, list, err := b.Overrides(ctx(t), v2)
	if err != nil || v3 == v2 || len(list) != 1 || list[0] != alice {
		t.Fatalf("after a delete: version %d (was %d), %+v, %v; want alice's max 20 alone", v3, v2, list, err)
	}
	if err := a.DeleteOverride(ctx(t), bob.Pool); err != nil {
		t.Fatalf("deleting what is gone: %v", err)
	}
}

func testOverrideTTL(t *testing.T, open func() keycap.Store) {
	s := open()
	o := override(keycap.FamilyApp, "api", "brief", 1, 0, time.Second)
	if err := s.SetOverride(ctx(t), o); err != nil {
		t.Fatal(err)
	}
	_, list, err := s.Overrides(ctx(t), 0)
	if err != nil || len(list) != 1 || list[0].TTL <= 0 || list[0].TTL > time.Second {
		t.Fatalf("Overrides: %+v, %v; want one with at most 1s left", list, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, list, err := s.Overrides(ctx(t), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the override of 1s is still listed after 5s: %+v", list)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testOverrideAcross: an override set through one client's Limiter changes
// the max on another's within its refresh, and its reset restores it.
func testOverrideAcross(t *testing.T, open func() keycap.Store) {
	const refresh = 20 * time.Millisecond
	newLimiter := func() *keycap.Limiter {
		l, err := keycap.NewLimiter(open(), keycap.WithOverrides(refresh))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	admin, worker := newLimiter(), newLimiter()
	lim := keycap.Spec{Name: "storetest-override", Max: 3}.For("alice")
	count := func() int { // how many leases the worker gets now
		var got []*keycap.Lease
		defer func() {
			for _, ls := range got {
				ls.Release()
			}
		}()
		for range 5 {
			ls, err := worker.Acquire(ctx(t), lim)
			if errors.Is(err, keycap.ErrLimitExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ls)
		}
		return len(got)
	}
	until := func(want int, what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second) // the refresh, many times over
		for {
			n := count()
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the worker gets %d leases, want %d", what, n, want)
			}
			time.Sleep(refresh / 2)
		}
	}
	until(3, "no override")
	if err := admin.SetOverride(ctx(t), keycap.Override{Name: "storetest-override", Key: "alice", Max: 1}); err != nil {
		t.Fatal(err)
	}
	if err := admin.SetOverride(ctx(t), keycap.Override{Name: "storetest-override", Key: "bob", Max: 5}); err != nil {
		t.Fatal(err)
	}
	until(1, "max overridden to 1")
	if got := admin.Overridden(lim).Max(); got != 1 {
		t.Fatalf("the admin's Limiter applies max %d, want 1 at once", got)
	}
	list, err := worker.Overrides(ctx(t))
	if err != nil || len(list) != 2 {
		t.Fatalf("Overrides: %+v, %v", list, err)
	}
	if err := admin.ResetOverride(ctx(t), keycap.FamilyApp, "storetest-override", "alice"); err != nil {
		t.Fatal(err)
	}
	until(3, "after the reset")
	if err := admin.SetOverride(ctx(t), keycap.Override{Name: "storetest-override", Key: "alice", Max: keycap.KeepMax}); err == nil {
		t.Fatal("an override that changes nothing was accepted")
	}
	if _, err := keycap.NewLimiter(open(), keycap.WithOverrides(time.Microsecond)); err == nil {
		t.Fatal("a refresh of 1µs was accepted")
	}
}
