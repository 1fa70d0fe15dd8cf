package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/store"
)

// testFeatures checks what the contract asks of Features itself: the store
// declares the same features every time, and answers each method of a
// feature it does not declare with an error matching store.ErrNotSupported
// (as store.Unsupported does), so that a caller that did not check Features
// learns why rather than getting a wrong answer.
func testFeatures(t *testing.T, open func() keycap.Store) {
	s := open()
	has := s.Features()
	if again := s.Features(); again != has {
		t.Fatalf("Features returned %s, then %s: it must return the same value every time", has, again)
	}
	t.Logf("features: %s", has)
	p := pool("features")
	unsupported := func(method string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrNotSupported) {
			t.Errorf("%s of a feature the store does not declare: %v, want an error matching store.ErrNotSupported", method, err)
		}
	}
	// A demand that needs an undeclared feature is refused as such, never
	// served as another kind of demand.
	demands := []struct {
		need store.Features
		d    store.Demand
	}{
		{store.Lines, store.Demand{Max: 1, TTL: time.Minute, Line: store.Ticket{TTL: time.Minute, Claim: time.Second}}},
		{store.Pinned, store.Demand{Max: 1, TTL: time.Minute, Pinned: true}},
		{store.Shares, store.Demand{Max: 2, TTL: time.Minute, Shared: &store.Shared{Weight: 2}}},
		{store.Fences, store.Demand{Max: 1, TTL: time.Minute, Fence: true}},
	}
	for _, c := range demands {
		if has.Has(c.need) {
			continue
		}
		g, err := s.Acquire(ctx(t), pool("features-demand"), store.NewOwner(), c.d)
		if g.Granted {
			t.Errorf("a demand that needs %s, which the store does not declare, was granted", c.need)
		}
		unsupported("Acquire of a demand that needs "+c.need.String(), err)
	}
	if !has.Has(store.AsyncRelease) {
		done := make(chan error, 1)
		s.ReleaseAsync(p, store.NewOwner(), store.Demand{}, time.Second, func(err error) {
			select {
			case done <- err:
			default:
			}
		})
		unsupported("ReleaseAsync", testkit.Recv(t, done, 10*time.Second, "ReleaseAsync's done"))
	}
	if !has.Has(store.Notifications) {
		stop, err := s.Notify(ctx(t), p, func([]store.Owner) {})
		if err == nil && stop != nil {
			stop()
		}
		unsupported("Notify", err)
	}
	if !has.Has(store.Members) {
		batch := []store.SyncPool{{Pool: p}}
		unsupported("Sync", s.Sync(ctx(t), store.NodeOf("storetest"), time.Minute, batch))
	}
	if !has.Has(store.Marks) {
		_, _, err := s.Mark(ctx(t), p, time.Minute)
		unsupported("Mark", err)
	}
	if !has.Has(store.Pauses) {
		_, err := s.Pause(ctx(t), p, time.Minute)
		unsupported("Pause", err)
		_, err = s.Paused(ctx(t), p)
		unsupported("Paused", err)
	}
	if !has.Has(store.Paces) {
		_, err := s.Pace(ctx(t), p, store.Rate{Events: 1, Period: time.Second, Burst: 1})
		unsupported("Pace", err)
	}
	if !has.Has(store.Inspection) {
		_, err := s.InspectPools(ctx(t), store.PageQuery{Tag: p.Tag()})
		unsupported("InspectPools", err)
		_, err = s.InspectPauses(ctx(t), store.PageQuery{Tag: p.Tag()})
		unsupported("InspectPauses", err)
	}
	if !has.Has(store.Overrides) {
		o := override(keycap.FamilyApp, "storetest-features", "k", 1, 0, time.Minute)
		unsupported("SetOverride", s.SetOverride(ctx(t), o))
		unsupported("DeleteOverride", s.DeleteOverride(ctx(t), o.Pool))
		_, _, err := s.Overrides(ctx(t), 0)
		unsupported("Overrides", err)
	}
	if !has.Has(store.Totals) {
		_, _, err := s.ReportTotal(ctx(t), p, store.NodeOf("storetest"), 1, []byte{1}, time.Minute)
		unsupported("ReportTotal", err)
		_, _, err = s.SetTotal(ctx(t), p, 0, store.Total{Version: 1, State: []byte{1}}, time.Minute)
		unsupported("SetTotal", err)
	}
}
