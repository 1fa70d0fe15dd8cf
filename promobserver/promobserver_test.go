package promobserver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/promobserver"
	"github.com/keycap/keycap/store"
)

type flaky struct {
	keycap.Store
	down bool
}

func (f *flaky) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	if f.down {
		return store.Grant{}, errors.New("down")
	}
	return f.Store.Acquire(ctx, pool, owner, d)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := &flaky{Store: memstore.New()}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(obs), keycap.WithRecoverAfter(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:1")
	a, err := l.Acquire(ctx, exports)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, keycap.Spec{Name: "exports", Max: 1}.For("user:2")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, exports); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatal(err)
	}
	a.Release()
	store.down = true
	_, _ = l.Acquire(ctx, keycap.Spec{Name: "reports", Max: 1}.For("user:1"))
	_, _ = l.Acquire(ctx, keycap.Spec{Name: "reports", Max: 1}.For("user:1"))

	// Every series of a limit name exists from its first event, zeros
	// included, so that rates and ratios work from the start.
	want := `
# HELP keycap_limit_exceeded_total Slots refused because the pool was full.
# TYPE keycap_limit_exceeded_total counter
keycap_limit_exceeded_total{family="app",limit="exports",shadow="false"} 1
# HELP keycap_slots_acquired_total Slots granted.
# TYPE keycap_slots_acquired_total counter
keycap_slots_acquired_total{family="app",limit="exports",shadow="false"} 2
# HELP keycap_slots_in_use Slots held by this process.
# TYPE keycap_slots_in_use gauge
keycap_slots_in_use{family="app",limit="exports",shadow="false"} 1
# HELP keycap_slots_released_total Slots released.
# TYPE keycap_slots_released_total counter
keycap_slots_released_total{family="app",limit="exports",shadow="false"} 1
# HELP keycap_store_failures_total Store outages, counted at their first failure, by store partition.
# TYPE keycap_store_failures_total counter
keycap_store_failures_total{node=""} 1
# HELP keycap_store_up 0 during an outage of the store partition, else 1.
# TYPE keycap_store_up gauge
keycap_store_up{node=""} 0
`
	names := []string{"keycap_limit_exceeded_total", "keycap_slots_acquired_total", "keycap_slots_in_use",
		"keycap_slots_released_total", "keycap_store_failures_total", "keycap_store_up"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if h := family(t, reg, "keycap_hold_seconds"); h == nil || h.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Fatalf("hold histogram: %v", h)
	}
	// Keys never become labels.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), "user:") {
					t.Fatalf("%s has a key as a label: %v", mf.GetName(), lp)
				}
			}
		}
	}
	store.down = false
	time.Sleep(2 * time.Millisecond) // past the recover-after time, so that the next answer ends the outage
	if ls, err := l.Acquire(ctx, keycap.Spec{Name: "reports", Max: 1}.For("user:1")); err == nil {
		ls.Release()
	}
	if v := family(t, reg, "keycap_store_up").GetMetric()[0].GetGauge().GetValue(); v != 1 {
		t.Fatalf("store_up = %v after recovery", v)
	}
}

func family(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func TestRegisteringTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := promobserver.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := promobserver.New(reg); err == nil {
		t.Fatal("second registration accepted")
	}
	if _, err := promobserver.New(reg, promobserver.WithNamespace("other")); err != nil {
		t.Fatal(err)
	}
}

// TestLimitSuffix: limits that share a name count apart by their suffix,
// and a limit without one keeps its name.
func TestLimitSuffix(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg, promobserver.WithLimitSuffix(func(l keycap.Limit) string {
		src, _, _ := strings.Cut(l.Key(), "=")
		if src == l.Key() {
			return ""
		}
		return src
	}))
	if err != nil {
		t.Fatal(err)
	}
	l, err := keycap.NewLimiter(memstore.New(), keycap.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	spec := keycap.Spec{Name: "reports", Max: 1}
	for _, key := range []string{"user=alice", "user=bob", "ip=203.0.113.7", "plain"} {
		ls, err := l.Acquire(ctx, spec.For(key))
		if err != nil {
			t.Fatal(err)
		}
		ls.Release()
	}
	if _, err := l.Acquire(ctx, spec.For("user=alice")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, spec.For("user=alice")); !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatal(err)
	}
	want := `
# HELP keycap_slots_acquired_total Slots granted.
# TYPE keycap_slots_acquired_total counter
keycap_slots_acquired_total{family="app",limit="reports",shadow="false"} 1
keycap_slots_acquired_total{family="app",limit="reports ip",shadow="false"} 1
keycap_slots_acquired_total{family="app",limit="reports user",shadow="false"} 3
# HELP keycap_limit_exceeded_total Slots refused because the pool was full.
# TYPE keycap_limit_exceeded_total counter
keycap_limit_exceeded_total{family="app",limit="reports",shadow="false"} 0
keycap_limit_exceeded_total{family="app",limit="reports ip",shadow="false"} 0
keycap_limit_exceeded_total{family="app",limit="reports user",shadow="false"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "keycap_slots_acquired_total", "keycap_limit_exceeded_total"); err != nil {
		t.Fatal(err)
	}
}

// TestProcessOverloaded: a call lost in the process is counted apart from
// the store's outages, which it leaves alone.
func TestProcessOverloaded(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	obs, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		obs.Observe(keycap.Event{Kind: keycap.ProcessOverloaded, Node: "slots 0-5460"})
	}
	want := `
# HELP keycap_process_overloaded_total Store calls that ran out of their decision budget in this process (CPU starvation), not in the store, by store partition.
# TYPE keycap_process_overloaded_total counter
keycap_process_overloaded_total{node="slots 0-5460"} 2
# HELP keycap_store_up 0 during an outage of the store partition, else 1.
# TYPE keycap_store_up gauge
keycap_store_up{node=""} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "keycap_process_overloaded_total", "keycap_store_up", "keycap_store_failures_total"); err != nil {
		t.Fatal(err)
	}
}

func TestAdaptiveTotals(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := promobserver.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	o.Observe(keycap.Event{Kind: keycap.TotalChanged, Tuning: &keycap.Tuning{Parent: "db", Total: 40, Previous: 44,
		Reason: "latency", Mean: 30 * time.Millisecond, Baseline: 20 * time.Millisecond, InFlight: 43.5}})
	o.Observe(keycap.Event{Kind: keycap.TotalChanged, Tuning: &keycap.Tuning{Parent: "db", Total: 44, Previous: 40, Reason: "demand"}})
	o.Observe(keycap.Event{Kind: keycap.TotalChanged, Tuning: &keycap.Tuning{Parent: "db", Total: 7, Previous: 8, Reason: "overload", Shadow: true}})
	want := `
# HELP keycap_parent_total The adaptive total of a parent this process follows (enforced, or computed in shadow).
# TYPE keycap_parent_total gauge
keycap_parent_total{parent="db",shadow="false"} 44
keycap_parent_total{parent="db",shadow="true"} 7
# HELP keycap_parent_total_changes_total Changes of an adaptive total, by reason (demand, latency, overload).
# TYPE keycap_parent_total_changes_total counter
keycap_parent_total_changes_total{parent="db",reason="demand",shadow="false"} 1
keycap_parent_total_changes_total{parent="db",reason="latency",shadow="false"} 1
keycap_parent_total_changes_total{parent="db",reason="overload",shadow="true"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "keycap_parent_total", "keycap_parent_total_changes_total"); err != nil {
		t.Fatal(err)
	}
}
