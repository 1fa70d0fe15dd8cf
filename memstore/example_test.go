package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
)

// The usual use: a Limiter over an in-process store, for caps that hold
// within this process. Swap memstore.New() for redisstore when several
// processes must share them; nothing else changes.
func Example() {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		panic(err)
	}
	defer limiter.Close()

	uploads := keycap.MustLimit("uploads", "user:42", 1)
	lease, err := limiter.Acquire(context.Background(), uploads)
	if err != nil {
		panic(err)
	}
	defer lease.Release()

	_, err = limiter.Acquire(context.Background(), uploads)
	fmt.Println(err)
	// Output: keycap: limit exceeded: uploads (max 1)
}

// WithClock lets a test move the store's time by hand: here a holder that
// never releases its lease (a crashed process) loses its slot once the TTL
// has passed by the store's clock, without the test sleeping.
func ExampleWithClock() {
	var now time.Duration
	store := memstore.New(memstore.WithClock(func() time.Duration { return now }))
	ctx := context.Background()
	pool := keycap.NewPoolID("reports", "team:3")

	crashed, next := keycap.NewOwner(), keycap.NewOwner()
	ok, _ := store.Acquire(ctx, pool, crashed, 1, time.Minute)
	fmt.Println("first holder granted:", ok)

	ok, _ = store.Acquire(ctx, pool, next, 1, time.Minute)
	fmt.Println("second holder granted while the first holds:", ok)

	now += time.Minute // the first holder never renewed
	ok, _ = store.Acquire(ctx, pool, next, 1, time.Minute)
	fmt.Println("second holder granted after the TTL:", ok)
	// Output:
	// first holder granted: true
	// second holder granted while the first holds: false
	// second holder granted after the TTL: true
}
