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
	"github.com/keycap/keycap/store"
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
	node := store.NodeOf("bench")
	full := store.PoolOf(0, "rt", "full")
	for range 5 {
		_, _ = s.Acquire(ctx, full, store.NewOwner(), store.Demand{Max: 5, TTL: time.Hour})
	}
	// lease is a demand with the pool and the owner it is made for.
	type lease struct {
		pool  store.PoolID
		owner store.Owner
		d     store.Demand
	}
	free := lease{store.PoolOf(0, "rt", "free"), store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute}}
	refused := func() lease {
		return lease{full, store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute}}
	}
	batch := make([]store.Renewal, 100)
	for i := range batch {
		batch[i] = store.Renewal{Pool: store.PoolOf(0, "rt-renew", fmt.Sprint(i)), Owner: store.NewOwner(), TTL: time.Minute}
		_, _ = s.Acquire(ctx, batch[i].Pool, batch[i].Owner, store.Demand{Max: 1, TTL: time.Minute})
	}
	sync := make([]store.SyncPool, 100)
	for i := range sync {
		sync[i] = store.SyncPool{Pool: store.PoolOf(0, "rt-sync", fmt.Sprint(i)), Members: []store.Owner{store.MemberOf(node, fmt.Sprint(i))}}
	}
	weighted := lease{store.PoolOf(0, "rt", "weighted"), store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute, Shared: &store.Shared{Weight: 2}}}
	parent := keycap.MustParent("rt", 5).Pool()
	kid := lease{store.PoolOf(0, "rt", "kid"), store.NewOwner(), store.Demand{Max: 5, TTL: time.Minute, Shared: &store.Shared{Weight: 1,
		Parent: store.Parent{Pool: parent, Max: 5, Share: 1, Keep: keycap.DefaultKeep}}}}
	fullParent := keycap.MustParent("rt-full", 5).Pool()
	fullKid := func() lease {
		return lease{store.PoolOf(0, "rt", "full-kid"), store.NewOwner(), store.Demand{Max: 5, TTL: time.Hour, Shared: &store.Shared{Weight: 1,
			Parent: store.Parent{Pool: fullParent, Max: 5, Share: 1}}}}
	}
	acquire := func(l lease) error { _, err := s.Acquire(ctx, l.pool, l.owner, l.d); return err }
	release := func(l lease, leave bool) error { _, err := s.Release(ctx, l.pool, l.owner, l.d, leave); return err }
	for range 5 {
		_ = acquire(fullKid())
	}
	ticket := store.Ticket{TTL: time.Minute, Claim: time.Second}
	ops := []struct {
		name string
		fn   func() error
	}{
		{"acquire", func() error { return acquire(free) }},
		{"reject", func() error { return acquire(refused()) }},
		{"release", func() error { return release(free, false) }},
		{"queue-refused", func() error {
			l := refused()
			l.d.Line = ticket
			return acquire(l)
		}},
		{"dequeue", func() error { return release(refused(), true) }},
		{"renew-100", func() error { return s.Renew(ctx, batch) }},
		{"sync-100-pools", func() error { return s.Sync(ctx, node, time.Minute, sync) }},
		{"mark", func() error { _, _, err := s.Mark(ctx, free.pool, time.Minute); return err }},
		{"pause", func() error { _, err := s.Pause(ctx, free.pool, time.Second); return err }},
		{"paused", func() error { _, err := s.Paused(ctx, free.pool); return err }},
		{"pace", func() error {
			_, err := s.Pace(ctx, free.pool, store.Rate{Events: 1000, Period: time.Second, Burst: 1000})
			return err
		}},
		{"weighted-acquire", func() error { return acquire(weighted) }},
		{"weighted-release", func() error { return release(weighted, false) }},
		{"parent-acquire", func() error { return acquire(kid) }},
		{"parent-release", func() error { return release(kid, false) }},
		{"parent-refusal-with-ticket", func() error {
			l := fullKid()
			l.d.Line = ticket
			return acquire(l)
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
				p, o, d := store.PoolOf(0, "pairs", fmt.Sprint(w)), store.NewOwner(), store.Demand{Max: 1, TTL: time.Minute}
				g, err := s.Acquire(ctx, p, o, d)
				if err != nil || !g.Granted {
					return fmt.Errorf("acquire: %v %v", g.Granted, err)
				}
				_, err = s.Release(ctx, p, o, d, false)
				return err
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
					p, o := store.PoolOf(0, "growth", fmt.Sprint(rand.IntN(keys))), store.NewOwner()
					d := store.Demand{Max: 1000, TTL: 200 * time.Millisecond}
					if _, err := s.Acquire(ctx, p, o, d); err != nil {
						b.Error(err)
						return
					}
					if i%10 != 0 {
						if _, err := s.Release(ctx, p, o, d, false); err != nil {
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
