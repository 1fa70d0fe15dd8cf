package riverlimit_test

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/riverlimit"
)

// ExportArgs exports one customer's data: slow, and heavy on a shared
// backend.
type ExportArgs struct {
	Customer string `json:"customer"`
}

func (ExportArgs) Kind() string { return "export" }

type ExportWorker struct {
	river.WorkerDefaults[ExportArgs]
}

func (w *ExportWorker) Work(ctx context.Context, job *river.Job[ExportArgs]) error {
	return nil // ... the export ...
}

// At most 2 exports at once per customer, across every River process: a
// job that finds no free slot is snoozed, and its attempt is not spent.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@10.0.0.7:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// The slots live in Redis, so that the cap holds across servers
	// (pgstore.New(pool) keeps them in the same database instead).
	rdb := redis.NewClient(&redis.Options{Addr: "10.0.0.5:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.WithPrefix("myapp:"))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	jobs, err := joblimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &ExportWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers:    workers,
		JobTimeout: 10 * time.Minute,
		Middleware: []rivertype.Middleware{
			riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
				var args ExportArgs
				if job.Kind != "export" || json.Unmarshal(job.EncodedArgs, &args) != nil {
					return joblimit.Rule{}, false // not limited
				}
				return joblimit.MustRule("customer:"+args.Customer, keycap.Spec{Max: 2}), true
			}, riverlimit.WithJobTimeout(10*time.Minute)), // the slot TTL follows the job timeout
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
}

// CalendarArgs syncs one calendar with Outlook.
type CalendarArgs struct {
	Mailbox string `json:"mailbox"`
}

func (CalendarArgs) Kind() string { return "sync_calendar" }

// CalendarWorker caps itself through River's per-worker middleware.
type CalendarWorker struct {
	river.WorkerDefaults[CalendarArgs]
	outlook rivertype.WorkerMiddleware
}

func (w *CalendarWorker) Middleware(*rivertype.JobRow) []rivertype.WorkerMiddleware {
	return []rivertype.WorkerMiddleware{w.outlook}
}

func (w *CalendarWorker) Work(ctx context.Context, job *river.Job[CalendarArgs]) error {
	return nil // ... call Outlook ...
}

// The worker's own limit, for one rule that applies to all of its jobs:
// Outlook allows this application 4 syncs at once, whatever the mailbox.
func ExampleLimit() {
	var jobs *joblimit.Limiter // joblimit.New(limiter), as in Example
	var pool *pgxpool.Pool     // as in Example

	workers := river.NewWorkers()
	river.AddWorker(workers, &CalendarWorker{
		outlook: riverlimit.Limit(jobs, joblimit.MustRule("outlook", keycap.Spec{Max: 4},
			joblimit.WithReleaseAfter(30*time.Second))), // a refused job returns in 30 to 45 s (jitter)
	})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers: workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// ContactsArgs syncs one account's contacts from a vendor's API.
type ContactsArgs struct {
	Account string `json:"account"`
}

func (ContactsArgs) Kind() string { return "sync_contacts" }

type ContactsWorker struct {
	river.WorkerDefaults[ContactsArgs]
	client *http.Client // its transport is pauses.Transport
	pauses *pause.Pauses
}

func (w *ContactsWorker) Work(ctx context.Context, job *river.Job[ContactsArgs]) error {
	u := "https://api.vendor.com/contacts?account=" + url.QueryEscape(job.Args.Account)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return err // a *pause.PausedError while the API is paused: snoozed, no attempt spent
	}
	defer resp.Body.Close()
	if err := w.pauses.Check(resp); err != nil {
		return err // a 429: the API is paused for every worker, and the job snoozed
	}
	// ... read the contacts ...
	return nil
}

// One 429 from a vendor keeps every worker of every server away from its
// API until the Retry-After has passed; the jobs held back spend no attempt.
func ExampleRespectPauses() {
	var limiter *keycap.Limiter // on redisstore, as in Example
	var jobs *joblimit.Limiter  // joblimit.New(limiter)
	var pool *pgxpool.Pool      // as in Example

	pauses, err := pause.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &ContactsWorker{
		client: &http.Client{Transport: pauses.Transport(nil)},
		pauses: pauses,
	})
	vendor := func(job *rivertype.JobRow) (string, bool) { return "api.vendor.com", job.Kind == "sync_contacts" }
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers: workers,
		Middleware: []rivertype.Middleware{
			// Pauses first, so that a job arriving during a pause is snoozed
			// before it takes a slot.
			riverlimit.RespectPauses(pauses, vendor),
			riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
				return joblimit.MustRule("vendor", keycap.Spec{Max: 8}), job.Kind == "sync_contacts" // 8 calls at once in all
			}),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// Stay under a vendor's published rate before it ever answers 429: jobs
// over the rate are snoozed until they are within it, without spending an
// attempt.
func ExamplePaceJobs() {
	var limiter *keycap.Limiter // on redisstore, as in Example
	var pool *pgxpool.Pool      // as in Example

	// 100 jobs a minute, in bursts of at most 10, shared by every worker.
	pauses, err := pause.New(limiter, pause.WithRate(func(api string) (pause.Rate, bool) {
		return pause.Rate{Events: 100, Period: time.Minute, Burst: 10}, api == "api.vendor.com"
	}))
	if err != nil {
		log.Fatal(err)
	}
	var workers *river.Workers // with a worker for "sync_contacts"
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers: workers,
		Middleware: []rivertype.Middleware{
			// The rate counts jobs: a job's calls must not also go through
			// pauses.Transport, whose pacing counts requests.
			riverlimit.PaceJobs(pauses, func(job *rivertype.JobRow) (string, bool) {
				return "api.vendor.com", job.Kind == "sync_contacts"
			}),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// A total shared fairly by customers: at most 40 exports at once in all,
// at most 10 per customer; while customers wait, each freed slot goes to
// the one furthest below its fair share, so a customer who enqueues
// thousands of exports cannot starve one who enqueues two. Customers on the
// enterprise plan count double, and a full export costs 3 slots.
func ExampleMiddleware_parent() {
	var jobs *joblimit.Limiter // joblimit.New(limiter), as in Example
	var pool *pgxpool.Pool     // as in Example
	exports := keycap.MustParent("exports", 40)

	type args struct {
		Customer   string `json:"customer"`
		Enterprise bool   `json:"enterprise"`
		Full       bool   `json:"full"`
	}
	middleware := riverlimit.Middleware(jobs, func(job *rivertype.JobRow) (joblimit.Rule, bool) {
		var a args
		if job.Kind != "export" || json.Unmarshal(job.EncodedArgs, &a) != nil {
			return joblimit.Rule{}, false
		}
		spec := keycap.Spec{Max: 10, Parent: exports}
		if a.Enterprise {
			spec.Share = 2
		}
		if a.Full {
			spec.Weight = 3
		}
		return joblimit.MustRule("customer:"+a.Customer, spec), true
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, &ExportWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:     map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 50}},
		Workers:    workers,
		Middleware: []rivertype.Middleware{middleware},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
}
