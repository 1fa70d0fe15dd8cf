package adaptbench

import (
	"context"
	"errors"
	"fmt"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
)

// failsafeAdaptive is failsafe-go's adaptive limiter in every process, on
// its documented defaults (limits 1..200, starting at 20; 1-30 s recent
// window of at least 50 samples), each process on its own: a limiter sees
// only its own work. Requests wait for a permit up to the common wait; a
// backend overload drops the permit (no latency sample), a success records
// one.
type failsafeAdaptive struct{}

func init() { Register(failsafeAdaptive{}) }

func (failsafeAdaptive) Name() string { return "failsafe-adaptive" }

func (failsafeAdaptive) Open(_ context.Context, env Env) (Admitter, error) {
	l := adaptivelimiter.NewBuilder[any]().WithLimits(1, 200, 20).Build()
	return &failsafeAdmitter{l: l, env: env}, nil
}

type failsafeAdmitter struct {
	l   adaptivelimiter.AdaptiveLimiter[any]
	env Env
}

func (a *failsafeAdmitter) Admit(ctx context.Context, _ string) (Ticket, error) {
	p, err := a.l.AcquirePermitWithMaxWait(ctx, a.env.Wait)
	if errors.Is(err, adaptivelimiter.ErrExceeded) {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	if err != nil {
		return nil, err
	}
	return permitTicket{p}, nil
}

func (a *failsafeAdmitter) Limit() (int, bool) { return a.l.Limit(), false }
func (a *failsafeAdmitter) Close() error       { return nil }

type permitTicket struct{ p adaptivelimiter.Permit }

func (t permitTicket) Done(o Outcome) {
	if o.Overloaded {
		t.p.Drop()
		return
	}
	t.p.Record()
}
