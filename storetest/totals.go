package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

func testTotals(t *testing.T, ns Namespace) {
	runGroup(t, ns, store.Totals,
		"the store keeps no adaptive totals (store.Totals)", []namedTest{
			{"ReportsOfThePeriodBefore", testTotalReports},
			{"OneWinnerPerVersion", testTotalVersions},
			{"TotalsExpire", testTotalExpiry},
		})
}

func totalID(name string) store.PoolID {
	return store.PoolOf(store.Internal, "parent", "storetest-total-"+name)
}

// reportTotal reports data as node's for period and returns what the store
// answers.
func reportTotal(t *testing.T, s keycap.Store, id store.PoolID, node string, period int64, data string) (store.Total, []string) {
	t.Helper()
	tot, reports, err := s.ReportTotal(ctx(t), id, store.NodeOf(node), period, []byte(data), time.Minute)
	if err != nil {
		t.Fatalf("ReportTotal: %v", err)
	}
	out := make([]string, len(reports))
	for i, r := range reports {
		out[i] = string(r)
	}
	return tot, out
}

// testTotalReports: a node's report of a period replaces its own earlier
// one, and a report returns the period before's, from every client, in the
// order of their nodes.
func testTotalReports(t *testing.T, open func() keycap.Store) {
	a, b := open(), open()
	id := totalID("reports")
	if tot, prev := reportTotal(t, a, id, "n1", 10, "first"); tot.Version != 0 || len(prev) != 0 {
		t.Fatalf("a fresh total: %+v and %q, want none and no reports", tot, prev)
	}
	reportTotal(t, a, id, "n1", 10, "n1@10")
	reportTotal(t, b, id, "n2", 10, "n2@10")
	reportTotal(t, b, id, "n3", 9, "n3@9")
	_, prev := reportTotal(t, b, id, "n2", 11, "n2@11")
	// the order of NodeOf's bytes, whatever the order of the calls
	want := []string{"n1@10", "n2@10"}
	if n1, n2 := store.NodeOf("n1"), store.NodeOf("n2"); bytes.Compare(n1[:], n2[:]) > 0 {
		want[0], want[1] = want[1], want[0]
	}
	if len(prev) != 2 || prev[0] != want[0] || prev[1] != want[1] {
		t.Fatalf("reports of period 10: %q, want n1@10 and n2@10 in the order of their nodes", prev)
	}
	// Another total's reports are apart.
	if _, prev := reportTotal(t, a, totalID("reports-other"), "n1", 11, "x"); len(prev) != 0 {
		t.Fatalf("another total sees reports %q", prev)
	}
	// Binary reports come back as they were.
	bin := string([]byte{0, 1, 2, 0xff, 0})
	reportTotal(t, a, id, "n9", 20, bin)
	if _, prev := reportTotal(t, b, id, "n9", 21, ""); len(prev) != 1 || prev[0] != bin {
		t.Fatalf("binary report: %q, want %q", prev, bin)
	}
}

// testTotalVersions: of many clients that set the same version, one wins;
// the others read its state; a version is set only over the one before.
func testTotalVersions(t *testing.T, open func() keycap.Store) {
	id := totalID("versions")
	const clients = 8
	var wg sync.WaitGroup
	won := make(chan string, clients)
	seen := make(chan string, clients)
	for i := range clients {
		s := open()
		wg.Go(func() {
			state := fmt.Sprintf("client %d", i)
			tot, ok, err := s.SetTotal(ctx(t), id, 0, store.Total{Version: 5, State: []byte(state)}, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				won <- state
			}
			seen <- string(tot.State)
			if tot.Version != 5 {
				t.Errorf("after a SetTotal of version 5: version %d", tot.Version)
			}
		})
	}
	wg.Wait()
	close(won)
	close(seen)
	var winners []string
	for w := range won {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("%d clients won version 5 (%q), want exactly one", len(winners), winners)
	}
	for s := range seen {
		if s != winners[0] {
			t.Fatalf("a client read %q after the race, want the winner's %q", s, winners[0])
		}
	}
	s := open()
	// Over a version that is not the stored one: refused.
	if tot, ok, err := s.SetTotal(ctx(t), id, 4, store.Total{Version: 6, State: []byte("late")}, time.Minute); err != nil || ok || tot.Version != 5 {
		t.Fatalf("SetTotal over version 4 when 5 is stored: %+v, %v, %v; want refused, 5 kept", tot, ok, err)
	}
	if tot, ok, err := s.SetTotal(ctx(t), id, 5, store.Total{Version: 6, State: []byte("six")}, time.Minute); err != nil || !ok || string(tot.State) != "six" {
		t.Fatalf("SetTotal over version 5: %+v, %v, %v; want it set", tot, ok, err)
	}
	if tot, _ := reportTotal(t, s, id, "n", 7, ""); tot.Version != 6 || string(tot.State) != "six" {
		t.Fatalf("ReportTotal reads %+v, want version 6", tot)
	}
}

// testTotalExpiry: a total and its reports are forgotten after their TTL.
func testTotalExpiry(t *testing.T, open func() keycap.Store) {
	s := open()
	id := totalID("expiry")
	ttl := 200 * time.Millisecond
	if _, ok, err := s.SetTotal(ctx(t), id, 0, store.Total{Version: 3, State: []byte("x")}, ttl); err != nil || !ok {
		t.Fatalf("SetTotal: %v, %v", ok, err)
	}
	if _, _, err := s.ReportTotal(ctx(t), id, store.NodeOf("n"), 1, []byte("r"), ttl); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		tot, prev := reportTotal(t, s, id, "m", 2, "")
		return tot.Version == 0 && len(prev) == 0
	})
}
