package safety_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/safety"
	"github.com/keycap/keycap/internal/safety/faultproxy"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// runs is how many seeded runs each configuration makes:
// KEYCAP_SAFETY_RUNS, default 2 (the soak of docs/safety.md sets 1,000).
func runs(t *testing.T) int { return count(t, "KEYCAP_SAFETY_RUNS", 2) }

// count reads a positive number from the environment variable name, or
// returns def when it is unset.
func count(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// seeds returns the seeds of the runs: from KEYCAP_SAFETY_SEED on (to
// reproduce a run), else from a random one, logged.
func seeds(t *testing.T) []int64 {
	base := rand.Int64N(1 << 40)
	if s := os.Getenv("KEYCAP_SAFETY_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("KEYCAP_SAFETY_SEED=%q: %v", s, err)
		}
		base = v
	}
	out := make([]int64, runs(t))
	for i := range out {
		out[i] = base + int64(i)
	}
	t.Logf("seeds %d… (KEYCAP_SAFETY_SEED=%d reproduces the first)", base, base)
	return out
}

var bounds = safety.Bounds{TTL: 300 * time.Millisecond, Early: 3 * time.Millisecond, Late: 20 * time.Millisecond,
	Ticket: 150 * time.Millisecond, Claim: 60 * time.Millisecond, Keep: 60 * time.Millisecond}

// redisBounds are bounds for redisstore, whose release of a pool without
// a parent frees the slot, then hands it on in a second call (seed
// 155309611401 of TestHistoriesRedis found it: the second call served a
// waiter after the slot it had handed first lapsed unclaimed).
var redisBounds = func() safety.Bounds { b := bounds; b.ServesLater = true; return b }()

// pgBounds are bounds for pgstore, which sweeps expired tickets from
// anywhere in a line (seed 394698387421 of TestHistoriesPostgresRestart
// found it).
var pgBounds = func() safety.Bounds { b := bounds; b.Sweeps = true; return b }()

// lanes is how many runs of a configuration go at once:
// KEYCAP_SAFETY_LANES, default 1. A lane has servers and faults of its
// own (a Cluster, a Sentinel, a Redis to kill), and every lane-th seed.
// The runs are bound by their wall time (2–5 s of workload, a failover's
// wait), not by the CPU, so lanes let a soak of 1,000 runs per
// configuration fit in an hour on the 2-core machine.
func lanes(t *testing.T) int { return count(t, "KEYCAP_SAFETY_LANES", 1) }

// lane is what a lane's runs are made with: the workload's configuration,
// the stores of each run (open, in a fresh namespace) and the faults
// beside each run (nil: none).
type lane struct {
	cfg    safety.Config
	open   func(t *testing.T, seed int64) func() safety.Store
	faults func(seed int64) func(context.Context, *safety.Faults)
}

// totals are a configuration's figures, summed over its lanes.
type totals struct {
	mu                                            sync.Mutex
	runs, ops, unknown, crashed, lost, unfinished int
	kept                                          int // releases whose slots were kept for their key (WithKeep)
	over                                          safety.Overadmission
}

// check runs the workload once per seed, on the stores that open makes for
// each run, with faults beside it, and checks every history.
func check(t *testing.T, b safety.Bounds, open func(t *testing.T, seed int64) func() safety.Store, faults func(seed int64) func(context.Context, *safety.Faults)) {
	soak(t, func(*testing.T) lane { return lane{safety.Config{Bounds: b}, open, faults} })
}

// soak runs the seeds in lanes (KEYCAP_SAFETY_LANES), each set up by
// setup on a subtest of its own, and logs the totals.
func soak(t *testing.T, setup func(t *testing.T) lane) {
	ss, n := seeds(t), lanes(t)
	var tot totals
	if n == 1 {
		checkLane(t, setup(t), ss, &tot)
	} else {
		t.Run("lanes", func(t *testing.T) {
			for i := range n {
				var mine []int64
				for j := i; j < len(ss); j += n {
					mine = append(mine, ss[j])
				}
				t.Run(fmt.Sprintf("lane%d", i), func(t *testing.T) {
					t.Parallel()
					checkLane(t, setup(t), mine, &tot)
				})
			}
		})
	}
	t.Logf("%d runs, %d operations checked, %d of unknown outcome, %d crashes, %d renewals that found their lease lost, %d releases that kept their slots for their key: linearizable (%d histories not finished within the checker's minute); over a cap: at most %d slots, for %s at most, %s in all",
		tot.runs, tot.ops, tot.unknown, tot.crashed, tot.lost, tot.kept, tot.unfinished, tot.over.Slots, tot.over.Longest, tot.over.Total)
	// A history the checker cannot finish in its time (calls of unknown
	// outcome, each of which may take effect at any later moment, make
	// its search branch) is no violation, and is still swept for
	// overadmission; but a configuration most of whose histories go
	// unchecked proves little. One is let through whatever the runs: the
	// short subset of scripts/test has two runs per configuration, and on
	// a busy machine one long history of a failover (600 operations and
	// more where the soak's lanes make 180) can outlast the minute.
	if tot.unfinished > max(1, tot.runs/10) {
		t.Errorf("%d of %d histories not finished within the checker's minute: more than a tenth, and more than one", tot.unfinished, tot.runs)
	}
}

// checkLane runs and checks the seeds of one lane, one after another,
// adding to tot; it stops at the first run that fails.
func checkLane(t *testing.T, l lane, seeds []int64, tot *totals) {
	for _, seed := range seeds {
		// A subtest per run: its clients, connections and namespace go
		// when it ends.
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			cfg := l.cfg
			cfg.Seed, cfg.Name = seed, fmt.Sprintf("safety:%s:%d", t.Name(), time.Now().UnixNano())
			var f func(context.Context, *safety.Faults)
			if l.faults != nil {
				f = l.faults(seed)
			}
			h := safety.Run(context.Background(), cfg, l.open(t, seed), f)
			unknown, lost, kept := 0, 0, 0
			for _, op := range h {
				res := op.Output.(safety.Result)
				if res.Unknown {
					unknown++
				}
				if res.Lost {
					lost++
				}
				if res.Kept {
					kept++
				}
			}
			// The visualisation goes where it outlives the test.
			unfinished := 0
			var v *safety.Violation
			switch err := safety.Check(seed, h, cfg.Bounds, os.TempDir(), time.Minute); {
			case errors.As(err, &v):
				t.Fatal(err)
			case err != nil:
				unfinished = 1
				t.Logf("%v (%d of unknown outcome); %s", err, unknown, saveUnfinished(t, "unfinished", seed, cfg.Bounds, h))
			}
			// What holders certainly held beyond a cap at once: none,
			// unless the store lost leases (a crash the history records).
			o := safety.Overadmitted(h, cfg.Bounds)
			if o.Slots > 0 && crashes(h) == 0 {
				t.Fatalf("seed %d, with no crash: %s", seed, o.Explain(h, cfg.Bounds))
			}
			tot.mu.Lock()
			defer tot.mu.Unlock()
			tot.unfinished, tot.kept = tot.unfinished+unfinished, tot.kept+kept
			tot.runs, tot.ops, tot.unknown, tot.crashed, tot.lost = tot.runs+1, tot.ops+len(h), tot.unknown+unknown, tot.crashed+crashes(h), tot.lost+lost
			tot.over.Slots, tot.over.Longest, tot.over.Total = max(tot.over.Slots, o.Slots), max(tot.over.Longest, o.Longest), tot.over.Total+o.Total
		})
		if !ok {
			return
		}
	}
}

// saveUnfinished saves seed's history h, which the checker did not
// finish in its minute, to be checked again with more time (recheck), as
// keycap-safety-NAME-SEED.json in the temporary directory, and says how.
func saveUnfinished(t *testing.T, name string, seed int64, b safety.Bounds, h []porcupine.Operation) string {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("keycap-safety-%s-%d.json", name, seed))
	if err := safety.Save(path, seed, b, h); err != nil {
		t.Fatal(err)
	}
	return "saved: go run ./internal/safety/recheck " + path
}

func TestHistoriesMemstore(t *testing.T) {
	t.Parallel()
	check(t, bounds, func(t *testing.T, seed int64) func() safety.Store {
		s := memstore.New()
		return func() safety.Store { return s }
	}, nil)
}

// once is the MaxRetries of the clients that meet connection resets: a
// call runs at most once. go-redis sends a call again after a reset
// (MaxRetries, 3 by default), so a script that ran before the reset may run
// twice; its second run leaves what one run would (the same owner's acquire
// is a renewal or a claim, a release frees nothing more), but a caller in
// between sees the first run's effect — a ticket counted ahead of it when
// the retried acquire is granted — which no single point of the call can
// explain. The checker checks the store's calls, one run each; what retries
// mean for callers is in docs/safety.md.
const once = -1

func redisThrough(t *testing.T, addr string) func() safety.Store {
	prefix := testenv.Prefix(t, testenv.Redis(t))
	return func() safety.Store {
		o := testenv.RedisOptions()
		o.Addr, o.MaxRetries = addr, once
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func TestHistoriesRedis(t *testing.T) {
	t.Parallel()
	check(t, redisBounds, func(t *testing.T, seed int64) func() safety.Store {
		return redisThrough(t, testenv.RedisAddr())
	}, nil)
}

func TestHistoriesCluster(t *testing.T) {
	t.Parallel()
	check(t, redisBounds, func(t *testing.T, seed int64) func() safety.Store {
		prefix := testenv.Prefix(t, testenv.RedisCluster(t))
		return func() safety.Store {
			s, err := redisstore.New(testenv.RedisCluster(t), redisstore.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}, nil)
}

// chaos returns the faults of a run, seeded: latency spikes, connections
// reset, partitions.
func chaos(p **faultproxy.Proxy) func(seed int64) func(context.Context, *safety.Faults) {
	return func(seed int64) func(context.Context, *safety.Faults) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xfa))
		return func(ctx context.Context, _ *safety.Faults) {
			px := *p
			for ctx.Err() == nil {
				wait(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
				switch rng.IntN(4) {
				case 0:
					px.SetLatency(time.Duration(rng.IntN(30)) * time.Millisecond)
				case 1:
					px.Reset()
				case 2:
					// Up to five TTLs: past the calls' timeout, so that
					// outcomes are unknown and leases expire meanwhile.
					px.Partition()
					wait(ctx, time.Duration(rng.IntN(1500))*time.Millisecond)
					px.Heal()
				default:
					px.SetLatency(0)
				}
			}
			px.SetLatency(0)
			px.Heal()
		}
	}
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func proxy(t *testing.T, upstream string) *faultproxy.Proxy {
	p, err := faultproxy.New(upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestHistoriesRedisFaults(t *testing.T) {
	t.Parallel()
	soak(t, func(*testing.T) lane {
		var p *faultproxy.Proxy
		return lane{safety.Config{Bounds: redisBounds}, func(t *testing.T, seed int64) func() safety.Store {
			p = proxy(t, testenv.RedisAddr())
			return redisThrough(t, p.Addr())
		}, chaos(&p)}
	})
}

func TestHistoriesPostgresFaults(t *testing.T) {
	t.Parallel()
	soak(t, func(*testing.T) lane {
		var p *faultproxy.Proxy
		return lane{safety.Config{Bounds: pgBounds}, func(t *testing.T, seed int64) func() safety.Store {
			pool := pgenv.Pool(t)
			schema := pgenv.Schema(t, pool)
			if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
				t.Fatal(err)
			}
			p = proxy(t, hostOf(t, pool))
			return func() safety.Store {
				cfg := pool.Config().Copy()
				cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", portOf(t, p.Addr())
				return pgStore(t, cfg, schema)
			}
		}, chaos(&p)}
	})
}

// pgStore opens a pgstore on a pool of its own of cfg (4 connections,
// closed when t ends), in schema, whose calls give up after a second.
func pgStore(t *testing.T, cfg *pgxpool.Config, schema string) store.Store {
	cfg.MaxConns = 4
	cp, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	s, err := pgstore.New(cp, pgstore.WithSchema(schema), pgstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hostOf(t *testing.T, pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
}

func portOf(t *testing.T, addr string) uint16 {
	_, port, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(port)
	if err != nil || err2 != nil {
		t.Fatalf("address %q", addr)
	}
	return uint16(n)
}

// TestClosedLimiterKeepsItsSlot: a Limiter closed without releasing its
// lease leaves the slot held until the TTL: another Limiter on the same
// store, asking at once, is refused — with other pools busy beside it
// (a peer test once saw such an acquire granted, on a loaded machine).
func TestClosedLimiterKeepsItsSlot(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	open := func() *keycap.Limiter {
		s, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		l, err := keycap.NewLimiter(s, keycap.WithDefaultFailMode(keycap.FailClosed), keycap.WithDecisionBudget(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx, cancel := context.WithCancel(context.Background())
	busy := open()
	var g sync.WaitGroup
	for i := range 8 {
		g.Add(1)
		go func() {
			defer g.Done()
			lim := keycap.Spec{Name: "safety:busy", Max: 2, TTL: 2 * time.Second}.For(strconv.Itoa(i))
			for ctx.Err() == nil {
				if ls, err := busy.Acquire(ctx, lim); err == nil {
					ls.Release()
				}
			}
		}()
	}
	defer func() {
		cancel()
		g.Wait()
		_ = busy.Close()
	}()
	b := open()
	defer b.Close()
	const tries = 200
	for i := range tries {
		lim := keycap.Spec{Name: "safety:closed", Max: 1, TTL: 2 * time.Second}.For(strconv.Itoa(i))
		a := open()
		if _, err := a.Acquire(context.Background(), lim); err != nil {
			t.Fatalf("try %d: the first acquire: %v", i, err)
		}
		_ = a.Close()
		ls, err := b.Acquire(context.Background(), lim)
		if err == nil {
			ls.Release()
			t.Fatalf("try %d: granted while the closed Limiter's lease held the only slot", i)
		}
		if !errors.Is(err, keycap.ErrLimitExceeded) {
			t.Fatalf("try %d: %v, want a refusal", i, err)
		}
	}
}

// server is a store's server of the test's own, to kill and start again.
type server interface {
	Kill()
	Restart() error
}

// restarts returns the faults of a run on a server of the test's own
// (Redis, PostgreSQL): it is killed (SIGKILL) once or twice and started
// again; without persistence (or with PostgreSQL's unlogged tables) that
// loses every lease, which the history records as a crash.
func restarts(t *testing.T, p server, persistent bool) func(seed int64) func(context.Context, *safety.Faults) {
	return func(seed int64) func(context.Context, *safety.Faults) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xde))
		return func(ctx context.Context, f *safety.Faults) {
			for ctx.Err() == nil {
				wait(ctx, time.Duration(300+rng.IntN(900))*time.Millisecond)
				if ctx.Err() != nil {
					return
				}
				since := f.Now()
				p.Kill()
				time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
				if err := p.Restart(); err != nil {
					t.Errorf("restarting the server: %v", err) // not Fatal: this is not the test's goroutine
					return
				}
				if !persistent {
					f.Crashed(since)
				}
			}
		}
	}
}

// redisProcess returns the stores of a run on p, emptied first: the
// runs of a lane share p, and a restart would replay every earlier run's
// writes from the append-only file.
func redisProcess(t *testing.T, p *testenv.RedisProcess) func() safety.Store {
	if err := p.Empty(context.Background()); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("safety:%d:", time.Now().UnixNano())
	return func() safety.Store {
		c := redis.NewClient(p.Options()) // MaxRetries: once, as redisThrough's
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TestHistoriesRedisRestart: Redis killed and started again without
// persistence: every lease is lost at once (a crash in the model), and
// everything else holds — tokens keep growing (the clock).
func TestHistoriesRedisRestart(t *testing.T) {
	t.Parallel()
	soak(t, func(t *testing.T) lane {
		p := testenv.StartRedis(t)
		return lane{safety.Config{Bounds: redisBounds}, func(t *testing.T, seed int64) func() safety.Store { return redisProcess(t, p) }, restarts(t, p, false)}
	})
}

// TestHistoriesRedisRestartPersistent: with an append-only file fsynced
// before each reply, a kill loses nothing that Redis answered: the strict
// model holds across restarts.
func TestHistoriesRedisRestartPersistent(t *testing.T) {
	t.Parallel()
	soak(t, func(t *testing.T) lane {
		p := testenv.StartRedisPersistent(t)
		return lane{safety.Config{Bounds: redisBounds}, func(t *testing.T, seed int64) func() safety.Store { return redisProcess(t, p) }, restarts(t, p, true)}
	})
}

// TestHistoriesPostgresRestart: PostgreSQL killed (the server and every
// backend, SIGKILL) and started again: crash recovery empties the unlogged
// tables, every lease is lost at once (a crash in the model), and
// everything else holds — tokens keep growing (a logged sequence).
func TestHistoriesPostgresRestart(t *testing.T) {
	t.Parallel()
	// While the server is down, every call fails to connect: those never
	// reached it, and stay out of the history.
	cfg := safety.Config{Bounds: pgBounds, NotSent: func(err error) bool {
		var ce *pgconn.ConnectError
		return errors.As(err, &ce) || pgconn.SafeToRetry(err)
	}}
	soak(t, func(t *testing.T) lane {
		p := pgenv.StartProcess(t)
		return lane{cfg, func(t *testing.T, seed int64) func() safety.Store { return pgProcess(t, p) }, restarts(t, p, false)}
	})
}

// pgProcess migrates a schema of t's own on p and returns its stores,
// each with a pool of its own that fails fast while the server is down.
func pgProcess(t *testing.T, p *pgenv.Process) func() safety.Store {
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, p.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	schema := pgenv.Schema(t, admin)
	if err := pgstore.Migrate(ctx, admin, pgstore.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	return func() safety.Store {
		cfg, err := pgxpool.ParseConfig(p.URL())
		if err != nil {
			t.Fatal(err)
		}
		return pgStore(t, cfg, schema)
	}
}

// TestHistoriesClusterFailoverAcked: a Cluster master killed in each run,
// its replica promoted, the old master started again as a replica; with
// redisstore.WithReplicaAcks every grant a client was told of survives
// the failover, and the strict model holds.
func TestHistoriesClusterFailoverAcked(t *testing.T) {
	t.Parallel()
	soak(t, func(t *testing.T) lane {
		c := testenv.StartCluster(t)
		cfg := safety.Config{Duration: 5 * time.Second, Timeout: 2 * time.Second, Bounds: redisBounds}
		return lane{cfg, clusterStores(c, redisstore.WithReplicaAcks(1, 500*time.Millisecond)), failovers(t, c)}
	})
}

// TestFailoverWithoutAcksIsBounded measures what a Cluster failover lets
// through without WithReplicaAcks: grants of the last moment before a
// master's death are lost with it, and their holders run beside the next
// ones. The history is checked against the strict model (its violations
// counted, not failed on) and the overadmission measured; what must hold
// is the documented bound: each stretch over a cap ends within a TTL (the
// lost lease's holder finds it lost at its next renewal, or it was due to
// expire anyway).
func TestFailoverWithoutAcksIsBounded(t *testing.T) {
	t.Parallel()
	c := testenv.StartCluster(t)
	cfg := safety.Config{Duration: 5 * time.Second, Timeout: 2 * time.Second, Bounds: redisBounds}
	open, faults := clusterStores(c), failovers(t, c)
	var over safety.Overadmission
	violations, unfinished, ops, ss := 0, 0, 0, seeds(t)
	for _, seed := range ss {
		cfg := cfg
		cfg.Seed, cfg.Name = seed, fmt.Sprintf("safety:unacked:%d", time.Now().UnixNano())
		h := safety.Run(context.Background(), cfg, open(t, seed), faults(seed))
		ops += len(h)
		var v *safety.Violation
		switch err := safety.Check(seed, h, cfg.Bounds, "", time.Minute); {
		case errors.As(err, &v):
			violations++
			t.Logf("seed %d: the strict model fails, as a lost grant lets it: %v", seed, err)
		case err != nil:
			unfinished++
			t.Logf("%v; %s", err, saveUnfinished(t, "unacked-unfinished", seed, cfg.Bounds, h))
		}
		o := safety.Overadmitted(h, cfg.Bounds)
		if o.Longest > cfg.Bounds.TTL {
			t.Fatalf("seed %d: over a cap for %s, beyond the TTL (%s)", seed, o.Longest, cfg.Bounds.TTL)
		}
		over.Slots, over.Longest, over.Total = max(over.Slots, o.Slots), max(over.Longest, o.Longest), over.Total+o.Total
	}
	t.Logf("%d runs, each with a master killed, without replica acks, %d operations: %d histories the strict model refuses, %d it could not finish within its minute; over a cap: at most %d slots, for %s at most, %s in all",
		len(ss), ops, violations, unfinished, over.Slots, over.Longest, over.Total)
}

// TestHistoriesSentinelFailoverAcked: in each run, the master of a
// Sentinel of the run's own killed, its replica promoted by the Sentinel;
// with redisstore.WithReplicaAcks every grant a client was told of
// survives the failover, and the strict model holds.
func TestHistoriesSentinelFailoverAcked(t *testing.T) {
	t.Parallel()
	soak(t, func(t *testing.T) lane {
		var sn *testenv.Sentinel // the run's: open starts it, the faults fail it over
		open := func(t *testing.T, seed int64) func() safety.Store {
			sn = testenv.StartSentinel(t)
			prefix := fmt.Sprintf("safety:%d:", time.Now().UnixNano())
			return func() safety.Store {
				s, err := redisstore.New(sn.Client(), redisstore.WithPrefix(prefix), redisstore.WithReplicaAcks(1, 500*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		faults := func(seed int64) func(context.Context, *safety.Faults) {
			rng := rand.New(rand.NewPCG(uint64(seed), 0x5e))
			return func(ctx context.Context, f *safety.Faults) {
				wait(ctx, time.Duration(300+rng.IntN(1000))*time.Millisecond)
				m, err := sn.Master()
				if err != nil {
					t.Errorf("the Sentinel's master: %v", err) // not Fatal: this is not the test's goroutine
					return
				}
				sn.Kill(m)
				if err := sn.WaitFailover(m, 20*time.Second); err != nil {
					t.Errorf("the failover: %v", err)
					return
				}
				<-ctx.Done()
			}
		}
		cfg := safety.Config{Duration: 5 * time.Second, Timeout: 2 * time.Second, Bounds: redisBounds}
		return lane{cfg, open, faults}
	})
}

// clusterStores opens redisstores on c, each run in a namespace of its own.
func clusterStores(c *testenv.Cluster, opts ...redisstore.Option) func(t *testing.T, seed int64) func() safety.Store {
	return func(t *testing.T, seed int64) func() safety.Store {
		prefix := fmt.Sprintf("safety:%d:", time.Now().UnixNano())
		return func() safety.Store {
			// Closed with the run, not with the cluster: a lane's clients
			// would pile up over hundreds of runs (a soak ran out of file
			// descriptors, and its faults found no master to kill).
			cl := c.Client(nil)
			t.Cleanup(func() { _ = cl.Close() })
			s, err := redisstore.New(cl, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
}

// failovers kills a master of c once per run, at a seeded moment, waits
// for its replica to take over, and starts it again as a replica.
func failovers(t *testing.T, c *testenv.Cluster) func(seed int64) func(context.Context, *safety.Faults) {
	return func(seed int64) func(context.Context, *safety.Faults) {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xc1))
		return func(ctx context.Context, f *safety.Faults) {
			wait(ctx, time.Duration(300+rng.IntN(1000))*time.Millisecond)
			m, err := c.MasterOf(strconv.Itoa(rng.Int()))
			if err != nil {
				t.Errorf("a master of the cluster: %v", err) // not Fatal: this is not the test's goroutine
				return
			}
			c.Kill(m)
			if err := c.WaitOK(20 * time.Second); err != nil {
				t.Errorf("the cluster after master %d was killed: %v", m, err)
				return
			}
			c.Start(m) // back as a replica
			<-ctx.Done()
		}
	}
}

// crashes counts the crashes h records.
func crashes(h []porcupine.Operation) int {
	n := 0
	for _, op := range h {
		if op.Input.(safety.Op).Kind == safety.Crash {
			n++
		}
	}
	return n
}
