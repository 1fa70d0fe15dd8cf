package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/pgstore"
)

// BenchmarkRoundTrips reports the round trips (rt/op) of each decision,
// counted on the wire.
func BenchmarkRoundTrips(b *testing.B) {
	pool, w := pgenv.Counted(b, 1)
	schema := pgenv.Schema(b, pool)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		b.Fatal(err)
	}
	s, _ := pgstore.New(pool, pgstore.WithSchema(schema))
	node := keycap.NewNodeID("bench")
	full := keycap.NewPoolID("rt", "full")
	for range 5 {
		_, _ = s.Acquire(ctx, full, keycap.NewOwner(), 5, time.Hour)
	}
	free, o := keycap.NewPoolID("rt", "free"), keycap.NewOwner()
	batch := make([]keycap.Renewal, 100)
	for i := range batch {
		batch[i] = keycap.Renewal{Pool: keycap.NewPoolID("rt-renew", fmt.Sprint(i)), Owner: keycap.NewOwner(), TTL: time.Minute}
		_, _ = s.Acquire(ctx, batch[i].Pool, batch[i].Owner, 1, time.Minute)
	}
	sync := make([]keycap.SyncPool, 100)
	for i := range sync {
		sync[i] = keycap.SyncPool{Pool: keycap.NewPoolID("rt-sync", fmt.Sprint(i)), Members: []keycap.Owner{keycap.NodeOwner(node, fmt.Sprint(i))}}
	}
	weighted := keycap.Demand{Pool: keycap.NewPoolID("rt", "weighted"), Owner: keycap.NewOwner(), Max: 5, TTL: time.Minute, Weight: 2}
	parent := keycap.MustParent("rt", 5).Pool()
	kid := keycap.Demand{Pool: keycap.NewPoolID("rt", "kid"), Owner: keycap.NewOwner(), Max: 5, TTL: time.Minute, Weight: 1,
		Parent: parent, ParentMax: 5, Share: 1, Keep: keycap.DefaultKeep}
	fullParent := keycap.MustParent("rt-full", 5).Pool()
	fullKid := func() keycap.Demand {
		return keycap.Demand{Pool: keycap.NewPoolID("rt", "full-kid"), Owner: keycap.NewOwner(), Max: 5, TTL: time.Hour, Weight: 1,
			Parent: fullParent, ParentMax: 5, Share: 1}
	}
	for range 5 {
		_, _, _ = s.AcquireDemand(ctx, fullKid(), nil)
	}
	ops := []struct {
		name string
		fn   func() error
	}{
		{"acquire", func() error { _, err := s.Acquire(ctx, free, o, 5, time.Minute); return err }},
		{"reject", func() error { _, err := s.Acquire(ctx, full, keycap.NewOwner(), 5, time.Minute); return err }},
		{"release", func() error { return s.Release(ctx, free, o) }},
		{"queue-refused", func() error {
			_, _, err := s.Queue(ctx, full, keycap.NewOwner(), 5, time.Minute, keycap.Ticket{TTL: time.Minute, Claim: time.Second})
			return err
		}},
		{"dequeue", func() error { return s.Dequeue(ctx, full, keycap.NewOwner()) }},
		{"renew-100", func() error { return s.Renew(ctx, batch) }},
		{"sync-100-pools", func() error { return s.Sync(ctx, node, time.Minute, sync) }},
		{"mark", func() error { _, _, err := s.Mark(ctx, free, time.Minute); return err }},
		{"pause", func() error { _, err := s.Pause(ctx, free, time.Second); return err }},
		{"paused", func() error { _, err := s.Paused(ctx, free); return err }},
		{"pace", func() error {
			_, err := s.Pace(ctx, free, keycap.Rate{Events: 1000, Period: time.Second, Burst: 1000})
			return err
		}},
		{"weighted-acquire", func() error { _, _, err := s.AcquireDemand(ctx, weighted, nil); return err }},
		{"weighted-release", func() error { _, err := s.ReleaseDemand(ctx, weighted, false); return err }},
		{"parent-acquire", func() error { _, _, err := s.AcquireDemand(ctx, kid, nil); return err }},
		{"parent-release", func() error { _, err := s.ReleaseDemand(ctx, kid, false); return err }},
		{"parent-refusal-with-ticket", func() error {
			_, _, err := s.AcquireDemand(ctx, fullKid(), &keycap.Ticket{TTL: time.Minute, Claim: time.Second})
			return err
		}},
	}
	for _, op := range ops {
		if err := op.fn(); err != nil { // warm the statement cache
			b.Fatal(op.name, err)
		}
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			before := w.Load()
			for b.Loop() {
				if err := op.fn(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(w.Load()-before)/float64(b.N), "rt/op")
		})
	}
}

// BenchmarkPairsVsSelect1 measures acquire+release pairs per second on 1, 8
// and 32 connections, beside SELECT 1 on the same pool, in alternating rounds
// of the same benchmark. A pair is two round trips: 0.5 is the ceiling.
func BenchmarkPairsVsSelect1(b *testing.B) {
	for _, conns := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			pool, _ := pgenv.Counted(b, int32(conns))
			schema := pgenv.Schema(b, pool)
			ctx := context.Background()
			if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
				b.Fatal(err)
			}
			s, _ := pgstore.New(pool, pgstore.WithSchema(schema))
			select1 := func(int) error { _, err := pool.Exec(ctx, "SELECT 1"); return err }
			pair := func(w int) error {
				p, o := keycap.NewPoolID("pairs", fmt.Sprint(w)), keycap.NewOwner()
				ok, err := s.Acquire(ctx, p, o, 1, time.Minute)
				if err != nil || !ok {
					return fmt.Errorf("acquire: %v %v", ok, err)
				}
				return s.Release(ctx, p, o)
			}
			t := testkit.Alternate(b, conns, max(conns*50, 500), 200, select1, pair)
			selTime, pairTime := t[0], t[1]
			b.ReportMetric(float64(selTime)/float64(pairTime), "pairs/select1")
			b.ReportMetric(float64(b.N)/pairTime.Seconds(), "pairs/s")
			b.ReportMetric(float64(b.N)/selTime.Seconds(), "select1/s")
		})
	}
}

// BenchmarkTableGrowth makes 1,000,000 acquisitions on 10,000 keys from 32
// connections — nine in ten released, one in ten abandoned to expire (a
// crashed holder) — and reports the rows left and the table's size, after
// half of them and at the end, to show that the table stays bounded without
// any cron (autovacuum, on by default, makes the swept rows' space
// reusable). Run it with -benchtime 1x.
func BenchmarkTableGrowth(b *testing.B) {
	const total, keys, conns = 1_000_000, 10_000, 32
	pool, _ := pgenv.Counted(b, conns)
	schema := pgenv.Schema(b, pool)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		b.Fatal(err)
	}
	var autovacuum string
	if err := pool.QueryRow(ctx, "SHOW autovacuum").Scan(&autovacuum); err != nil {
		b.Fatal(err)
	}
	if autovacuum != "on" {
		// Sweeps delete expired rows; autovacuum makes their space reusable.
		// Without it the row count stays bounded but the file grows forever.
		b.Fatalf("autovacuum is %s on this server: the figure would measure its absence (scripts/services.sh runs a PostgreSQL of its own with KEYCAP_PG_SYSTEM=)", autovacuum)
	}
	s, _ := pgstore.New(pool, pgstore.WithSchema(schema))
	rows := func() (n int64, bytes int64) {
		_ = pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size('`+schema+`.keycap_lease') FROM `+schema+`.keycap_lease`).Scan(&n, &bytes)
		return
	}
	for b.Loop() {
		var next atomic.Int64
		var peak, halfSize atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range conns {
			wg.Go(func() {
				for i := next.Add(1); i <= total; i = next.Add(1) {
					p, o := keycap.NewPoolID("growth", fmt.Sprint(rand.IntN(keys))), keycap.NewOwner()
					if _, err := s.Acquire(ctx, p, o, 1000, 200*time.Millisecond); err != nil {
						b.Error(err)
						return
					}
					if i%10 != 0 {
						if err := s.Release(ctx, p, o); err != nil {
							b.Error(err)
							return
						}
					}
					if i%100_000 == 0 {
						n, size := rows()
						for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
						}
						if i == total/2 {
							halfSize.Store(size)
						}
					}
				}
			})
		}
		wg.Wait()
		n, size := rows()
		b.ReportMetric(float64(n), "rows-left")
		b.ReportMetric(float64(peak.Load()), "peak-rows")
		b.ReportMetric(float64(halfSize.Load())/1024/1024, "table-MiB-at-half")
		b.ReportMetric(float64(size)/1024/1024, "table-MiB")
		b.ReportMetric(total/time.Since(start).Seconds(), "acquisitions/s")
	}
}
