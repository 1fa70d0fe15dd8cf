package gateway

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/keycap/keycap"
)

// clock is a history's time, moved by the test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func testHistory(keys int) (*history, *clock) {
	c := &clock{t: time.Unix(1_800_000_000, 0)} // on a step's and a minute's start
	h := newHistory()
	h.configure(keys)
	h.now = c.now
	return h, c
}

func event(kind keycap.EventKind, pool, key string, d time.Duration) keycap.Event {
	e := keycap.Event{Kind: kind, Family: keycap.FamilyApp, Limit: keycap.Spec{Name: pool, Max: 2}.For(key)}
	switch kind {
	case keycap.SlotReleased:
		e.Held = d
	default:
		e.Waited = d
	}
	return e
}

func limitView(t *testing.T, h History, pool, source string) LimitHistory {
	t.Helper()
	for _, l := range h.Limits {
		if l.Pool == pool && l.Source == source {
			return l
		}
	}
	t.Fatalf("no limit %s %s in %+v", pool, source, h.Limits)
	return LimitHistory{}
}

// TestHistorySeries: a limit's chart shows the most slots held in each step,
// carries the level over steps without events (back from now), counts the
// refusals of each step and the mean waiting; two limits of one pool (two
// key sources) stay apart; a step older than the window is gone.
func TestHistorySeries(t *testing.T) {
	h, c := testHistory(100)
	alice, ip := "header:X-User=alice", "ip:203.0.113.7"
	h.Observe(event(keycap.SlotAcquired, "api", alice, 0))
	h.Observe(event(keycap.SlotAcquired, "api", alice, 2*time.Second)) // waited 2 s
	h.Observe(event(keycap.SlotAcquired, "api", ip, 0))
	c.advance(3 * HistoryStep) // three steps without events: 2 held all along
	h.Observe(event(keycap.LimitExceeded, "api", alice, 0))
	h.Observe(event(keycap.LimitExceeded, "api", alice, 0))
	h.Observe(event(keycap.SlotReleased, "api", alice, 15*time.Second))
	c.advance(HistoryStep)

	v := h.view(HistoryQuery{})
	user := limitView(t, v, "api", "header:X-User")
	n := len(user.InUse)
	if n != historySteps {
		t.Fatalf("%d points, want %d", n, historySteps)
	}
	// Points, oldest first: ..., [n-5] the acquires, [n-4..n-2] no event,
	// [n-2] refusals and a release, [n-1] now.
	got := fmt.Sprint(user.InUse[n-6:], user.Refused[n-6:], user.Waiting[n-5])
	if want := fmt.Sprint([]int{0, 2, 2, 2, 2, 1}, []int{0, 0, 0, 0, 2, 0}, 2/HistoryStep.Seconds()); got != want {
		t.Fatalf("in use, refused, waiting: %s, want %s", got, want)
	}
	if byIP := limitView(t, v, "api", "ip"); byIP.InUse[n-1] != 1 || byIP.RefusedTotal != 0 {
		t.Fatalf("the ip limit: in use %d, refused %d; want 1, 0 (not merged with the header's)", byIP.InUse[n-1], byIP.RefusedTotal)
	}
	c.advance(HistoryWindow)
	if user = limitView(t, h.view(HistoryQuery{}), "api", "header:X-User"); user.RefusedTotal != 0 || user.InUse[0] != 1 {
		t.Fatalf("a window later: refused %d, in use %d; want 0 and the level held since (1)", user.RefusedTotal, user.InUse[0])
	}
}

// TestHistoryKeys: the key table counts each key's refusals and slot-time
// in the window, sorts and filters them, forgets them after the window, and
// stays within its bound under a flood of new keys while keeping the key
// refused all along.
func TestHistoryKeys(t *testing.T) {
	h, c := testHistory(50)
	for range 5 {
		h.Observe(event(keycap.LimitExceeded, "api", "header:X-User=greedy", 0))
	}
	h.Observe(event(keycap.SlotReleased, "api", "header:X-User=slow", 90*time.Second))
	c.advance(2 * time.Minute)
	h.Observe(event(keycap.LimitExceeded, "api", "header:X-User=other", 0))
	keys := func(q HistoryQuery) string {
		var out []string
		for _, k := range limitView(t, h.view(q), "api", "header:X-User").Keys {
			out = append(out, fmt.Sprintf("%s:%d:%g", k.Key, k.Refused, k.SlotSeconds))
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct {
		q    HistoryQuery
		want string
	}{
		{HistoryQuery{}, "[header:X-User=greedy:5:0 header:X-User=other:1:0 header:X-User=slow:0:90]"},
		{HistoryQuery{Sort: "slot", N: 1}, "[header:X-User=slow:0:90]"},
		{HistoryQuery{Sort: "last"}, "[header:X-User=other:1:0 header:X-User=greedy:5:0 header:X-User=slow:0:90]"},
		{HistoryQuery{Search: "GREE"}, "[header:X-User=greedy:5:0]"},
	} {
		if got := keys(tc.q); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.q, got, tc.want)
		}
	}

	// A flood of new keys, each refused once; greedy refused all along.
	for i := range 2000 {
		h.Observe(event(keycap.LimitExceeded, "api", fmt.Sprintf("header:X-User=flood-%d", i), 0))
		if i%10 == 0 {
			h.Observe(event(keycap.LimitExceeded, "api", "header:X-User=greedy", 0))
		}
	}
	v := limitView(t, h.view(HistoryQuery{N: 1}), "api", "header:X-User")
	if v.KeysSeen > 50 || v.KeysDropped < 1900 {
		t.Fatalf("%d keys in the table, %d dropped: want at most 50, at least 1,900 dropped", v.KeysSeen, v.KeysDropped)
	}
	if v.Keys[0].Key != "header:X-User=greedy" || v.Keys[0].Refused != 205 {
		t.Fatalf("top key %+v, want greedy with 205 refusals", v.Keys[0])
	}
	c.advance(HistoryWindow)
	if v = limitView(t, h.view(HistoryQuery{}), "api", "header:X-User"); len(v.Keys) != 0 || v.KeysSeen != 0 {
		t.Fatalf("a window later: %d keys (%d seen), want none", len(v.Keys), v.KeysSeen)
	}
}

// TestHistoryOff: a history that is off records nothing and forgets what it
// had; history_keys 0 keeps the charts and no key.
func TestHistoryOff(t *testing.T) {
	h, _ := testHistory(0)
	h.Observe(event(keycap.LimitExceeded, "api", "header:X-User=a", 0))
	v := limitView(t, h.view(HistoryQuery{}), "api", "header:X-User")
	if v.RefusedTotal != 1 || len(v.Keys) != 0 {
		t.Fatalf("history_keys 0: refused %d, %d keys; want 1 and none", v.RefusedTotal, len(v.Keys))
	}
	h.configure(-1)
	h.Observe(event(keycap.LimitExceeded, "api", "header:X-User=a", 0))
	if v := h.view(HistoryQuery{}); !v.Off || len(v.Limits) != 0 {
		t.Fatalf("off: %+v, want nothing", v)
	}
}

// TestMergeHistories: the histories of two gateways add up point by point
// (aligned on the newer window) and key by key.
func TestMergeHistories(t *testing.T) {
	a, ca := testHistory(10)
	b, cb := testHistory(10)
	ca.advance(-HistoryStep) // gateway a's window ends one step earlier
	a.Observe(event(keycap.LimitExceeded, "api", "header:X-User=x", 0))
	b.Observe(event(keycap.LimitExceeded, "api", "header:X-User=x", 0))
	b.Observe(event(keycap.LimitExceeded, "api", "header:X-User=y", 0))
	_ = cb // a's view ends a step before b's: its points shift by one
	m := MergeHistories("refused", 10, a.view(HistoryQuery{}), b.view(HistoryQuery{}))
	l := limitView(t, m, "api", "header:X-User")
	n := len(l.Refused)
	if got := fmt.Sprintf("%v %d %s %d", l.Refused[n-2:], l.RefusedTotal, l.Keys[0].Key, l.Keys[0].Refused); got != "[1 2] 3 header:X-User=x 2" {
		t.Fatalf("merged: %s", got)
	}
	if !slices.Equal(l.InUse, make([]int, n)) {
		t.Fatalf("in use %v, want zeros", l.InUse)
	}
}

// TestTopKeepsTheFirst: the heap keeps exactly the n first of a sort.
func TestTopKeepsTheFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, sort := range Sorts {
		for _, n := range []int{0, 1, 3, 10, 200} {
			var all []keyRank
			best := top[keyRank]{n: n, cmp: keyOrder(sort)}
			for i := range 150 {
				k := keyRank{key: fmt.Sprint(i), refused: r.IntN(5), held: time.Duration(r.IntN(5)), last: int64(r.IntN(5))}
				all = append(all, k)
				best.push(k)
			}
			slices.SortFunc(all, keyOrder(sort))
			if got, want := best.sorted(), all[:min(n, len(all))]; !slices.Equal(got, want) {
				t.Fatalf("sort %s, n %d: %v, want %v", sort, n, got, want)
			}
		}
	}
}

// TestHistoryTrimsOnReload: a reload that lowers history_keys frees the
// keys over the new bound at once; 0 keeps none.
func TestHistoryTrimsOnReload(t *testing.T) {
	h, _ := testHistory(100)
	for i := range 100 {
		h.Observe(event(keycap.LimitExceeded, "api", fmt.Sprintf("header:X-User=u%d", i), 0))
	}
	for _, keys := range []int{10, 0} {
		h.configure(keys)
		if v := limitView(t, h.view(HistoryQuery{N: 1000}), "api", "header:X-User"); v.KeysSeen != keys {
			t.Fatalf("history_keys %d: %d keys kept", keys, v.KeysSeen)
		}
	}
}
