package nullstore_test

import (
	"context"
	"fmt"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/nullstore"
)

// Limits turned off: every acquire is granted, past any max, and the events
// are still reported.
func Example() {
	rec := &keycaptest.Recorder{}
	limiter, _ := keycap.NewLimiter(nullstore.New(), keycap.WithObserver(rec))
	defer limiter.Close()
	exports := keycap.Spec{Name: "exports", Max: 1}.For("user:42")
	for range 3 {
		lease, err := limiter.Acquire(context.Background(), exports)
		if err != nil {
			fmt.Println(err)
			continue
		}
		defer lease.Release()
	}
	fmt.Println("granted:", rec.Count(keycap.SlotAcquired, "exports"))
	// Output: granted: 3
}
