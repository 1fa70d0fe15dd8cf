package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/store"
)

// BenchmarkBatcherVsAutoPipeline sets the store's own batcher (batch.go)
// beside go-redis's AutoPipeliner (v9.23, experimental; its deferred,
// ordered face with default options, whose Submit lets the release's two
// commands travel together) on the same work: the acquire script
// and the release's ZREM + EXISTS, from 1, 8 and 64 goroutines, in
// alternating rounds. ratio is the batcher's pairs/s over the
// autopipeliner's.
func BenchmarkBatcherVsAutoPipeline(b *testing.B) {
	acquireLua := readLua(b, "line.lua") + readLua(b, "acquire.lua")
	for _, g := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			c := testenv.Redis(b)
			s := newStore(b, c, testenv.Prefix(b, c))
			ap, err := c.AsyncAutoPipeline()
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			sha, err := c.ScriptLoad(ctx, acquireLua).Result()
			if err != nil {
				b.Fatal(err)
			}
			pools := make([]store.PoolID, g)
			for i := range pools {
				pools[i] = store.PoolOf(0, "batcher-vs-ap", fmt.Sprint(i))
			}
			batcher := func(w int) error {
				o := store.NewOwner()
				if g, err := s.Acquire(ctx, pools[w], o, store.Demand{Max: 1, TTL: time.Minute}); err != nil || !g.Granted {
					return fmt.Errorf("acquire: %v %v", g.Granted, err)
				}
				_, err := s.Release(ctx, pools[w], o, store.Demand{}, false)
				return err
			}
			auto := func(w int) error {
				o := store.NewOwner()
				slots := s.Key(pools[w])
				line, meta := s.LineKeys(pools[w])
				acq := redis.NewCmd(ctx, "evalsha", sha, 3, slots, line, meta, o[:], 1, 60000, s.Channel(pools[w]))
				acq.SetFirstKeyPos(3)
				if err := ap.Submit(ctx, acq).Wait(); err != nil {
					return err
				}
				if n, err := acq.Int(); err != nil || n != 1 {
					return fmt.Errorf("acquire: %v %v", n, err)
				}
				zrem := redis.NewIntCmd(ctx, "zrem", slots, o[:])
				exists := redis.NewIntCmd(ctx, "exists", line)
				f1, f2 := ap.Submit(ctx, zrem), ap.Submit(ctx, exists)
				if err := f1.Wait(); err != nil {
					return err
				}
				return f2.Wait()
			}
			t := testkit.Alternate(b, g, max(g*50, 500), 200, batcher, auto)
			b.ReportMetric(float64(b.N)/t[0].Seconds(), "batcher-pairs/s")
			b.ReportMetric(float64(b.N)/t[1].Seconds(), "autopipeline-pairs/s")
			b.ReportMetric(float64(t[1])/float64(t[0]), "ratio")
		})
	}
}

func readLua(b *testing.B, name string) string {
	src, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(string(src)) + "\n"
}
