// Command outbound shows one 429 pausing every caller of an API.
//
//	go run ./examples/outbound
//
// It starts a small vendor API that allows 5 calls, then answers 429 with
// Retry-After: 2, and has 6 workers call it through pause.Transport. The
// first 429 pauses the API for everyone: the other workers' calls are
// refused without being sent (or wait in place when the wait is short), and
// the vendor sees no call until the pause is over. Then the same with pacing
// under the vendor's published rate, which avoids the 429 altogether.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
)

// vendor allows burst calls, then throttles for a window, then allows again.
func vendor(burst int, window time.Duration, start time.Time) (*httptest.Server, *atomic.Int32) {
	var calls atomic.Int32
	var mu sync.Mutex
	var throttledUntil time.Time
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		switch {
		case now.Before(throttledUntil):
			fmt.Printf("[%5dms] vendor: call %d arrived DURING the pause\n", since(start), n)
			w.WriteHeader(http.StatusTooManyRequests)
		case int(n) == burst+1:
			throttledUntil = now.Add(window)
			w.Header().Set("Retry-After", fmt.Sprint(int(window.Seconds())))
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Printf("[%5dms] vendor: call %d -> 429, Retry-After: %s\n", since(start), n, w.Header().Get("Retry-After"))
		default:
			fmt.Printf("[%5dms] vendor: call %d -> 200\n", since(start), n)
			_, _ = io.WriteString(w, "ok")
		}
	})), &calls
}

func since(t time.Time) int64 { return time.Since(t).Milliseconds() }

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	start := time.Now()
	fmt.Println("== one 429 pauses every worker")
	srv, calls := vendor(5, 2*time.Second, start)
	defer srv.Close()
	limiter, err := keycap.NewLimiter(memstore.New()) // redisstore: every worker on every server
	if err != nil {
		return err
	}
	defer limiter.Close()
	ps, err := pause.New(limiter)
	if err != nil {
		return err
	}
	// Waits in place up to 1 s; longer pauses refuse the call unsent.
	client := &http.Client{Transport: ps.Transport(nil, pause.WithMaxWaitInPlace(time.Second))}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := range 2 {
				time.Sleep(time.Duration(w*40+i*300) * time.Millisecond)
				resp, err := client.Get(srv.URL)
				var pe *pause.PausedError
				switch {
				case errors.As(err, &pe):
					fmt.Printf("[%5dms] worker %d: refused, not sent: API paused for %s more\n",
						since(start), w, time.Until(pe.Until).Round(100*time.Millisecond))
				case err != nil:
					fmt.Printf("[%5dms] worker %d: %v\n", since(start), w, err)
				default:
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("the vendor had %d calls; none arrived during its pause\n\n", calls.Load())

	fmt.Println("== pacing under a published rate of 5 calls per second")
	start = time.Now()
	srv2, calls2 := vendor(1000, time.Second, start)
	defer srv2.Close()
	limiter2, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		return err
	}
	defer limiter2.Close()
	paced, err := pause.New(limiter2, pause.WithRate(func(api string) (pause.Rate, bool) {
		return pause.Rate{Events: 5, Period: time.Second, Burst: 1}, true
	}))
	if err != nil {
		return err
	}
	client = &http.Client{Transport: paced.Transport(nil)}
	for range 3 {
		wg.Go(func() {
			for range 2 {
				if resp, err := client.Get(srv2.URL); err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("6 calls from 3 workers took %s: spaced by the pace, no 429 (%d calls)\n", time.Since(start).Round(10*time.Millisecond), calls2.Load())
	return nil
}
