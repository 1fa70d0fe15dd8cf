package adaptbench

import (
	"context"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"
)

// gradient2 is go-concurrency-limits' Gradient2 limit in every process, each
// on its own, behind the library's DefaultLimiter (1 s sample windows of at
// least 100 samples) with a SimpleStrategy, and a BlockingLimiter for the
// common wait. Its settings are the library's defaults (initial 20, max 200,
// a queue allowance of 4, smoothing 0.2, long window 600) but for the
// minimum limit: 1 instead of 20, since 3 processes at 20 would already hold
// 3×C0. A backend overload is a drop, a success an RTT sample.
type gradient2 struct{}

func init() { Register(gradient2{}) }

func (gradient2) Name() string { return "gradient2" }

func (gradient2) Open(_ context.Context, env Env) (Admitter, error) {
	g, err := limit.NewGradient2Limit("adaptbench", 20, 200, 1, nil, 0.2, 600, nil, nil)
	if err != nil {
		return nil, err
	}
	d, err := limiter.NewDefaultLimiter(g, int64(time.Second), int64(time.Second), int64(100*time.Microsecond),
		100, strategy.NewSimpleStrategy(20), nil, nil)
	if err != nil {
		return nil, err
	}
	return &gradient2Admitter{g: g, l: limiter.NewBlockingLimiter(d, env.Wait, nil), wait: env.Wait}, nil
}

type gradient2Admitter struct {
	g    *limit.Gradient2Limit
	l    core.Limiter
	wait time.Duration
}

func (a *gradient2Admitter) Admit(ctx context.Context, _ string) (Ticket, error) {
	// The BlockingLimiter retries until its context ends: the context
	// bounds the wait.
	ctx, cancel := context.WithTimeout(ctx, a.wait)
	defer cancel()
	l, ok := a.l.Acquire(ctx)
	if !ok {
		return nil, ErrRefused
	}
	return listenerTicket{l}, nil
}

func (a *gradient2Admitter) Limit() (int, bool) { return a.g.EstimatedLimit(), false }
func (a *gradient2Admitter) Close() error       { return nil }

type listenerTicket struct{ l core.Listener }

func (t listenerTicket) Done(o Outcome) {
	if o.Overloaded {
		t.l.OnDropped()
		return
	}
	t.l.OnSuccess()
}
