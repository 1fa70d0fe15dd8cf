package promobserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/promobserver"
)

// TestConnections: connection caps report through the same Observer, as
// slots of the family "conn", one limit per app.
func TestConnections(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	caps, err := conncap.New(l, conncap.WithDefaultCap(1))
	if err != nil {
		t.Fatal(err)
	}
	defer caps.Close()
	ctx := context.Background()
	if err := caps.Admit(ctx, "app", "alice", "c1"); err != nil {
		t.Fatal(err)
	}
	if err := caps.Admit(ctx, "app", "alice", "c2"); !errors.Is(err, conncap.ErrOverCap) {
		t.Fatalf("second connection: %v, want over the cap", err)
	}
	if err := caps.Admit(ctx, "other", "alice", "c3"); err != nil {
		t.Fatal(err)
	}
	caps.Leave("app", "c1")
	want := `
# HELP keycap_slots_acquired_total Slots granted.
# TYPE keycap_slots_acquired_total counter
keycap_slots_acquired_total{family="conn",limit="app",shadow="false"} 1
keycap_slots_acquired_total{family="conn",limit="other",shadow="false"} 1
# HELP keycap_limit_exceeded_total Slots refused because the pool was full.
# TYPE keycap_limit_exceeded_total counter
keycap_limit_exceeded_total{family="conn",limit="app",shadow="false"} 1
keycap_limit_exceeded_total{family="conn",limit="other",shadow="false"} 0
# HELP keycap_slots_in_use Slots held by this process.
# TYPE keycap_slots_in_use gauge
keycap_slots_in_use{family="conn",limit="app",shadow="false"} 0
keycap_slots_in_use{family="conn",limit="other",shadow="false"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"keycap_slots_acquired_total", "keycap_limit_exceeded_total", "keycap_slots_in_use"); err != nil {
		t.Fatal(err)
	}
}
