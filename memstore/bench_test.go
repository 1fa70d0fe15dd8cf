package memstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// BenchmarkAcquireRelease measures one acquire and one release on memstore,
// serial and parallel, on 1 and 10,000 keys, beside the same pair on a
// buffered channel (one key: it has no keys) in the same run.
// Pools have room for every goroutine, so nothing is refused.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	const room = 1 << 20
	for _, keys := range []int{1, 10000} {
		s := memstore.New()
		pools := make([]store.PoolID, keys)
		for i := range pools {
			pools[i] = store.PoolOf(0, "bench", fmt.Sprint(i))
		}
		b.Run(fmt.Sprintf("memstore/serial/keys=%d", keys), func(b *testing.B) {
			o := store.NewOwner()
			i := 0
			for b.Loop() {
				p := pools[i%keys]
				i++
				if g, _ := s.Acquire(ctx, p, o, store.Demand{Max: room, TTL: time.Minute}); !g.Granted {
					b.Fatal("refused")
				}
				_, _ = s.Release(ctx, p, o, store.Demand{}, false)
			}
		})
		b.Run(fmt.Sprintf("memstore/parallel/keys=%d", keys), func(b *testing.B) {
			var seq atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				o := store.NewOwner()
				i := int(seq.Add(7919))
				for pb.Next() {
					p := pools[i%keys]
					i++
					if g, _ := s.Acquire(ctx, p, o, store.Demand{Max: room, TTL: time.Minute}); !g.Granted {
						b.Fatal("refused")
					}
					_, _ = s.Release(ctx, p, o, store.Demand{}, false)
				}
			})
		})
	}
	// The floor: a buffered channel as a counting semaphore, the cheapest
	// cap Go has (one key; x/sync/semaphore is in internal/peerbench).
	sem := make(chan struct{}, room)
	b.Run("chan-semaphore/serial/keys=1", func(b *testing.B) {
		for b.Loop() {
			sem <- struct{}{}
			<-sem
		}
	})
	b.Run("chan-semaphore/parallel/keys=1", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sem <- struct{}{}
				<-sem
			}
		})
	})
}
