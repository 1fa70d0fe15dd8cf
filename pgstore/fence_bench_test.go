package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkFence measures what a fencing token adds to a grant: the same
// owner granted again (each grant a new token), plain and of a parent's
// key, with and without Demand.Fence, and the round trips of each.
func BenchmarkFence(b *testing.B) {
	pool, rt := pgenv.Counted(b, 1)
	schema := pgenv.Schema(b, pool)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		b.Fatal(err)
	}
	s, _ := pgstore.New(pool, pgstore.WithSchema(schema))
	parent := keycap.MustParent("bench-fence", 5).Pool()
	for _, kind := range []string{"plain", "parent"} {
		for _, fence := range []bool{false, true} {
			d := store.Demand{Max: 5, TTL: time.Minute, Fence: fence}
			if kind == "parent" {
				d.Shared = &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 5, Share: 1}}
			}
			name := kind + "/unfenced"
			if fence {
				name = kind + "/fenced"
			}
			b.Run(name, func(b *testing.B) {
				p, o := store.PoolOf(0, "bench-fence", name), store.NewOwner()
				before := rt.Load()
				for b.Loop() {
					if g, err := s.Acquire(ctx, p, o, d); !g.Granted || err != nil || (fence && g.Token == 0) {
						b.Fatal(g, err)
					}
				}
				b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
				_, _ = s.Release(ctx, p, o, d, false)
			})
		}
	}
}
