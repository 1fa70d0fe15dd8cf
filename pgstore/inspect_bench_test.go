package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkInspect pages through the 100 pools of a name (a lease each)
// beside 100,000 pools of another name, in pages of 100 and of 10, and
// reports the time per page (µs/page), the pages and pools per paging, and
// the round trips per page (rt/page), counted on the wire. The tables are
// never analysed: the figure holds without statistics.
func BenchmarkInspect(b *testing.B) {
	const others, mine = 100_000, 100
	pool, w := pgenv.Counted(b, 1)
	schema := pgenv.Schema(b, pool)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		b.Fatal(err)
	}
	s, _ := pgstore.New(pool, pgstore.WithSchema(schema))
	expires := time.Now().Add(time.Hour)
	n, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "keycap_lease"}, []string{"pool", "owner", "expires_at"},
		pgx.CopyFromFunc(func() func() ([]any, error) {
			i := 0
			return func() ([]any, error) {
				if i == others {
					return nil, nil
				}
				i++
				p, o := store.PoolOf(0, "inspect-bench-other", fmt.Sprint(i)), store.NewOwner()
				return []any{p[:], o[:], expires}, nil
			}
		}()))
	if err != nil || n != others {
		b.Fatalf("copied %d rows: %v", n, err)
	}
	for i := range mine {
		d := store.Demand{Max: 1, TTL: time.Hour}
		if g, err := s.Acquire(ctx, store.PoolOf(0, "inspect-bench", fmt.Sprint(i)), store.NewOwner(), d); err != nil || !g.Granted {
			b.Fatalf("Acquire: %+v, %v", g, err)
		}
	}
	tag := store.TagOf(byte(keycap.FamilyApp), "inspect-bench")
	pageThrough := func(size int) (pages, pools int, err error) {
		q := store.PageQuery{Tag: tag, Limit: size}
		for {
			page, err := s.InspectPools(ctx, q)
			if err != nil {
				return 0, 0, err
			}
			pages++
			pools += len(page.Pools)
			if page.Next == "" {
				return pages, pools, nil
			}
			q.Cursor = page.Next
		}
	}
	for _, size := range []int{100, 10} {
		for range 10 { // past the plan cache's custom plans
			if _, pools, err := pageThrough(size); err != nil || pools != mine {
				b.Fatalf("%d pools, %v; want %d", pools, err, mine)
			}
		}
	}
	for _, size := range []int{100, 10} {
		b.Run(fmt.Sprintf("page=%d", size), func(b *testing.B) {
			var pages, pools int
			before := w.Load()
			start := time.Now()
			for b.Loop() {
				p, n, err := pageThrough(size)
				if err != nil || n != mine {
					b.Fatalf("%d pools, %v; want %d", n, err, mine)
				}
				pages, pools = pages+p, pools+n
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Microseconds())/float64(pages), "µs/page")
			b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
			b.ReportMetric(float64(pools)/float64(b.N), "pools/op")
			b.ReportMetric(float64(w.Load()-before)/float64(pages), "rt/page")
		})
	}
}
