package asynqlimit_test

import (
	"context"
	"encoding/json"
	"log"
	"net/http"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/asynqlimit"
	"github.com/keycap/keycap/joblimit"
	"github.com/keycap/keycap/pause"
	"github.com/keycap/keycap/redisstore"
)

// At most 2 reports at once per tenant, across every asynq server: a task
// that finds no free slot is retried later without counting as a failure,
// and its Retried count does not move.
func Example() {
	// The slots live in Redis (the queue's, or another), so that every
	// server shares them.
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

	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "10.0.0.5:6379"}, asynq.Config{
		Concurrency: 20,
		// Both make a released task a non-failure, retried after the rule's
		// delay; every other error keeps asynq's own handling.
		IsFailure:      asynqlimit.IsFailure(nil),
		RetryDelayFunc: asynqlimit.RetryDelay(asynq.DefaultRetryDelayFunc),
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(ctx context.Context, t *asynq.Task) (joblimit.Rule, bool) {
		var p struct{ Tenant string }
		if t.Type() != "report" || json.Unmarshal(t.Payload(), &p) != nil {
			return joblimit.Rule{}, false // not limited
		}
		return joblimit.MustRule("tenant:"+p.Tenant, keycap.Spec{Max: 2}), true
	}))
	mux.HandleFunc("report", func(ctx context.Context, t *asynq.Task) error {
		return nil // ... build the report: the slot is held, and renewed, until it returns ...
	})
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// One 429 from a vendor keeps every task on every server away from its API
// until the Retry-After has passed; the tasks held back spend no retry.
func ExampleRespectPauses() {
	var limiter *keycap.Limiter // on redisstore, as in Example
	var jobs *joblimit.Limiter  // joblimit.New(limiter)

	pauses, err := pause.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	// Calls go through pauses.Transport: a call to a paused API is not sent.
	client := &http.Client{Transport: pauses.Transport(nil)}

	vendor := func(ctx context.Context, t *asynq.Task) (string, bool) {
		return "api.vendor.com", t.Type() == "contacts:sync"
	}
	mux := asynq.NewServeMux()
	mux.Use(
		asynqlimit.RespectPauses(pauses, vendor), // first: a task arriving during a pause takes no slot
		asynqlimit.Middleware(jobs, func(ctx context.Context, t *asynq.Task) (joblimit.Rule, bool) {
			return joblimit.MustRule("vendor", keycap.Spec{Max: 8}), t.Type() == "contacts:sync" // 8 calls at once in all
		}),
	)
	mux.HandleFunc("contacts:sync", func(ctx context.Context, t *asynq.Task) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.vendor.com/contacts", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err // a *pause.PausedError while the API is paused: released, no retry spent
		}
		defer resp.Body.Close()
		return pauses.Check(resp) // a 429: the API is paused for every server, and the task released
	})
	// ... run mux on a server configured as in Example (IsFailure, RetryDelayFunc) ...
}

// A total shared fairly by tenants: at most 20 reports at once on every
// server together, at most 5 per tenant, and while tenants wait, freed
// slots go to them by their fair share, not to whoever enqueued most.
func ExampleMiddleware_parent() {
	var jobs *joblimit.Limiter // joblimit.New(limiter), as in Example
	reports := keycap.MustParent("reports", 20)

	mux := asynq.NewServeMux()
	mux.Use(asynqlimit.Middleware(jobs, func(ctx context.Context, t *asynq.Task) (joblimit.Rule, bool) {
		var p struct {
			Tenant string
			Heavy  bool
		}
		if t.Type() != "report" || json.Unmarshal(t.Payload(), &p) != nil {
			return joblimit.Rule{}, false
		}
		spec := keycap.Spec{Max: 5, Parent: reports}
		if p.Heavy {
			spec.Weight = 2 // a heavy report takes two slots
		}
		return joblimit.MustRule("tenant:"+p.Tenant, spec), true
	}))
	_ = mux
}
