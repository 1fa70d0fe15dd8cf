package keycap

import "context"

// Fence is the fencing token of one limit of a lease (Spec.Fence).
type Fence struct {
	Limit Limit
	// Token is above every token granted before it in the limit's pool.
	// A system the holder writes to keeps the highest token it has seen
	// for the pool and refuses a write that carries a lower one: that
	// writer's lease was lost, and a newer holder has written since.
	Token uint64
}

// adaptive reports whether one of the lease's limits has an adaptive parent.
func (ls *Lease) adaptive() bool {
	for i := range ls.slots {
		if p := ls.slots[i].limit.spec.Parent; p != nil && p.adaptive != nil {
			return true
		}
	}
	return false
}

// Fences returns the fencing tokens of the lease's fenced limits
// (Spec.Fence), in the order of its limits; none for a nil lease. A limit
// whose slot was skipped (the store failed and it fails open) has no
// token: the lease then runs unguarded for it, and Guarded is false.
func (ls *Lease) Fences() []Fence {
	if ls == nil {
		return nil
	}
	var out []Fence
	for i := range ls.slots {
		if s := &ls.slots[i]; s.token != 0 {
			out = append(out, Fence{Limit: s.limit, Token: s.token})
		}
	}
	return out
}

type leaseKey struct{}

// ContextWithLease returns ctx carrying ls, for what the work it guards
// asks of its lease through its context: its fencing tokens (FencesFrom)
// and an overload to report to its adaptive parents (ReportOverload). The
// front doors (Do, httplimit, rpclimit, joblimit) call it, so that a
// handler or a job reaches its lease from its context. A lease with
// neither fencing tokens nor an adaptive parent is not carried: ctx itself
// is returned, and nothing is allocated.
func ContextWithLease(ctx context.Context, ls *Lease) context.Context {
	if ls == nil || !ls.fenced() && !ls.adaptive() {
		return ctx
	}
	return context.WithValue(ctx, leaseKey{}, ls)
}

// FencesFrom returns the fencing tokens of the lease that ContextWithLease
// put in ctx: those of the lease the request or the job runs under.
func FencesFrom(ctx context.Context) []Fence {
	ls, _ := ctx.Value(leaseKey{}).(*Lease)
	return ls.Fences()
}

// ReportOverload reports that the work running under ctx's lease (put
// there by ContextWithLease) met an overload signal — a timeout, a 429,
// 503 or 529 from what it called, RESOURCE_EXHAUSTED — for its adaptive
// parents (Lease.Overloaded). It reports whether ctx carried such a lease.
func ReportOverload(ctx context.Context) bool {
	ls, _ := ctx.Value(leaseKey{}).(*Lease)
	if ls == nil {
		return false
	}
	ls.Overloaded()
	return true
}
