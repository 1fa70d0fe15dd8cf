package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkParentDecision measures what a parent's decision costs
// PostgreSQL with n keys waiting: a parent of 20, held by 20 keys, while n
// other keys wait with a ticket each. An op is one handoff and one queuing:
// a holder releases (the slot goes to the key the fair share serves next,
// announced by NOTIFY), then asks again with a ticket and is refused (its
// key waits, so n keys wait again). Each call is timed alone (µs/release,
// µs/refusal); the wait for the notification is not counted. The decisions'
// cost should not grow with n (store.Shares). KEYCAP_PARENT_KEYS caps n
// (the largest size takes a while to set up on a store whose queuing grows
// with the keys waiting).
func BenchmarkParentDecision(b *testing.B) {
	sizes := []int{10, 200, 2000, 20000}
	if v, err := strconv.Atoi(os.Getenv("KEYCAP_PARENT_KEYS")); err == nil {
		for len(sizes) > 1 && sizes[len(sizes)-1] > v {
			sizes = sizes[:len(sizes)-1]
		}
	}
	pool := pgenv.Pool(b)
	schema := pgenv.Schema(b, pool)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		b.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			parent := keycap.MustParent(fmt.Sprintf("decision-%d-%d", n, time.Now().UnixNano()), 20).Pool()
			type member struct {
				pool  store.PoolID
				owner store.Owner
			}
			d := store.Demand{Max: 1, TTL: time.Hour, Line: store.Ticket{TTL: time.Hour, Claim: time.Hour},
				Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 20, Share: 1}}}
			byOwner := map[store.Owner]member{}
			var holders []member
			for i := range 20 + n {
				m := member{store.PoolOf(0, "decision", fmt.Sprint(i)), store.NewOwner()}
				byOwner[m.owner] = m
				g, err := s.Acquire(ctx, m.pool, m.owner, d)
				if err != nil {
					b.Fatal(err)
				}
				if g.Granted {
					holders = append(holders, m)
				}
			}
			if len(holders) != 20 {
				b.Fatalf("%d holders, want 20", len(holders))
			}
			served := make(chan store.Owner, 64)
			stop, err := s.Notify(ctx, parent, func(g []store.Owner) {
				for _, o := range g {
					served <- o
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			var release, refusal time.Duration
			b.ResetTimer()
			for i := range b.N {
				h := holders[i%20]
				t0 := time.Now()
				if _, err := s.Release(ctx, h.pool, h.owner, d, false); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				g, err := s.Acquire(ctx, h.pool, h.owner, d)
				release, refusal = release+t1.Sub(t0), refusal+time.Since(t1)
				if err != nil {
					b.Fatal(err)
				}
				if g.Granted {
					b.Fatal("a holder that released was granted again while keys wait")
				}
				select {
				case o := <-served:
					holders[i%20] = byOwner[o]
				case <-time.After(10 * time.Second):
					b.Fatal("no handoff announced in 10 s")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(release.Microseconds())/float64(b.N), "µs/release")
			b.ReportMetric(float64(refusal.Microseconds())/float64(b.N), "µs/refusal")
		})
	}
}
