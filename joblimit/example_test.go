package joblimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/memstore"
)

// One calendar sync at a time per calendar. A second job for the same
// calendar, arriving while the first runs, does not run: Run returns a
// ReleaseError that tells the queue to bring it back later, without spending
// one of its attempts.
func Example() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	jobs, _ := joblimit.New(limiter)

	// No jitter, so that the delay printed below is exact; in production the
	// default jitter keeps released jobs from coming back together. No wait
	// in place either: job 2 would wait for job 1, which waits for job 2.
	rule := joblimit.MustRule("calendar:7", keycap.Spec{Max: 1},
		joblimit.WithReleaseAfter(30*time.Second), joblimit.WithJitter(0), joblimit.WithWaitInPlace(0))
	ctx := context.Background()

	err := jobs.Run(ctx, rule, jobtype.Job{Kind: "SyncCalendar", ID: "1"}, func(ctx context.Context) error {
		fmt.Println("job 1 syncing")
		err := jobs.Run(ctx, rule, jobtype.Job{Kind: "SyncCalendar", ID: "2"}, func(context.Context) error {
			fmt.Println("job 2 syncing") // not reached: job 1 holds the slot
			return nil
		})
		var rel *jobtype.ReleaseError
		if errors.As(err, &rel) {
			fmt.Println("job 2 released by", rel.By, "for", rel.Delay)
			fmt.Println("because the limit is exceeded:", errors.Is(err, keycap.ErrLimitExceeded))
		}
		return nil
	})
	fmt.Println("job 1 done:", err)
	// Output:
	// job 1 syncing
	// job 2 released by job:SyncCalendar for 30s
	// because the limit is exceeded: true
	// job 1 done: <nil>
}

// For gives queue adapters (riverlimit, asynqlimit) a jobtype.Runner. With
// WithSharedPool every job kind of a key counts in one pool, and WithSkip
// drops a job that finds no free slot instead of releasing it.
func ExampleLimiter_For() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	jobs, _ := joblimit.New(limiter)

	// One call to this Stripe account at a time, whatever the job's kind.
	stripe := jobs.For(joblimit.MustRule("stripe:acct_1", keycap.Spec{Max: 1}, joblimit.WithSharedPool(), joblimit.WithSkip()))
	ctx := context.Background()

	_ = stripe.Run(ctx, jobtype.Job{Kind: "Charge", ID: "1"}, func(ctx context.Context) error {
		err := stripe.Run(ctx, jobtype.Job{Kind: "Refund", ID: "2"}, func(context.Context) error {
			return nil // not reached: the charge holds the shared slot
		})
		var skip *jobtype.SkipError
		if errors.As(err, &skip) {
			fmt.Println("refund skipped by pool", skip.By, "for", skip.Key)
		}
		return nil
	})
	// Output: refund skipped by pool job for stripe:acct_1
}

// Customers share a total: at most 2 syncs at once in all, at most 2 per
// customer. With the total in use, a third customer's job is refused (and
// goes back to its queue), though its own pool is empty.
func ExampleNewRule_parent() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	jobs, _ := joblimit.New(limiter)
	total := keycap.MustParent("syncs", 2)
	rule := func(customer string) joblimit.Rule {
		return joblimit.MustRule("customer:"+customer, keycap.Spec{Max: 2, Parent: total}, joblimit.WithWaitInPlace(0))
	}
	ctx := context.Background()
	_ = jobs.Run(ctx, rule("a"), jobtype.Job{Kind: "Sync", ID: "1"}, func(ctx context.Context) error {
		return jobs.Run(ctx, rule("b"), jobtype.Job{Kind: "Sync", ID: "2"}, func(ctx context.Context) error {
			err := jobs.Run(ctx, rule("c"), jobtype.Job{Kind: "Sync", ID: "3"}, func(context.Context) error { return nil })
			fmt.Println("c refused:", errors.Is(err, keycap.ErrLimitExceeded))
			return nil
		})
	})
	// Output: c refused: true
}
