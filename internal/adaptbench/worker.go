package adaptbench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/redisstore"
)

// workerEnv carries a worker's configuration, as JSON, to a re-executed
// binary: MaybeRunWorker runs the worker when it is set.
const workerEnv = "ADAPTBENCH_WORKER"

// WorkerConfig is what one worker process runs.
type WorkerConfig struct {
	Strategy            string
	Process, Processes  int
	RunID               string
	Backend             string // the backend's URL
	Capacity            int    // C0
	Service, Wait       time.Duration
	Timeout             time.Duration // of a backend call
	Tenants             int
	Flood               float64 // tenant 0's share of the arrivals
	Phases              []Phase
	Seed                int64
	Store               string // "redis" or "" (no store)
	RedisAddr, Prefix   string
	LimitSampleInterval time.Duration
}

// Kinds of records.
const (
	kindOK      = iota // admitted, and the backend answered 200
	kindError          // admitted, and the backend answered 503 or not in time
	kindRefused        // not admitted within the wait
	kindFailed         // the admission failed (a store error)
)

// Record is one request, as a worker reports it.
type Record struct {
	At      int64 `json:"t"` // arrival, µs from the start
	Tenant  int   `json:"k"`
	Kind    int   `json:"o"`
	Latency int64 `json:"l"` // µs from arrival to the answer (or the refusal)
}

// LimitSample is a worker's limit at sample Index (every
// LimitSampleInterval from the start).
type LimitSample struct {
	Index  int  `json:"i"`
	Limit  int  `json:"n"`
	Shared bool `json:"s,omitempty"`
}

// message is one line a worker writes to stdout.
type message struct {
	Ready bool         `json:"ready,omitempty"`
	Rec   *Record      `json:"r,omitempty"`
	Lim   *LimitSample `json:"lim,omitempty"`
	Done  bool         `json:"done,omitempty"`
}

// startMessage is the line the coordinator writes to a worker's stdin.
type startMessage struct {
	Start int64 `json:"start"` // Unix nanoseconds
}

// MaybeRunWorker runs a worker and exits when the process was started as
// one (by Run); otherwise it returns at once. Call it first in main, and in
// TestMain of a test that calls Run.
func MaybeRunWorker() {
	s := os.Getenv(workerEnv)
	if s == "" {
		return
	}
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(s), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "adaptbench worker:", err)
		os.Exit(2)
	}
	if err := RunWorker(context.Background(), &cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "adaptbench worker %d (%s): %v\n", cfg.Process, cfg.Strategy, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// RunWorker opens the strategy, says it is ready, waits for the start time
// on in, sends its share of the load through the strategy to the backend,
// and writes what happened to out. It stops early when in closes (the
// coordinator is gone).
func RunWorker(ctx context.Context, cfg *WorkerConfig, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := Lookup(cfg.Strategy)
	if err != nil {
		return err
	}
	env := Env{
		Capacity: cfg.Capacity, Service: cfg.Service, Wait: cfg.Wait,
		Process: cfg.Process, Processes: cfg.Processes,
		Tenants: cfg.Tenants, RunID: cfg.RunID,
	}
	if cfg.Store == "redis" {
		c := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, ContextTimeoutEnabled: true, PoolSize: 128})
		defer func() { _ = c.Close() }()
		if env.Store, err = redisstore.New(c, redisstore.WithPrefix(cfg.Prefix)); err != nil {
			return err
		}
	}
	adm, err := s.Open(ctx, env)
	if err != nil {
		return err
	}
	defer func() { _ = adm.Close() }()

	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	if err := emit(w, enc, message{Ready: true}); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return errors.New("no start time")
	}
	var sm startMessage
	if err := json.Unmarshal(sc.Bytes(), &sm); err != nil {
		return err
	}
	go func() { // the coordinator closes stdin when it is gone
		for sc.Scan() {
		}
		cancel()
	}()
	// The start as a monotonic time: processes agree on the wall clock.
	base := time.Now().Add(time.Until(time.Unix(0, sm.Start)))

	wk := &worker{cfg: cfg, adm: adm, base: base, client: newClient()}
	var wg sync.WaitGroup
	wg.Go(func() { wk.sampleLimits(ctx) })
	arrivals(ctx, cfg, base, func(at time.Time, tenant int) {
		wg.Go(func() { wk.request(ctx, at, tenant) })
	})
	wg.Wait()

	wk.mu.Lock()
	defer wk.mu.Unlock()
	for i := range wk.recs {
		if err := enc.Encode(message{Rec: &wk.recs[i]}); err != nil {
			return err
		}
	}
	for i := range wk.lims {
		if err := enc.Encode(message{Lim: &wk.lims[i]}); err != nil {
			return err
		}
	}
	if wk.failure != nil {
		fmt.Fprintf(os.Stderr, "adaptbench worker %d (%s): %d admission failures, the first: %v\n",
			cfg.Process, cfg.Strategy, wk.failures, wk.failure)
	}
	return emit(w, enc, message{Done: true})
}

func emit(w *bufio.Writer, enc *json.Encoder, m message) error {
	if err := enc.Encode(m); err != nil {
		return err
	}
	return w.Flush()
}

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

type worker struct {
	cfg    *WorkerConfig
	adm    Admitter
	base   time.Time
	client *http.Client

	mu       sync.Mutex
	recs     []Record
	lims     []LimitSample
	failures int
	failure  error
}

// request admits one arrival, calls the backend and records the outcome.
func (w *worker) request(ctx context.Context, at time.Time, tenant int) {
	rec := Record{At: at.Sub(w.base).Microseconds(), Tenant: tenant}
	actx, cancel := context.WithTimeout(ctx, w.cfg.Wait+time.Second)
	tk, err := w.adm.Admit(actx, Tenant(tenant))
	cancel()
	if err != nil {
		rec.Kind, rec.Latency = kindRefused, time.Since(at).Microseconds()
		w.mu.Lock()
		defer w.mu.Unlock()
		if !refusal(err) {
			rec.Kind = kindFailed
			if w.failures++; w.failure == nil {
				w.failure = err
			}
		}
		w.recs = append(w.recs, rec)
		return
	}
	start := time.Now()
	ok := w.call(ctx)
	o := Outcome{Latency: time.Since(at), Service: time.Since(start), Overloaded: !ok}
	tk.Done(o)
	rec.Latency = o.Latency.Microseconds()
	if !ok {
		rec.Kind = kindError
	}
	w.mu.Lock()
	w.recs = append(w.recs, rec)
	w.mu.Unlock()
}

// call runs one job on the backend and reports whether it succeeded.
func (w *worker) call(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.cfg.Backend, nil)
	if err != nil {
		return false
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// sampleLimits records the strategy's limit every LimitSampleInterval.
func (w *worker) sampleLimits(ctx context.Context) {
	end := Total(w.cfg.Phases)
	every := w.cfg.LimitSampleInterval
	for i := 0; time.Duration(i)*every < end; i++ {
		t := time.NewTimer(time.Until(w.base.Add(time.Duration(i) * every)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n, shared := w.adm.Limit()
		w.mu.Lock()
		w.lims = append(w.lims, LimitSample{Index: i, Limit: n, Shared: shared})
		w.mu.Unlock()
	}
}
