package peerbench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/bulkhead"
	"golang.org/x/sync/semaphore"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkInProcessSlot measures taking and giving back one slot in
// process: memstore (through the Store and through a Limiter) beside
// golang.org/x/sync/semaphore and failsafe-go's bulkhead, serial and
// parallel, in the same run. The peers have no keys and no leases; the
// semaphore is the floor a keyed cap pays above.
func BenchmarkInProcessSlot(b *testing.B) {
	ctx := context.Background()
	const room = 1 << 20
	s := memstore.New()
	pool := store.PoolOf(0, "bench", "k")
	l, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	limit := keycap.Spec{Name: "bench", Max: room, TTL: time.Minute}.For("k")
	sem := semaphore.NewWeighted(room)
	bh := bulkhead.New[any](room)
	cases := []struct {
		name string
		op   func(o store.Owner) error // o: the goroutine's own owner token
	}{
		{"x-sync-semaphore", func(store.Owner) error {
			if err := sem.Acquire(ctx, 1); err != nil {
				return err
			}
			sem.Release(1)
			return nil
		}},
		{"failsafe-go-bulkhead", func(store.Owner) error {
			if err := bh.AcquirePermit(ctx); err != nil {
				return err
			}
			bh.ReleasePermit()
			return nil
		}},
		{"memstore", func(o store.Owner) error {
			if _, err := s.Acquire(ctx, pool, o, store.Demand{Max: room, TTL: time.Minute}); err != nil {
				return err
			}
			_, err := s.Release(ctx, pool, o, store.Demand{}, false)
			return err
		}},
		{"keycap-limiter", func(store.Owner) error { // a fresh owner per lease, inside
			ls, err := l.Acquire(ctx, limit)
			if err != nil {
				return err
			}
			ls.Release()
			return nil
		}},
		{"keycap-limiter-do", func(store.Owner) error { // Do: the lease is reused
			return l.Do(ctx, noop, limit)
		}},
	}
	for _, c := range cases {
		b.Run(c.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			o := store.NewOwner()
			for b.Loop() {
				if err := c.op(o); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				o := store.NewOwner()
				for pb.Next() {
					if err := c.op(o); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func noop(context.Context) error { return nil }
