package retryablepause_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/retryablepause"
)

// go-retryablehttp keeps its retry loop; keycap makes each wait the one the
// vendor asked for, and shares the pause with every other client on the
// store.
func Example() {
	// A vendor whose first answer is a 429 asking for one second of quiet.
	var calls atomic.Int32
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "contacts")
	}))
	defer vendor.Close()

	// memstore pauses this process; on redisstore the pause holds for
	// every worker of every server.
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	pauses, err := pause.New(limiter)
	if err != nil {
		log.Fatal(err)
	}

	client := retryablehttp.NewClient()
	client.Logger = nil // quiet, for the example
	retryablepause.New(pauses).Configure(client)

	resp, err := client.Get(vendor.URL + "/contacts") // waits out the 429, then retries
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d after %d calls: %s", resp.StatusCode, calls.Load(), body)
	// Output:
	// 200 after 2 calls: contacts
}

// A wait longer than MaxWait is not slept through: the 429 comes back at
// once (for a job queue to release the job without spending an attempt),
// and calls to the API are not sent until the pause is over.
func ExampleWithMaxWait() {
	var calls atomic.Int32
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer vendor.Close()

	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	pauses, _ := pause.New(limiter)

	client := retryablehttp.NewClient()
	client.Logger = nil
	// Sleep in the process for at most a minute: the vendor asks for two.
	api := pause.WithAPIName(func(*http.Request) string { return "vendor" })
	retryablepause.New(pauses, retryablepause.WithMaxWait(time.Minute)).Configure(client, api)

	for range 2 {
		resp, err := client.Get(vendor.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		from := "the vendor"
		if resp.Header.Get("X-Keycap-Paused") != "" {
			from = "keycap, unsent"
		}
		fmt.Printf("%d from %s (vendor calls: %d)\n", resp.StatusCode, from, calls.Load())
	}
	// Output:
	// 429 from the vendor (vendor calls: 1)
	// 429 from keycap, unsent (vendor calls: 1)
}
