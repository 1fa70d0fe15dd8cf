package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// slotLocks takes slots the way the PHP seed (laravel-concurrency-limit)
// does: slot i of a pool is its own lock key, taken with SET NX PX; an
// acquire tries the slots in turn from a random one, so a refusal costs max
// round trips. It is the baseline the lease set is measured against.
type slotLocks struct {
	c      redis.UniversalClient
	prefix string
}

var releaseLock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func (s slotLocks) key(p store.PoolID, i int) string {
	return fmt.Sprintf("%sslot:{%s}:%d", s.prefix, p, i)
}

func (s slotLocks) acquire(ctx context.Context, p store.PoolID, o store.Owner, max int, ttl time.Duration) (int, error) {
	start := rand.IntN(max)
	for i := range max {
		slot := (start + i) % max
		ok, err := s.c.SetNX(ctx, s.key(p, slot), o[:], ttl).Result()
		if err != nil {
			return -1, err
		}
		if ok {
			return slot, nil
		}
	}
	return -1, nil
}

func (s slotLocks) release(ctx context.Context, p store.PoolID, o store.Owner, slot int) error {
	return releaseLock.Run(ctx, s.c, []string{s.key(p, slot)}, o[:]).Err()
}

// BenchmarkRoundTrips reports, per operation, the round trips (rt/op)
// counted by a go-redis hook, for the lease set and for the baseline.
func BenchmarkRoundTrips(b *testing.B) {
	c := testenv.Redis(b)
	prefix := testenv.Prefix(b, c)
	s := newStore(b, c, prefix)
	base := slotLocks{c: c, prefix: prefix}
	ctx := context.Background()
	rt := testenv.CountRoundTrips(c)
	report := func(b *testing.B, before int64) {
		b.ReportMetric(float64(rt.Load()-before)/float64(b.N), "rt/op")
	}
	for _, max := range []int{1, 5, 20, 100} {
		// A full pool, for the reject rows.
		full := store.PoolOf(0, "bench-full", fmt.Sprint(max))
		for i := range max {
			if g, err := s.Acquire(ctx, full, store.NewOwner(), store.Demand{Max: max, TTL: time.Hour}); !g.Granted || err != nil {
				b.Fatal(g.Granted, err)
			}
			if slot, err := base.acquire(ctx, full, store.NewOwner(), max, time.Hour); slot < 0 || err != nil {
				b.Fatal(i, slot, err)
			}
		}
		free := store.PoolOf(0, "bench-free", fmt.Sprint(max))

		b.Run(fmt.Sprintf("max=%d/acquire/keycap", max), func(b *testing.B) {
			o := store.NewOwner()
			before := rt.Load()
			for b.Loop() {
				if g, err := s.Acquire(ctx, free, o, store.Demand{Max: max, TTL: time.Minute}); !g.Granted || err != nil {
					b.Fatal(g.Granted, err)
				}
			}
			report(b, before)
			_, _ = s.Release(ctx, free, o, store.Demand{}, false)
		})
		b.Run(fmt.Sprintf("max=%d/acquire/slot-locks", max), func(b *testing.B) {
			// Half the slots taken: the typical acquire tries several.
			var held []store.Owner
			var slots []int
			for range max / 2 {
				o := store.NewOwner()
				slot, _ := base.acquire(ctx, free, o, max, time.Minute)
				held, slots = append(held, o), append(slots, slot)
			}
			o := store.NewOwner()
			var trips int64
			for b.Loop() {
				before := rt.Load()
				slot, err := base.acquire(ctx, free, o, max, time.Minute)
				if slot < 0 || err != nil {
					b.Fatal(slot, err)
				}
				trips += rt.Load() - before
				b.StopTimer() // the release is not part of the row
				_ = base.release(ctx, free, o, slot)
				b.StartTimer()
			}
			b.ReportMetric(float64(trips)/float64(b.N), "rt/op")
			for i := range held {
				_ = base.release(ctx, free, held[i], slots[i])
			}
		})
		b.Run(fmt.Sprintf("max=%d/reject/keycap", max), func(b *testing.B) {
			o := store.NewOwner()
			before := rt.Load()
			for b.Loop() {
				if g, err := s.Acquire(ctx, full, o, store.Demand{Max: max, TTL: time.Minute}); g.Granted || err != nil {
					b.Fatal(g.Granted, err)
				}
			}
			report(b, before)
		})
		b.Run(fmt.Sprintf("max=%d/reject/slot-locks", max), func(b *testing.B) {
			o := store.NewOwner()
			before := rt.Load()
			for b.Loop() {
				if slot, err := base.acquire(ctx, full, o, max, time.Minute); slot >= 0 || err != nil {
					b.Fatal(slot, err)
				}
			}
			report(b, before)
		})
		b.Run(fmt.Sprintf("max=%d/release/keycap", max), func(b *testing.B) {
			o := store.NewOwner()
			before := rt.Load()
			for b.Loop() {
				if _, err := s.Release(ctx, free, o, store.Demand{}, false); err != nil {
					b.Fatal(err)
				}
			}
			report(b, before)
		})
		b.Run(fmt.Sprintf("max=%d/release/slot-locks", max), func(b *testing.B) {
			o := store.NewOwner()
			before := rt.Load()
			for b.Loop() {
				if err := base.release(ctx, free, o, 0); err != nil {
					b.Fatal(err)
				}
			}
			report(b, before)
		})
	}
}

// BenchmarkHungRedis measures one decision against a Redis frozen with
// SIGSTOP, with the Limiter's default decision budget and without one (the
// client's own timeouts, go-redis's defaults: a 3 s read timeout, retried 3
// times). Run it with a small -benchtime: the unbudgeted decision takes
// seconds.
func BenchmarkHungRedis(b *testing.B) {
	rp := testenv.StartRedis(b)
	o := rp.Options()
	o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 3*time.Second, 3*time.Second, 3
	c := redis.NewClient(o)
	defer c.Close()
	store, _ := redisstore.New(c)
	ctx := context.Background()
	lim := keycap.Spec{Name: "hung", Max: 10}.For("k")
	rp.Hang()
	for _, bc := range []struct {
		name   string
		budget time.Duration
	}{{"budget=250ms", keycap.DefaultBudget}, {"no-budget", time.Hour}} {
		b.Run(bc.name, func(b *testing.B) {
			l, _ := keycap.NewLimiter(store, keycap.WithDecisionBudget(bc.budget))
			defer l.Close()
			for b.Loop() {
				if ls, err := l.Acquire(ctx, lim); err == nil {
					ls.Release()
				}
			}
		})
	}
}

// BenchmarkReplicaAcks measures acquire+release pairs on the 3-master
// cluster (each master with a replica) with WithReplicaAcks(1, 1s) and
// without, in the same run.
func BenchmarkReplicaAcks(b *testing.B) {
	c := testenv.RedisCluster(b)
	prefix := testenv.Prefix(b, c)
	plain, _ := redisstore.New(c, redisstore.WithPrefix(prefix))
	acked, _ := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, time.Second))
	ctx := context.Background()
	pools := make([]store.PoolID, 64)
	for i := range pools {
		pools[i] = store.PoolOf(0, "acks", fmt.Sprint(i))
	}
	pair := func(s *redisstore.Store) func(int) error {
		return func(w int) error {
			o := store.NewOwner()
			g, err := s.Acquire(ctx, pools[w%len(pools)], o, store.Demand{Max: 1000, TTL: time.Minute})
			if err != nil || !g.Granted {
				return fmt.Errorf("acquire: %v %v", g.Granted, err)
			}
			_, err = s.Release(ctx, pools[w%len(pools)], o, store.Demand{}, false)
			return err
		}
	}
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			t := testkit.Alternate(b, g, 200, 50, pair(plain), pair(acked))
			b.ReportMetric(float64(t[0])/float64(t[1]), "acked-pairs/plain-pairs")
			b.ReportMetric(float64(t[1].Microseconds())/float64(b.N), "acked-us/pair")
			b.ReportMetric(float64(t[0].Microseconds())/float64(b.N), "plain-us/pair")
		})
	}
}

// BenchmarkScriptCost measures, per acquire+release pair on one pool with
// room, the Redis server's CPU (the sum of INFO commandstats' usec over the
// pairs) and the pairs per second, for a plain lease, a lease of weight 2
// and a lease of a parent's key: what weights and parents cost in Redis.
func BenchmarkScriptCost(b *testing.B) {
	parent := keycap.MustParent("cost", 1<<20).Pool()
	for _, kind := range []string{"plain", "weight=2", "parent"} {
		b.Run(kind, func(b *testing.B) {
			c := testenv.Redis(b)
			s := newStore(b, c, testenv.Prefix(b, c))
			ctx := context.Background()
			p := store.PoolOf(0, "cost", kind)
			pair := func() error {
				o := store.NewOwner()
				switch kind {
				case "plain":
					if g, err := s.Acquire(ctx, p, o, store.Demand{Max: 1 << 20, TTL: time.Minute}); err != nil || !g.Granted {
						return fmt.Errorf("acquire: %v %v", g.Granted, err)
					}
					_, err := s.Release(ctx, p, o, store.Demand{}, false)
					return err
				}
				d := store.Demand{Max: 1 << 20, TTL: time.Minute, Shared: &store.Shared{Weight: 1}}
				if kind == "weight=2" {
					d.Shared.Weight = 2
				} else {
					d.Shared.Parent = store.Parent{Pool: parent, Max: 1 << 20, Share: 1, Keep: keycap.DefaultKeep}
				}
				if g, err := s.Acquire(ctx, p, o, d); err != nil || !g.Granted {
					return fmt.Errorf("acquire: %v %v", g.Granted, err)
				}
				_, err := s.Release(ctx, p, o, d, false)
				return err
			}
			for range 200 { // load the script, warm the connection
				if err := pair(); err != nil {
					b.Fatal(err)
				}
			}
			before := serverUsec(b, c)
			b.ResetTimer()
			for b.Loop() {
				if err := pair(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((serverUsec(b, c)-before)/float64(b.N), "redis-µs/pair")
		})
	}
}

// serverUsec returns the CPU Redis spent on commands so far, in µs: the sum
// of usec over INFO commandstats (a script's commands count in it and in
// the script's own usec).
func serverUsec(b *testing.B, c redis.UniversalClient) float64 {
	return sumInfo(b, c, "commandstats", func(line string) (string, bool) {
		_, rest, ok := strings.Cut(line, "usec=")
		v, _, _ := strings.Cut(rest, ",")
		return v, ok
	})
}

// scriptUsec returns the time Redis spent in scripts and functions (EVALSHA
// and FCALL) so far, in µs, and the calls: a script's usec counts the
// commands it runs.
func scriptUsec(b *testing.B, c redis.UniversalClient) (usec, calls float64) {
	field := func(name string) float64 {
		return sumInfo(b, c, "commandstats", func(line string) (string, bool) {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_fcall:") {
				return "", false
			}
			_, rest, ok := strings.Cut(line, name+"=")
			v, _, _ := strings.Cut(rest, ",")
			return v, ok
		})
	}
	return field("usec"), field("calls")
}

// commandUsec returns the time Redis spent in the named commands so far, in
// µs (INFO commandstats).
func commandUsec(b *testing.B, c redis.UniversalClient, names ...string) float64 {
	return sumInfo(b, c, "commandstats", func(line string) (string, bool) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(names, strings.TrimPrefix(name, "cmdstat_")) {
			return "", false
		}
		_, rest, ok = strings.Cut(rest, "usec=")
		v, _, _ := strings.Cut(rest, ",")
		return v, ok
	})
}

// serverCPU returns the CPU time the Redis process has used so far, in ms:
// used_cpu_sys + used_cpu_user of INFO cpu (its commands, scripts and
// network I/O, counted once each).
func serverCPU(b *testing.B, c redis.UniversalClient) float64 {
	return 1000 * sumInfo(b, c, "cpu", func(line string) (string, bool) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		return v, ok && (name == "used_cpu_sys" || name == "used_cpu_user")
	})
}

// sumInfo sums the numbers that value finds in the lines of an INFO
// section: of every master, on a cluster (INFO on a ClusterClient reaches
// one node, at random).
func sumInfo(b *testing.B, c redis.UniversalClient, section string, value func(line string) (string, bool)) float64 {
	ctx := context.Background()
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		total, err := infoSum(ctx, c, section, value)
		if err != nil {
			b.Fatal(err)
		}
		return total
	}
	var mu sync.Mutex
	total := 0.0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := infoSum(ctx, m, section, value)
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

func infoSum(ctx context.Context, c redis.Cmdable, section string, value func(line string) (string, bool)) (float64, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		v, ok := value(line)
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("INFO %s: %q: %w", section, line, err)
		}
		total += n
	}
	return total, nil
}

// BenchmarkPlainDecision measures the Redis server time of one plain
// decision (INFO commandstats' usec over the calls of one kind, phase by
// phase) for the store (keycap: its functions; scripts: the same code as
// scripts, as on Redis before 7) and for asynq's semaphore
// (testenv.Semaphore) in alternating rounds of one run: a grant, on pools of max 1 and 10 filled to the max; a refusal,
// on the full pools; a release. Server time is what caps the decisions one
// Redis core can make.
func BenchmarkPlainDecision(b *testing.B) {
	const pools = 200
	for _, max := range []int{1, 10} {
		b.Run(fmt.Sprintf("max=%d", max), func(b *testing.B) {
			c := testenv.Redis(b)
			prefix := testenv.Prefix(b, c)
			s := newStore(b, c, prefix)
			scripts := newStore(b, c, prefix+"scripts:") // as on Redis before 7
			scripts.UseScripts()
			ctx := context.Background()
			ttl := time.Minute
			type phase struct {
				name string
				run  func(p, i int) error
			}
			owners := make([][]store.Owner, pools)
			ids := make([]store.PoolID, pools)
			for p := range owners {
				owners[p] = make([]store.Owner, max)
				ids[p] = store.PoolOf(0, "decision", strconv.Itoa(p))
			}
			sem := func(p int) testenv.Semaphore {
				return testenv.Semaphore{C: c, Key: prefix + "sema:" + strconv.Itoa(p), Max: max}
			}
			storePhases := func(s *redisstore.Store) []phase {
				return []phase{
					{"grant", func(p, i int) error {
						owners[p][i] = store.NewOwner()
						g, err := s.Acquire(ctx, ids[p], owners[p][i], store.Demand{Max: max, TTL: ttl})
						if err == nil && !g.Granted {
							err = fmt.Errorf("refused")
						}
						return err
					}},
					{"refusal", func(p, i int) error {
						g, err := s.Acquire(ctx, ids[p], store.NewOwner(), store.Demand{Max: max, TTL: ttl})
						if err == nil && g.Granted {
							err = fmt.Errorf("granted over the max")
						}
						return err
					}},
					{"release", func(p, i int) error {
						_, err := s.Release(ctx, ids[p], owners[p][i], store.Demand{}, false)
						return err
					}},
				}
			}
			semaphorePhases := []phase{
				{"grant", func(p, i int) error {
					owners[p][i] = store.NewOwner()
					ok, err := sem(p).Acquire(ctx, owners[p][i].String(), time.Now().Add(ttl))
					if err == nil && !ok {
						err = fmt.Errorf("refused")
					}
					return err
				}},
				{"refusal", func(p, i int) error {
					ok, err := sem(p).Acquire(ctx, store.NewOwner().String(), time.Now().Add(ttl))
					if err == nil && ok {
						err = fmt.Errorf("granted over the max")
					}
					return err
				}},
				{"release", func(p, i int) error {
					return sem(p).Release(ctx, owners[p][i].String())
				}},
			}
			sides := []struct {
				name   string
				phases []phase
			}{{"keycap", storePhases(s)}, {"scripts", storePhases(scripts)}, {"semaphore", semaphorePhases}}
			usec := make(map[string]float64)
			calls := make(map[string]int)
			// A phase counts its own top-level commands only: a script's
			// usec includes the commands it runs, which count again under
			// their own names.
			counted := map[string][]string{"grant": {"evalsha", "fcall"}, "refusal": {"evalsha", "fcall"}, "release": {"evalsha", "fcall", "zrem", "exists"}}
			round := func(measure bool) {
				for _, side := range sides {
					for _, ph := range side.phases {
						before := commandUsec(b, c, counted[ph.name]...)
						for p := range pools {
							for i := range max {
								if err := ph.run(p, i); err != nil {
									b.Fatalf("%s %s: %v", side.name, ph.name, err)
								}
							}
						}
						if measure {
							usec[side.name+"-"+ph.name] += commandUsec(b, c, counted[ph.name]...) - before
							calls[side.name+"-"+ph.name] += pools * max
						}
					}
				}
			}
			round(false) // load the scripts, warm the connections
			b.ResetTimer()
			for done := 0; done < b.N; done += pools * max {
				round(true)
			}
			b.StopTimer()
			for name, u := range usec {
				b.ReportMetric(u/float64(calls[name]), name+"-µs")
			}
			for _, ph := range []string{"grant", "refusal", "release"} {
				b.ReportMetric(usec["keycap-"+ph]/usec["semaphore-"+ph], ph+"-ratio")
				b.ReportMetric(usec["scripts-"+ph]/usec["semaphore-"+ph], ph+"-scripts-ratio")
			}
		})
	}
}
