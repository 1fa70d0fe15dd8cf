package adaptbench

import (
	"context"
	"errors"
	"time"

	"github.com/keycap/keycap"
)

// keycapFixed is a keycap parent of a fixed total — factor × C0 — shared by
// the processes through the store, with one pool per tenant under it, each of
// Max the total: a tenant alone may use it all, and tenants that wait are
// served by fair share.
type keycapFixed struct {
	name   string
	factor int
}

func init() {
	Register(keycapFixed{"keycap-fixed-C", 1})
	Register(keycapFixed{"keycap-fixed-2C", 2})
}

func (k keycapFixed) Name() string { return k.name }

func (k keycapFixed) Open(_ context.Context, env Env) (Admitter, error) {
	if env.Store == nil {
		return nil, errors.New(k.name + " needs a store (-store redis)")
	}
	lim, err := keycap.NewLimiter(env.Store)
	if err != nil {
		return nil, err
	}
	total := k.factor * env.Capacity
	parent, err := keycap.NewParent("adaptbench-"+env.RunID, total)
	if err != nil {
		return nil, errors.Join(err, lim.Close())
	}
	return &keycapAdmitter{lim: lim, parent: parent, spec: TenantSpec(env, parent)}, nil
}

// TenantSpec is the per-tenant limit under parent that the keycap strategies
// use: Max the parent's total, the common wait, failing closed (a store that
// cannot answer refuses, so that the backend never sees more than the
// total).
func TenantSpec(env Env, parent *keycap.Parent) keycap.Spec {
	return keycap.Spec{
		Name:     "adaptbench-" + env.RunID,
		Max:      parent.Max(),
		TTL:      10 * time.Second,
		Wait:     env.Wait,
		FailMode: keycap.FailClosed,
		Parent:   parent,
	}
}

type keycapAdmitter struct {
	lim    *keycap.Limiter
	parent *keycap.Parent
	spec   keycap.Spec
}

func (a *keycapAdmitter) Admit(ctx context.Context, tenant string) (Ticket, error) {
	ls, err := a.lim.Acquire(ctx, a.spec.For(tenant))
	if err != nil {
		return nil, err
	}
	return leaseTicket{ls}, nil
}

func (a *keycapAdmitter) Limit() (int, bool) { return a.parent.Max(), true }
func (a *keycapAdmitter) Close() error       { return a.lim.Close() }

type leaseTicket struct{ ls *keycap.Lease }

func (t leaseTicket) Done(Outcome) { t.ls.Release() }
