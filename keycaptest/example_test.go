package keycaptest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
)

// exportReport stands for the code under test: it runs under the "exports"
// limit.
func exportReport(ctx context.Context, l *keycap.Limiter, limit keycap.Limit) error {
	return l.Do(ctx, func(context.Context) error { return nil }, limit)
}

// A test installs a Recorder as the real Limiter's observer, then asserts
// that the code took a slot of the limit it should. A limit of max 0 tests
// the refusal path: it refuses at once, without a store call.
func ExampleRecorder() {
	rec := &keycaptest.Recorder{}
	limiter, _ := keycap.NewLimiter(memstore.New(), keycap.WithObserver(rec))
	defer limiter.Close()
	ctx := context.Background()

	_ = exportReport(ctx, limiter, keycap.Spec{Name: "exports", Max: 2}.For("user:42"))
	fmt.Println("acquired:", rec.Count(keycap.SlotAcquired, "exports"))
	fmt.Println("released:", rec.Count(keycap.SlotReleased, "exports"))

	rec.Reset()
	err := exportReport(ctx, limiter, keycap.Spec{Name: "exports", Max: 0}.For("user:42"))
	fmt.Println("refused:", rec.Count(keycap.LimitExceeded, "exports"))
	fmt.Println("error is ErrLimitExceeded:", errors.Is(err, keycap.ErrLimitExceeded))

	for _, e := range rec.Events() {
		fmt.Println(e.Kind, e.Limit.Name(), e.Limit.Key())
	}
	// Output:
	// acquired: 1
	// released: 1
	// refused: 1
	// error is ErrLimitExceeded: true
	// limit exceeded exports user:42
}
