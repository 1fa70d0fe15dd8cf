package memstore_test

import (
	"context"
	"fmt"

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

	uploads := keycap.Spec{Name: "uploads", Max: 1}.For("user:42")
	lease, err := limiter.Acquire(context.Background(), uploads)
	if err != nil {
		panic(err)
	}
	defer lease.Release()

	_, err = limiter.Acquire(context.Background(), uploads)
	fmt.Println(err)
	// Output: keycap: limit exceeded: uploads (max 1)
}
