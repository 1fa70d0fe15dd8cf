//go:build linux

package safety_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/safety"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
)

// holderBin builds the holder program (./holder) into a directory of t's.
func holderBin(t *testing.T) string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build the holder program: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "holder")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "./holder").CombinedOutput(); err != nil {
		t.Fatalf("building the holder program: %v\n%s", err, out)
	}
	return bin
}

// TestHistoriesRedisProcesses: every client is a process of its own (the
// holder program, with its own Redis client), and the checker stops one
// of them with SIGSTOP, past the leases' TTL, every few hundred
// milliseconds, then lets it go on: its leases expire meanwhile, other
// clients take the slots, and it finds them lost.
func TestHistoriesRedisProcesses(t *testing.T) {
	t.Parallel()
	checkProcesses(t, redisBounds, func(t *testing.T) []string {
		return []string{"-redis", testenv.RedisAddr(), "-prefix", testenv.Prefix(t, testenv.Redis(t))}
	})
}

// TestHistoriesPostgresProcesses is TestHistoriesRedisProcesses on
// PostgreSQL.
func TestHistoriesPostgresProcesses(t *testing.T) {
	t.Parallel()
	checkProcesses(t, pgBounds, func(t *testing.T) []string {
		pool := pgenv.Pool(t)
		schema := pgenv.Schema(t, pool)
		if err := pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)); err != nil {
			t.Fatal(err)
		}
		return []string{"-postgres", pool.Config().ConnString(), "-schema", schema}
	})
}

// checkProcesses checks runs whose clients are holder processes started
// with the arguments args returns for each run, paused by SIGSTOP.
func checkProcesses(t *testing.T, b safety.Bounds, args func(t *testing.T) []string) {
	bin := holderBin(t)
	var paused atomic.Int64
	soak(t, func(t *testing.T) lane {
		var (
			mu    sync.Mutex
			procs []*safety.Process // the run's
		)
		open := func(t *testing.T, seed int64) func() safety.Store {
			args := args(t)
			mu.Lock()
			procs = nil
			mu.Unlock()
			return func() safety.Store {
				p, err := safety.StartProcess(bin, args...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := p.Close(); err != nil {
						t.Errorf("the holder process: %v", err)
					}
				})
				mu.Lock()
				procs = append(procs, p)
				mu.Unlock()
				return p
			}
		}
		faults := func(seed int64) func(context.Context, *safety.Faults) {
			rng := rand.New(rand.NewPCG(uint64(seed), 0x57))
			return func(ctx context.Context, _ *safety.Faults) {
				for ctx.Err() == nil {
					wait(ctx, time.Duration(100+rng.IntN(300))*time.Millisecond)
					mu.Lock()
					if len(procs) == 0 {
						mu.Unlock()
						continue
					}
					p := procs[rng.IntN(len(procs))]
					mu.Unlock()
					// One to two TTLs: its leases expire while it is stopped.
					d := b.TTL + time.Duration(rng.Int64N(int64(b.TTL)))
					if err := p.Pause(ctx, d); err != nil {
						t.Errorf("pausing a holder process: %v", err)
						return
					}
					paused.Add(1)
				}
			}
		}
		return lane{safety.Config{Bounds: b}, open, faults}
	})
	t.Logf("%d holder processes stopped with SIGSTOP past the TTL", paused.Load())
}

// TestProcessGone: a call to a holder process that has exited fails at
// once, never waits for its timeout.
func TestProcessGone(t *testing.T) {
	p, err := safety.StartProcess("true")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err = p.Acquire(ctx, store.PoolID{}, store.Owner{}, store.Demand{Max: 1, TTL: time.Second})
	if !errors.Is(err, safety.ErrProcessGone) && !errors.Is(err, syscall.EPIPE) || time.Since(start) > 10*time.Second {
		t.Fatalf("a call to a process that exited: %v after %s", err, time.Since(start))
	}
}
