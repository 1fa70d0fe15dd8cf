package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
)

func Example() {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	// At most 2 exports at once per user.
	spec := keycap.Spec{Name: "exports", Max: 2}
	if err := spec.Validate(); err != nil {
		panic(err)
	}
	exports := spec.For("user:42")
	ctx := context.Background()
	first, _ := limiter.Acquire(ctx, exports)
	second, _ := limiter.Acquire(ctx, exports)

	_, err = limiter.Acquire(ctx, exports)
	var le *keycap.LimitError
	if errors.As(err, &le) {
		fmt.Println("third export refused by", le.Limit.Name(), "for", le.Limit.Key())
	}

	first.Release()
	third, err := limiter.Acquire(ctx, exports)
	fmt.Println("after a release:", err)
	second.Release()
	third.Release()
	// Output:
	// third export refused by exports for user:42
	// after a release: <nil>
}

func ExampleLimiter_Acquire_severalLimits() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()

	// Every limit must grant: 1 report at once per user, 3 per team. When one
	// refuses, the slots already taken are given back.
	user := keycap.Spec{Name: "reports", Max: 1}.For("user:7")
	team := keycap.Spec{Name: "reports", Max: 3, Wait: 2 * time.Second}.For("team:3")

	lease, err := limiter.Acquire(context.Background(), user, team)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release()
	fmt.Println("holding", len(lease.Limits()), "slots")
	// Output: holding 2 slots
}

func ExampleLimiter_Do() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()

	limit := keycap.Spec{Name: "sync", Max: 1, FailMode: keycap.FailClosed}.For("tenant:9")
	err := limiter.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("syncing tenant 9") // the slot is released when this returns or panics
		return nil
	}, limit)
	fmt.Println(err)
	// Output:
	// syncing tenant 9
	// <nil>
}
