package frontdoor_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/memstore"
)

// A caller that cannot wait in place (a job going back to its queue) parks:
// its place in the line is kept, and it is woken when a slot is handed to
// it; its next attempt, with the same owner, claims the slot.
func ExampleAcquireOrPark() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	limit := keycap.Spec{Name: "export", Max: 1}.For("customer:7")
	ctx := context.Background()

	running, _ := limiter.Acquire(ctx, limit) // another job holds the slot

	woken := make(chan struct{}, 1)
	parking := frontdoor.Parking{
		Owner: frontdoor.OwnerFor("job 42"), // the same on each attempt
		For:   time.Minute,                  // the job's fallback delay
		Claim: 10 * time.Second,             // time to come back once woken
		Wake:  func() { woken <- struct{}{} },
	}
	_, err := frontdoor.AcquireOrPark(ctx, limiter, parking, limit)
	var le *keycap.LimitError
	fmt.Println("parked:", errors.As(err, &le) && le.Parked)

	running.Release() // the slot goes to the parked job's ticket
	select {
	case <-woken:
		fmt.Println("woken")
	case <-time.After(10 * time.Second):
		fmt.Println("not woken in 10 s")
	}
	lease, err := frontdoor.AcquireOrPark(ctx, limiter, parking, limit)
	fmt.Println("claimed the slot:", err == nil)
	lease.Release()
	// Output:
	// parked: true
	// woken
	// claimed the slot: true
}
