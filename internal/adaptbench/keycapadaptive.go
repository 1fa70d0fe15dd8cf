package adaptbench

import (
	"context"
	"errors"
	"time"

	"github.com/keycap/keycap"
)

// keycapAdaptive is a keycap adaptive parent (keycap.WithAdaptive) shared by
// the processes through the store: it starts at 2 × C0, the bad guess, and
// moves between 1 and 4 × C0 from the latency of the leases and the
// backend's overload answers, one value for every process; tenants share
// it as they share a fixed parent.
type keycapAdaptive struct{}

func init() { Register(keycapAdaptive{}) }

func (keycapAdaptive) Name() string { return "keycap-adaptive" }

func (keycapAdaptive) Open(_ context.Context, env Env) (Admitter, error) {
	if env.Store == nil {
		return nil, errors.New("keycap-adaptive needs a store (-store redis)")
	}
	lim, err := keycap.NewLimiter(env.Store)
	if err != nil {
		return nil, err
	}
	parent, err := keycap.NewParent("adaptbench-"+env.RunID, 2*env.Capacity, keycap.WithAdaptive(keycap.Adaptive{
		Floor: 1, Ceiling: 4 * env.Capacity, Interval: 250 * time.Millisecond, Tolerance: 1.1,
	}))
	if err != nil {
		return nil, errors.Join(err, lim.Close())
	}
	spec := TenantSpec(env, parent)
	spec.Max = 4 * env.Capacity // a tenant alone may use the whole total, whatever it becomes
	return &adaptiveAdmitter{keycapAdmitter{lim: lim, parent: parent, spec: spec}}, nil
}

type adaptiveAdmitter struct{ keycapAdmitter }

func (a *adaptiveAdmitter) Admit(ctx context.Context, tenant string) (Ticket, error) {
	ls, err := a.lim.Acquire(ctx, a.spec.For(tenant))
	if err != nil {
		return nil, err
	}
	return adaptiveTicket{ls}, nil
}

// Limit is the total this process follows: the one the processes agreed.
func (a *adaptiveAdmitter) Limit() (int, bool) {
	if tu, ok := a.lim.Tuning(a.parent); ok {
		return tu.Total, true
	}
	return a.parent.Max(), true
}

type adaptiveTicket struct{ ls *keycap.Lease }

func (t adaptiveTicket) Done(o Outcome) {
	if o.Overloaded {
		t.ls.Overloaded() // the backend's 503, or no answer in time
	}
	t.ls.Release()
}
