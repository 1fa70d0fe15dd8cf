// Package joblimit lets at most N jobs run at once per key, on any job queue:
// a job that finds no free slot goes back to the queue for a while, without
// spending its retries. riverlimit and asynqlimit apply it to River and asynq.
//
// A Rule is a keycap.Spec (how many jobs may run at once per key, with
// weights, parents, shadows and fail modes as everywhere in keycap) and
// what a job does when it finds no slot: how long it waits before its next
// try, and how long it may keep waiting in all:
//
//	rule, err := joblimit.NewRule("outlook:"+providerID, keycap.Spec{Max: 4},
//		joblimit.WithSharedPool(),                 // across job kinds
//		joblimit.WithReleaseAfter(10*time.Second), // plus up to 5 s of jitter
//		joblimit.WithDeadline(time.Hour),          // then fail, through the queue's failure path
//	)
//
// Limiter.Run takes a slot for a job and runs it, or tells the adapter what
// to do instead: release the job (*jobtype.ReleaseError), drop it
// (*jobtype.SkipError), or fail it (*jobtype.DeadlineError). The slot is a
// keycap lease of the family keycap.FamilyJob: it is renewed while the job
// runs, released when the job ends however it ends, and freed by its TTL if
// the worker dies.
package joblimit

import (
	"context"
	"errors"
	"strconv"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/store"
)

// Limiter runs jobs under rules, with slots from a keycap Limiter.
type Limiter struct {
	l *keycap.Limiter
}

// New returns a Limiter that takes slots from l. Rules with a deadline need a
// store that keeps marks (store.Marks: every store but a third party's
// may).
func New(l *keycap.Limiter) (*Limiter, error) {
	if l == nil {
		return nil, errors.New("joblimit: New: limiter is nil")
	}
	return &Limiter{l: l}, nil
}

// Run takes a slot of rule for job and runs work with it, releasing the slot
// when work returns or panics. It returns work's error untouched. work's
// context carries the slot's fencing token when the rule's spec asks for
// one (keycap.Spec.Fence; read with keycap.FencesFrom).
//
// When there is no free slot (or the store failed and the rule fails closed)
// work does not run, and Run returns a *jobtype.ReleaseError with the delay
// to wait, a *jobtype.SkipError with WithSkip, or a *jobtype.DeadlineError
// once the job has waited longer than the rule's deadline. A store failure
// with a rule that fails open runs work without a slot. A job whose context
// ends while it waits for a slot (its worker stopping) is released too.
//
// A job with no free slot first waits in the pool's line, holding its
// worker (WithWaitInPlace); then, when job.Wake is set and the store keeps
// lines, it is parked: released for the park delay with its ticket kept,
// and woken (job.Wake) when a slot is handed to it (frontdoor.AcquireOrPark).
func (jl *Limiter) Run(ctx context.Context, rule Rule, job jobtype.Job, work func(context.Context) error) error {
	pool, key := rule.Pool(job.Kind), rule.Key()
	spec := rule.spec
	spec.Name, spec.Family, spec.TTL, spec.Wait = pool, keycap.FamilyJob, rule.slotTTL(job.Timeout), rule.inPlace(ctx)
	lim := spec.For(key)
	if frontdoor.Labels(jl.l) {
		ctx = keycap.WithLabel(ctx, job.Kind+" "+job.ID)
	}
	var lease *keycap.Lease
	var owner store.Owner
	var err error
	if job.Wake != nil && !rule.noHandoff && !rule.skip {
		wake := job.Wake
		// The same for every release of this attempt, so that the one that
		// comes back claims the slot handed to it; another for a retry or a
		// rescue, which must not share a live attempt's slot.
		owner = frontdoor.OwnerFor(pool + "\x00" + key + "\x00" + job.ID + "\x00" + strconv.Itoa(job.Attempt))
		lease, err = frontdoor.AcquireOrPark(ctx, jl.l, frontdoor.Parking{
			Owner: owner,
			For:   rule.parkFor + JobClaim, // outlives the job's fallback delay
			Claim: JobClaim,
			Wake: func() {
				wctx, cancel := context.WithTimeout(context.Background(), JobClaim)
				defer cancel()
				_ = wake(wctx)
			},
		}, lim)
	} else {
		lease, err = jl.l.Acquire(ctx, lim)
	}
	if err == nil {
		defer lease.Release()
		err := work(keycap.ContextWithLease(ctx, lease)) // the job reads its tokens with keycap.FencesFrom
		if errors.Is(err, context.DeadlineExceeded) {
			lease.Overloaded() // a job that timed out is an overload signal for an adaptive parent
		}
		return err
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The worker is stopping while the job waited for a slot: the job
		// goes back to the queue, as if refused, spending no attempt.
		return &jobtype.ReleaseError{By: pool, Key: key, Delay: rule.delay(), Err: err}
	}
	if !errors.Is(err, keycap.ErrLimitExceeded) && !errors.Is(err, keycap.ErrStoreUnavailable) {
		return err // the limit is invalid
	}
	le, _ := errors.AsType[*keycap.LimitError](err)
	parked := le != nil && le.Parked
	if rule.deadline > 0 {
		if err := jobtype.CheckDeadline(ctx, jl.l, pool, key, job, rule.deadline, err); err != nil {
			if parked {
				frontdoor.Unpark(jl.l, owner, lim) // it will not come back for the slot
			}
			return err
		}
	}
	if rule.skip {
		return &jobtype.SkipError{By: pool, Key: key, Err: err}
	}
	delay := rule.delay()
	if parked {
		delay = rule.parkFor
	}
	return &jobtype.ReleaseError{By: pool, Key: key, Delay: delay, Err: err}
}

// For returns a Runner that runs jobs under rule, for queue adapters.
func (jl *Limiter) For(rule Rule) jobtype.Runner {
	return jobtype.RunnerFunc(func(ctx context.Context, job jobtype.Job, work func(context.Context) error) error {
		return jl.Run(ctx, rule, job, work)
	})
}
