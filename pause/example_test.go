package pause_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pause"
)

// vendorAPI is a fake vendor that throttles every request for 30 s.
func vendorAPI() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("vendor: request received")
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
}

// The Transport turns one 429 into a pause of the whole API: the throttled
// response goes back to its caller (30 s is too long to wait in place), and
// later requests are refused without being sent until the pause ends, on
// every server sharing the store.
func Example() {
	vendor := vendorAPI()
	defer vendor.Close()
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	pauses, _ := pause.New(limiter)

	// Name the API rather than using the host, so that one pause covers
	// every host of the vendor.
	client := &http.Client{Transport: pauses.Transport(nil,
		pause.WithAPIName(func(*http.Request) string { return "vendor" }))}

	resp, err := client.Get(vendor.URL + "/invoices")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("first call:", resp.StatusCode)

	_, err = client.Get(vendor.URL + "/customers")
	var pe *pause.PausedError
	if errors.As(err, &pe) {
		fmt.Println("second call not sent: API", pe.API, "paused for", time.Until(pe.Until).Round(time.Second))
	}
	// Output:
	// vendor: request received
	// first call: 429
	// second call not sent: API vendor paused for 30s
}

// In a job queue, RunJob pauses the API when a job comes back throttled and
// releases the job instead of failing it; jobs that call the API while it is
// paused are released without running. (riverlimit.RespectPauses and
// asynqlimit.RespectPauses turn the release into a retry that spends no
// attempt.)
func ExamplePauses_RunJob() {
	vendor := vendorAPI()
	defer vendor.Close()
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	pauses, _ := pause.New(limiter, pause.WithJitter(0)) // no jitter: an exact delay below

	sync := func(ctx context.Context) error {
		resp, err := http.Get(vendor.URL + "/invoices")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return pauses.Check(resp) // a *ThrottledError for a throttled response
	}

	ctx := context.Background()
	for _, id := range []string{"1", "2"} {
		err := pauses.RunJob(ctx, "vendor", jobtype.Job{Kind: "SyncInvoices", ID: id}, sync)
		var rel *jobtype.ReleaseError
		if errors.As(err, &rel) {
			fmt.Printf("job %s released by %s for %s (throttled: %t, paused: %t)\n", id, rel.By,
				rel.Delay.Round(time.Second), errors.Is(err, pause.ErrThrottled), errors.Is(err, pause.ErrPaused))
		}
	}
	// Output:
	// vendor: request received
	// job 1 released by pause:vendor for 30s (throttled: true, paused: false)
	// job 2 released by pause:vendor for 30s (throttled: false, paused: true)
}

// WithRate keeps every worker of every server under an API's published rate,
// before any 429. PaceJob releases a job over the rate, with a ReleaseError
// whose reason is a paced PausedError, until the rate allows it; the
// Transport refuses a request over the rate the same way, or waits in place
// when the wait is short.
func ExampleWithRate() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	pauses, _ := pause.New(limiter, pause.WithRate(func(api string) (pause.Rate, bool) {
		if api == "slow-vendor" {
			return pause.Rate{Events: 1, Period: time.Minute, Burst: 1}, true
		}
		return pause.Rate{}, false // no published rate
	}))

	// PaceJob counts jobs; the Transport's pacing counts requests instead.
	ctx := context.Background()
	for _, id := range []string{"1", "2"} {
		err := pauses.PaceJob(ctx, "slow-vendor", jobtype.Job{Kind: "Export", ID: id}, func(context.Context) error {
			fmt.Println("job", id, "calls the vendor")
			return nil
		})
		var pe *pause.PausedError
		if errors.As(err, &pe) {
			fmt.Println("job", id, "released: over the rate:", pe.Paced)
		}
	}
	// Output:
	// job 1 calls the vendor
	// job 2 released: over the rate: true
}
