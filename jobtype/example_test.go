package jobtype_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keycap/keycap/jobtype"
)

// A Runner decides, for each job, whether to run it now or what the queue
// should do instead. This one holds back reports during a maintenance window:
// it runs every other job, and asks the queue to bring reports back in a
// minute, without counting an attempt.
func ExampleRunnerFunc() {
	maintenance := jobtype.RunnerFunc(func(ctx context.Context, job jobtype.Job, work func(context.Context) error) error {
		if job.Kind == "Report" {
			return &jobtype.ReleaseError{By: "maintenance", Delay: time.Minute, Err: errors.New("database migration")}
		}
		return work(ctx)
	})

	for _, job := range []jobtype.Job{{Kind: "Email", ID: "1"}, {Kind: "Report", ID: "2"}} {
		err := maintenance.Run(context.Background(), job, func(context.Context) error {
			fmt.Println("ran", job.Kind)
			return nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// ran Email
	// keycap: job released by maintenance for 1m0s: database migration
}

// A queue adapter turns a Runner's result into the queue's own: a release
// becomes a snooze that spends no attempt, a skip a cancellation, and
// anything else, a DeadlineError included, an ordinary failure.
func ExampleReleaseError() {
	outcome := func(err error) string {
		var rel *jobtype.ReleaseError
		var skip *jobtype.SkipError
		switch {
		case errors.As(err, &rel):
			return fmt.Sprintf("snooze %s (held back by %s)", rel.Delay, rel.By)
		case errors.As(err, &skip):
			return "cancel (skipped by " + skip.By + ")"
		case errors.Is(err, jobtype.ErrDeadline):
			return "fail, past the deadline: " + err.Error()
		case err != nil:
			return "fail: " + err.Error()
		}
		return "done"
	}

	full := errors.New("no free slot")
	fmt.Println(outcome(&jobtype.ReleaseError{By: "job:export", Key: "user:42", Delay: 10 * time.Second, Err: full}))
	fmt.Println(outcome(&jobtype.SkipError{By: "job:export", Key: "user:42", Err: full}))
	fmt.Println(outcome(&jobtype.DeadlineError{By: "job:export", Waited: 2 * time.Hour, Deadline: time.Hour, Err: full}))
	fmt.Println(outcome(nil))
	// Output:
	// snooze 10s (held back by job:export)
	// cancel (skipped by job:export)
	// fail, past the deadline: keycap: job held back by job:export for 2h0m0s, past its deadline of 1h0m0s
	// done
}
