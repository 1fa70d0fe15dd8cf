package adaptbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// slack is how late a job may finish on a busy machine (timers, the race
// detector); a job never finishes early.
const slack = 40 * time.Millisecond

// runJobs starts n jobs at once and returns each one's latency, or -1 for a
// job the backend refused.
func runJobs(t *testing.T, b *Backend, n int) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			err := b.Do(ctx)
			switch {
			case errors.Is(err, ErrOverloaded):
				lat[i] = -1
			case err != nil:
				t.Errorf("job %d: %v", i, err)
			default:
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	return lat
}

func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want-2*time.Millisecond || got > want+slack {
		t.Errorf("%s: took %v, want %v (up to %v late)", what, got, want, slack)
	}
}

func TestBackendProcessorSharing(t *testing.T) {
	const c, s = 4, 60 * time.Millisecond
	for _, tc := range []struct {
		name    string
		n       int
		want    time.Duration
		refused int
	}{
		{"n=1", 1, s, 0},
		{"n=C", c, s, 0},
		{"n=2C", 2 * c, 2 * s, 0},
		{"n=3C", 3 * c, 3 * s, 0},
		{"n=3C+2", 3*c + 2, 3 * s, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBackend(c, s, 0, 1)
			refused := 0
			for i, l := range runJobs(t, b, tc.n) {
				if l < 0 {
					refused++
					continue
				}
				within(t, fmt.Sprintf("job %d", i), l, tc.want)
			}
			if refused != tc.refused {
				t.Errorf("refused %d jobs, want %d", refused, tc.refused)
			}
			if m := b.ResetMax(); m != min(tc.n, 3*c) {
				t.Errorf("max in service %d, want %d", m, min(tc.n, 3*c))
			}
			if served, ref := b.Counts(); served != int64(tc.n-tc.refused) || ref != int64(tc.refused) {
				t.Errorf("counts: served %d refused %d", served, ref)
			}
		})
	}
}

// TestBackendOverloadAtOnce checks that a refused job is answered at once,
// not after waiting.
func TestBackendOverloadAtOnce(t *testing.T) {
	b := NewBackend(1, time.Second, 0, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 3 {
		go func() { _ = b.Do(ctx) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.InFlight() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	if err := b.Do(ctx); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("4th job on C=1: %v, want ErrOverloaded", err)
	}
	if d := time.Since(t0); d > 20*time.Millisecond {
		t.Errorf("refusal took %v", d)
	}
}

// TestBackendStaggered checks exact sharing with arrivals at different
// times: on C=1, A (100 ms) alone for 50 ms, then A and B at half speed —
// A leaves at 150 ms, B has 50 ms of work left and leaves at 200 ms.
func TestBackendStaggered(t *testing.T) {
	b := NewBackend(1, 100*time.Millisecond, 0, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	var a, bb time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.Do(ctx); err != nil {
			t.Error(err)
		}
		a = time.Since(t0)
	})
	time.Sleep(50 * time.Millisecond)
	wg.Go(func() {
		if err := b.Do(ctx); err != nil {
			t.Error(err)
		}
		bb = time.Since(t0)
	})
	wg.Wait()
	within(t, "A", a, 150*time.Millisecond)
	within(t, "B", bb, 200*time.Millisecond)
}

// TestBackendSetCapacity checks that halving C slows the jobs in service at
// once: two 100 ms jobs on C=2, C=1 after 50 ms — each has 50 ms of work
// left at half speed, and leaves at 150 ms.
func TestBackendSetCapacity(t *testing.T) {
	b := NewBackend(2, 100*time.Millisecond, 0, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.SetCapacity(1)
	}()
	for i, l := range runJobs(t, b, 2) {
		within(t, fmt.Sprintf("job %d", i), l, 150*time.Millisecond)
	}
}

func TestBackendJitter(t *testing.T) {
	b := NewBackend(1, 40*time.Millisecond, 0.25, 7)
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		w := b.work()
		lo, hi = min(lo, w), max(hi, w)
	}
	if lo < 30*time.Millisecond || hi > 50*time.Millisecond || hi-lo < 15*time.Millisecond {
		t.Errorf("service times in [%v, %v], want spread over [30ms, 50ms]", lo, hi)
	}
}
