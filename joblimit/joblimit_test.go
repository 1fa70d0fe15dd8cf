package joblimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/jobtype"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

func newLimiter(t *testing.T, store keycap.Store) (*joblimit.Limiter, *keycaptest.Recorder) {
	t.Helper()
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(store, keycap.WithObserver(rec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	jl, err := joblimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return jl, rec
}

// hold runs a job of rule that keeps its slot until the returned function is
// called.
func hold(t *testing.T, jl *joblimit.Limiter, rule joblimit.Rule, job jobtype.Job) (release func()) {
	t.Helper()
	running, done := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- jl.Run(context.Background(), rule, job, func(context.Context) error {
			close(running)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
			}
			return nil
		})
	}()
	select {
	case <-running:
	case err := <-errc:
		t.Fatalf("holding job did not run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("holding job never ran")
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(done) }) }) // a failed test leaves no job running
	return func() {
		once.Do(func() { close(done) })
		if err := testkit.Recv(t, errc, 10*time.Second, "the holding job's end"); err != nil {
			t.Error(err)
		}
	}
}

var job = jobtype.Job{Kind: "SyncCalendar", ID: "1"}

func run(jl *joblimit.Limiter, rule joblimit.Rule, j jobtype.Job) (ran bool, err error) {
	err = jl.Run(context.Background(), rule, j, func(context.Context) error { ran = true; return nil })
	return ran, err
}

func TestNewRuleNamesTheInvalidField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field string
		spec  keycap.Spec
		opts  []joblimit.Option
	}{
		{"release after", keycap.Spec{Max: 1}, []joblimit.Option{joblimit.WithReleaseAfter(-time.Second)}},
		{"release at", keycap.Spec{Max: 1}, []joblimit.Option{joblimit.WithReleaseAt(time.Now().Add(-time.Minute))}},
		{"jitter", keycap.Spec{Max: 1}, []joblimit.Option{joblimit.WithJitter(-1)}},
		{"TTL", keycap.Spec{Max: 1, TTL: time.Microsecond}, nil},
		{"Budget", keycap.Spec{Max: 1, Budget: -time.Second}, nil},
		{"FailMode", keycap.Spec{Max: 1, FailMode: 9}, nil},
		{"deadline", keycap.Spec{Max: 1}, []joblimit.Option{joblimit.WithDeadline(-time.Minute)}},
		{"Weight", keycap.Spec{Max: 1, Weight: 2}, nil},
		{"Share", keycap.Spec{Max: 1, Share: 2}, nil},
		{"Wait", keycap.Spec{Max: 1, Wait: time.Second}, nil},
		{"Family", keycap.Spec{Max: 1, Family: keycap.FamilyConn}, nil},
	} {
		_, err := joblimit.NewRule("k", tc.spec, tc.opts...)
		var ie *keycap.InvalidLimitError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
	// A TTL or a budget of 0 is no longer invalid: it is the rule's default
	// (the job's timeout plus TTLMargin; DefaultBudget).
	if r, err := joblimit.NewRule("k", keycap.Spec{Max: 1, TTL: 0, Budget: 0}); err != nil {
		t.Errorf("TTL and budget 0: %v", err)
	} else if r.Spec().Budget != joblimit.DefaultBudget || r.Spec().TTL != 0 {
		t.Errorf("TTL and budget 0: spec %+v, want the default budget and the TTL left to the job", r.Spec())
	}
	var ie *keycap.InvalidLimitError
	if _, err := joblimit.NewRule("k", keycap.Spec{Max: 3, Parent: keycap.MustParent("small", 2)}); !errors.As(err, &ie) || ie.Field != "Max" {
		t.Errorf("a rule above its parent: %v", err)
	}
	if _, err := joblimit.NewRule("k", keycap.Spec{Max: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	if r := joblimit.MustRule("outlook", keycap.Spec{Max: 4}, joblimit.WithPrefix("p:")); r.Key() != "p:outlook" || r.Max() != 4 {
		t.Errorf("rule %v key %q", r, r.Key())
	}
}

func TestRunsUnderTheLimitAndReleasesAfter(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("calendar:1", keycap.Spec{Max: 1}, joblimit.WithReleaseAfter(10*time.Second), joblimit.WithWaitInPlace(0))
	release := hold(t, jl, rule, job)

	ran, err := run(jl, rule, job)
	var rel *jobtype.ReleaseError
	if ran || !errors.As(err, &rel) || !errors.Is(err, jobtype.ErrReleased) || !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("second job: ran %v, err %v; want a ReleaseError", ran, err)
	}
	if rel.Delay < 10*time.Second || rel.Delay > 15*time.Second {
		t.Fatalf("delay %s, want 10 s plus up to 5 s of jitter", rel.Delay)
	}
	if rel.By != "job:SyncCalendar" || rel.Key != "calendar:1" {
		t.Fatalf("pool %q key %q", rel.By, rel.Key)
	}
	// Another kind has its own pool; so has another key.
	if ran, err := run(jl, rule, jobtype.Job{Kind: "Other", ID: "2"}); !ran || err != nil {
		t.Fatalf("other kind: %v %v", ran, err)
	}
	if ran, err := run(jl, joblimit.MustRule("calendar:2", keycap.Spec{Max: 1}), job); !ran || err != nil {
		t.Fatalf("other key: %v %v", ran, err)
	}
	release()
	if ran, err := run(jl, rule, job); !ran || err != nil {
		t.Fatalf("after release: %v %v", ran, err)
	}
	if n := rec.Count(keycap.LimitExceeded, "job:SyncCalendar"); n != 1 {
		t.Fatalf("%d refusals reported", n)
	}
	if a, r := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); a != r || a != 4 {
		t.Fatalf("acquired %d, released %d", a, r)
	}
}

func TestSharedPool(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	shared := joblimit.MustRule("stripe", keycap.Spec{Max: 1}, joblimit.WithSharedPool(), joblimit.WithWaitInPlace(0))
	release := hold(t, jl, shared, jobtype.Job{Kind: "Charge", ID: "1"})
	defer release()
	_, err := run(jl, shared, jobtype.Job{Kind: "Refund", ID: "2"})
	var rel *jobtype.ReleaseError
	if !errors.As(err, &rel) || rel.By != "job" {
		t.Fatalf("another kind on a shared pool: %v", err)
	}
	// A prefix makes another pool.
	if ran, err := run(jl, joblimit.MustRule("stripe", keycap.Spec{Max: 1}, joblimit.WithSharedPool(), joblimit.WithPrefix("eu:")), job); !ran || err != nil {
		t.Fatalf("prefixed: %v %v", ran, err)
	}
}

func TestDelays(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	at := time.Now().Add(time.Hour)
	for name, tc := range map[string]struct {
		rule     joblimit.Rule
		min, max time.Duration
	}{
		"no jitter":   {joblimit.MustRule("a", keycap.Spec{Max: 0}, joblimit.WithReleaseAfter(time.Second), joblimit.WithJitter(0)), time.Second, time.Second},
		"jitter":      {joblimit.MustRule("b", keycap.Spec{Max: 0}, joblimit.WithReleaseAfter(time.Second), joblimit.WithJitter(3*time.Second)), time.Second, 4 * time.Second},
		"zero":        {joblimit.MustRule("c", keycap.Spec{Max: 0}, joblimit.WithReleaseAfter(0)), 0, 0},
		"date":        {joblimit.MustRule("d", keycap.Spec{Max: 0}, joblimit.WithReleaseAt(at)), time.Hour - time.Minute, time.Hour},
		"date+jitter": {joblimit.MustRule("e", keycap.Spec{Max: 0}, joblimit.WithReleaseAt(at), joblimit.WithJitter(time.Minute)), time.Hour - time.Minute, time.Hour + time.Minute},
	} {
		for range 20 {
			_, err := run(jl, tc.rule, job)
			var rel *jobtype.ReleaseError
			if !errors.As(err, &rel) || rel.Delay < tc.min || rel.Delay > tc.max {
				t.Fatalf("%s: %v, want a delay in [%s, %s]", name, err, tc.min, tc.max)
			}
		}
	}
}

func TestSkip(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, memstore.New())
	_, err := run(jl, joblimit.MustRule("k", keycap.Spec{Max: 0}, joblimit.WithSkip()), job)
	var skip *jobtype.SkipError
	if !errors.As(err, &skip) || !errors.Is(err, jobtype.ErrSkipped) {
		t.Fatalf("got %v, want a SkipError", err)
	}
	if rec.Count(keycap.LimitExceeded, "") != 1 {
		t.Fatal("a skipped job is not counted as a refusal")
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("k", keycap.Spec{Max: 0}, joblimit.WithDeadline(200*time.Millisecond))
	j := jobtype.Job{Kind: "K", ID: "job-7"}
	start := time.Now()
	for {
		_, err := run(jl, rule, j)
		var de *jobtype.DeadlineError
		if errors.As(err, &de) {
			if !errors.Is(err, jobtype.ErrDeadline) || !errors.Is(err, keycap.ErrLimitExceeded) || de.Waited < 200*time.Millisecond {
				t.Fatalf("deadline error %v (waited %s)", err, de.Waited)
			}
			if time.Since(start) < 200*time.Millisecond {
				t.Fatalf("failed after %s, before the deadline", time.Since(start))
			}
			break
		}
		if !errors.Is(err, jobtype.ErrReleased) {
			t.Fatalf("before the deadline: %v", err)
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("never failed")
		}
		time.Sleep(20 * time.Millisecond) // the queue's release delay
	}
	// Another job has its own clock.
	if _, err := run(jl, rule, jobtype.Job{Kind: "K", ID: "job-8"}); !errors.Is(err, jobtype.ErrReleased) {
		t.Fatalf("another job: %v", err)
	}
	if _, err := run(jl, rule, jobtype.Job{Kind: "K"}); err == nil || errors.Is(err, jobtype.ErrReleased) {
		t.Fatalf("a job without an ID cannot have a deadline: %v", err)
	}
}

// downStore is a store whose acquires fail, and that declares no feature.
type downStore struct{ store.Store }

func (downStore) Features() store.Features { return 0 }

func (downStore) Acquire(context.Context, store.PoolID, store.Owner, store.Demand) (store.Grant, error) {
	return store.Grant{}, errors.New("down")
}

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, downStore{memstore.New()})
	if ran, err := run(jl, joblimit.MustRule("k", keycap.Spec{Max: 1, FailMode: keycap.FailOpen}), job); !ran || err != nil {
		t.Fatalf("fail-open: %v %v", ran, err)
	}
	ran, err := run(jl, joblimit.MustRule("k", keycap.Spec{Max: 1, FailMode: keycap.FailClosed}), job)
	if ran || !errors.Is(err, jobtype.ErrReleased) || !errors.Is(err, keycap.ErrStoreUnavailable) {
		t.Fatalf("fail-closed: %v %v", ran, err)
	}
	if rec.Count(keycap.StoreFailed, "") != 1 {
		t.Fatal("outage not reported once")
	}
}

func TestWorkErrorsAndPanicsReleaseTheSlot(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("k", keycap.Spec{Max: 1})
	want := errors.New("job failed")
	if err := jl.Run(context.Background(), rule, job, func(context.Context) error { return want }); err != want {
		t.Fatalf("Run = %v, want the job's own error", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = jl.Run(context.Background(), rule, job, func(context.Context) error { panic("boom") })
	}()
	if ran, err := run(jl, rule, job); !ran || err != nil {
		t.Fatalf("slot not released: %v %v", ran, err)
	}
	if a, r := rec.Count(keycap.SlotAcquired, ""), rec.Count(keycap.SlotReleased, ""); a != 3 || r != 3 {
		t.Fatalf("acquired %d, released %d", a, r)
	}
}

func TestSlotTTL(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, memstore.New())
	for _, tc := range []struct {
		rule    joblimit.Rule
		timeout time.Duration
		want    time.Duration
	}{
		{joblimit.MustRule("a", keycap.Spec{Max: 1}), 0, 70 * time.Second},
		{joblimit.MustRule("b", keycap.Spec{Max: 1}), 5 * time.Minute, 5*time.Minute + 10*time.Second},
		{joblimit.MustRule("c", keycap.Spec{Max: 1, TTL: time.Second}), 5 * time.Minute, time.Second},
	} {
		rec.Reset()
		_, _ = run(jl, tc.rule, jobtype.Job{Kind: "K", ID: "1", Timeout: tc.timeout})
		ev := rec.Events()
		if len(ev) == 0 || ev[0].Limit.Spec().TTL != tc.want {
			t.Errorf("rule %q, timeout %s: TTL %v, want %s", tc.rule.Key(), tc.timeout, ev, tc.want)
		}
	}
}

// A job with no free slot waits in the line, holding its worker, and runs
// as soon as the slot frees: no release, no second fetch.
func TestWaitsInPlaceForTheNextSlot(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("in-place", keycap.Spec{Max: 1}, joblimit.WithWaitInPlace(10*time.Second))
	release := hold(t, jl, rule, job)
	done := make(chan error, 1)
	go func() {
		ran, err := run(jl, rule, jobtype.Job{Kind: job.Kind, ID: "2"})
		if err == nil && !ran {
			err = errors.New("did not run")
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the second job did not wait: %v", err)
	case <-time.After(100 * time.Millisecond): // it is waiting (what is tested is that it does not return)
	}
	start := time.Now()
	release()
	if err := testkit.Recv(t, done, 5*time.Second, "the waiting job"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("the waiting job ran %s after the slot freed", el)
	}
}

// A job that cannot wait in place is parked: released for the park delay,
// and woken (its Wake called) the moment its slot frees; its next attempt
// claims the slot, which no other job can take meanwhile.
func TestParkedJobIsWokenAndKeepsItsPlace(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("parked", keycap.Spec{Max: 1}, joblimit.WithWaitInPlace(0), joblimit.WithParkFor(time.Hour))
	release := hold(t, jl, rule, job)
	woken := make(chan struct{}, 2)
	parked := jobtype.Job{Kind: job.Kind, ID: "2", Wake: func(context.Context) error { woken <- struct{}{}; return nil }}
	_, err := run(jl, rule, parked)
	var rel *jobtype.ReleaseError
	if !errors.As(err, &rel) || rel.Delay != time.Hour {
		t.Fatalf("parked job: %v, want a release for the park delay", err)
	}
	release()
	testkit.Recv(t, woken, 5*time.Second, "the parked job's wake-up")
	if ran, err := run(jl, rule, jobtype.Job{Kind: job.Kind, ID: "3"}); ran || !errors.As(err, &rel) {
		t.Fatalf("a later job took the slot handed to the parked one: ran %v, %v", ran, err)
	}
	if ran, err := run(jl, rule, parked); !ran || err != nil {
		t.Fatalf("the woken job: ran %v, %v", ran, err)
	}
}

// TestParentSharedByCustomers: two customers' jobs share a total of 2; a
// weighted job takes both.
func TestParentSharedByCustomers(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	total := keycap.MustParent("joblimit-test-total", 2)
	rule := func(customer string, weight int) joblimit.Rule {
		return joblimit.MustRule("customer:"+customer, keycap.Spec{Max: 2, Parent: total, Weight: weight}, joblimit.WithWaitInPlace(0))
	}
	release := hold(t, jl, rule("a", 0), job)
	if ran, err := run(jl, rule("b", 0), jobtype.Job{Kind: "SyncCalendar", ID: "2"}); !ran || err != nil {
		t.Fatalf("b's first job beside a's: %v %v", ran, err)
	}
	releaseB := hold(t, jl, rule("b", 0), jobtype.Job{Kind: "SyncCalendar", ID: "3"})
	if ran, err := run(jl, rule("c", 0), jobtype.Job{Kind: "SyncCalendar", ID: "4"}); ran || !errors.Is(err, keycap.ErrLimitExceeded) {
		t.Fatalf("c's job with the total full: ran %v, %v", ran, err)
	}
	release()
	releaseB()
	if ran, err := run(jl, rule("c", 2), jobtype.Job{Kind: "SyncCalendar", ID: "5"}); !ran || err != nil {
		t.Fatalf("a job of weight 2 with the total free: %v %v", ran, err)
	}
}

// TestShadowRuleNeverHoldsAJobBack: a shadow rule over its cap runs the job
// anyway, on the parking path too (a job that can be woken), and reports
// the refusal it would have made.
func TestShadowRuleNeverHoldsAJobBack(t *testing.T) {
	t.Parallel()
	jl, rec := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("calendar:7", keycap.Spec{Max: 1, Shadow: true})
	wakeable := jobtype.Job{Kind: "SyncCalendar", ID: "2", Wake: func(context.Context) error { return nil }}
	release := hold(t, jl, rule, job)
	defer release()
	for _, j := range []jobtype.Job{wakeable, {Kind: "SyncCalendar", ID: "3"}} {
		if ran, err := run(jl, rule, j); !ran || err != nil {
			t.Fatalf("job %s under a full shadow rule: ran %v, %v", j.ID, ran, err)
		}
	}
	if n := rec.Count(keycap.LimitExceeded, ""); n != 2 {
		t.Fatalf("%d refusals reported, want the 2 the rule would have made", n)
	}
	for _, e := range rec.Events() {
		if e.Kind == keycap.LimitExceeded && !e.Limit.Shadow() {
			t.Fatalf("a refusal of an enforced limit: %+v", e)
		}
	}
}

// TestWorkCarriesItsFence: a job of a fenced rule finds its slot's token in
// its context, a larger one than the job before it.
func TestWorkCarriesItsFence(t *testing.T) {
	t.Parallel()
	jl, _ := newLimiter(t, memstore.New())
	rule := joblimit.MustRule("ledger:1", keycap.Spec{Max: 1, Fence: true})
	var tokens []uint64
	for range 2 {
		if err := jl.Run(context.Background(), rule, job, func(ctx context.Context) error {
			f := keycap.FencesFrom(ctx)
			if len(f) != 1 {
				return fmt.Errorf("fences %+v, want one", f)
			}
			tokens = append(tokens, f[0].Token)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if tokens[1] <= tokens[0] {
		t.Fatalf("tokens %v, want growing", tokens)
	}
	plain := joblimit.MustRule("ledger:2", keycap.Spec{Max: 1})
	if err := jl.Run(context.Background(), plain, job, func(ctx context.Context) error {
		if f := keycap.FencesFrom(ctx); f != nil {
			return fmt.Errorf("an unfenced rule's job carries %+v", f)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
