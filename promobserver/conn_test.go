package promobserver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/promobserver"
)

func TestConnMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := promobserver.NewConnMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	caps, err := conncap.New(memstore.New(), conncap.WithDefaultCap(1), conncap.WithObserver(m))
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

	got := func(name, app string) float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, metric := range f.GetMetric() {
				for _, l := range metric.GetLabel() {
					if l.GetName() == "app" && l.GetValue() == app {
						if metric.Counter != nil {
							return metric.Counter.GetValue()
						}
						return metric.Gauge.GetValue()
					}
				}
			}
		}
		t.Fatalf("no %s{app=%q}", name, app)
		return 0
	}
	for _, c := range []struct {
		name, app string
		want      float64
	}{
		{"keycap_conn_admitted_total", "app", 1},
		{"keycap_conn_refused_total", "app", 1},
		{"keycap_conn_left_total", "app", 1},
		{"keycap_conn_open", "app", 0},
		{"keycap_conn_admitted_total", "other", 1},
		{"keycap_conn_open", "other", 1},
	} {
		if v := got(c.name, c.app); v != c.want {
			t.Errorf("%s{app=%q} = %v, want %v", c.name, c.app, v, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "keycap_conn_ghosts_dropped_total", "keycap_conn_store_failures_total"); n != 2 {
		t.Errorf("%d of the unlabelled counters registered, want 2", n)
	}
}
