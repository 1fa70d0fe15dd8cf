package testkit

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Alternate measures b.N calls of each op, from workers goroutines, in
// alternating rounds of at most round calls — first ops[0], then ops[1], and
// so on — so that drift in a noisy machine's speed touches every op alike.
// Each op first runs warm calls unmeasured (connection pools, caches). It
// returns each op's total time; the ratio of two is a same-run ratio.
//
// op's argument is the worker's index, 0 to workers-1: within a round each
// index is one goroutine, and rounds follow one another, so per-worker state
// indexed by it needs no lock. An error is reported with b.Error and ends
// that worker's round.
func Alternate(b *testing.B, workers, round, warm int, ops ...func(worker int) error) []time.Duration {
	b.Helper()
	for _, op := range ops {
		Rounds(b, workers, warm, op)
	}
	total := make([]time.Duration, len(ops))
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, round)
		for i, op := range ops {
			total[i] += Rounds(b, workers, n, op)
		}
		done += n
	}
	b.StopTimer()
	return total
}

// Rounds runs n calls of op shared out among workers goroutines and returns
// the time they took. An error is reported with b.Error and ends that
// worker's part.
func Rounds(b *testing.B, workers, n int, op func(worker int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := op(w); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// GetOK sends a GET to url with the header pairs given (name, value, ...),
// reads the whole body, and returns an error unless the answer is 200.
func GetOK(hc *http.Client, url string, header ...string) error {
	r, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(r)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
