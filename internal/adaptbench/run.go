package adaptbench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config is one invocation: the workload, the strategies and the store.
type Config struct {
	Capacity   int           // C0, the backend's initial capacity
	Service    time.Duration // S, the base service time
	Jitter     float64       // service times are uniform in S×(1±Jitter)
	SLO        time.Duration // a request is good if it completes within it
	Wait       time.Duration // how long a request may wait for admission
	Timeout    time.Duration // of a backend call; past it the call is an error
	Processes  int
	Tenants    int
	Flood      float64 // tenant 0's share of the arrivals
	Phases     []Phase
	Strategies []string // in order; round r starts at the r-th
	Rounds     int
	Store      string // "redis"
	RedisAddr  string
	Seed       int64
	// Executable is the binary to start the workers from; it must call
	// MaybeRunWorker first. "": this process's own.
	Executable string
	// Progress and Stderr receive a line per run and the workers' stderr;
	// nil discards them.
	Progress, Stderr io.Writer
}

// DefaultConfig is the workload of doc.go, at scale (1: 8 s phases).
func DefaultConfig(scale float64) Config {
	const c0, s = 20, 40 * time.Millisecond
	return Config{
		Capacity:   c0,
		Service:    s,
		Jitter:     0.25,
		SLO:        s * 5 / 2,
		Wait:       s,
		Timeout:    time.Second,
		Processes:  3,
		Tenants:    20,
		Flood:      0.5,
		Phases:     Schedule(c0, scale),
		Strategies: Names(),
		Rounds:     1,
		Store:      "redis",
		RedisAddr:  "127.0.0.1:6379",
		Seed:       1,
	}
}

// limitSampleInterval is how often workers report their limit.
const limitSampleInterval = 100 * time.Millisecond

// Run runs every strategy on the schedule, Rounds times, and returns the
// report. Round r rotates the order by r and seeds the arrivals with Seed+r:
// the strategies of a round see the same arrivals.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Tenants < 2 || cfg.Processes < 1 || cfg.Capacity < 1 || len(cfg.Phases) == 0 || cfg.Rounds < 1 {
		return nil, errors.New("adaptbench: need at least 2 tenants, a process, a capacity, a phase and a round")
	}
	for _, n := range cfg.Strategies {
		if _, err := Lookup(n); err != nil {
			return nil, err
		}
	}
	if cfg.Store != "redis" && cfg.Store != "" {
		return nil, fmt.Errorf("adaptbench: store %q: only redis is shared by processes", cfg.Store)
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Executable = exe
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}

	b := NewBackend(cfg.Capacity, cfg.Service, cfg.Jitter, uint64(cfg.Seed))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	id := make([]byte, 6)
	_, _ = rand.Read(id)
	runID := hex.EncodeToString(id)
	prefix := "adaptbench:" + runID + ":"
	if cfg.Store == "redis" {
		defer deletePrefix(cfg.RedisAddr, prefix)
	}

	runs := map[string][]*runData{}
	for r := range cfg.Rounds {
		for i := range cfg.Strategies {
			name := cfg.Strategies[(i+r)%len(cfg.Strategies)]
			t0 := time.Now()
			rd, err := runOne(ctx, &cfg, b, "http://"+ln.Addr().String()+"/job",
				fmt.Sprintf("%s-%s-r%d", runID, name, r), prefix, name, cfg.Seed+int64(r))
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", name, r+1, err)
			}
			runs[name] = append(runs[name], rd)
			fmt.Fprintf(cfg.Progress, "round %d: %-18s %5.1fs\n", r+1, name, time.Since(t0).Seconds())
		}
	}
	rep := &Report{Config: cfg}
	for _, n := range cfg.Strategies {
		rep.Results = append(rep.Results, Analyze(&cfg, n, runs[n]))
	}
	return rep, nil
}

// runData is what one run of one strategy produced.
type runData struct {
	recs     []Record
	lims     [][]LimitSample // per process
	phaseMax []int           // the most jobs in service at once, per phase
}

// runOne runs one strategy once: it starts the workers, waits until they are
// ready, starts them together, moves the backend's capacity at each phase,
// and collects what the workers report.
func runOne(ctx context.Context, cfg *Config, b *Backend, url, runID, prefix, name string, seed int64) (*runData, error) {
	if err := waitIdle(ctx, b); err != nil {
		return nil, err
	}
	b.SetCapacity(cfg.Phases[0].Capacity)
	total := Total(cfg.Phases)
	ctx, cancel := context.WithTimeout(ctx, total+90*time.Second)
	defer cancel() // kills the workers that are left

	rd := &runData{lims: make([][]LimitSample, cfg.Processes)}
	var mu sync.Mutex
	ready := make(chan bool, cfg.Processes) // true: ready; false: gone before
	done := make([]bool, cfg.Processes)
	var readers sync.WaitGroup
	cmds := make([]*exec.Cmd, cfg.Processes)
	stdins := make([]io.WriteCloser, cfg.Processes)
	wait := func() error { // readers end with the workers' stdout; then reap them
		readers.Wait()
		var errs []error
		for p, cmd := range cmds {
			if cmd != nil {
				if err := cmd.Wait(); err != nil {
					errs = append(errs, fmt.Errorf("worker %d: %w", p, err))
				}
			}
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (*runData, error) { // kills and reaps the workers started
		cancel()
		return nil, errors.Join(err, wait())
	}
	for p := range cfg.Processes {
		wc := WorkerConfig{
			Strategy: name, Process: p, Processes: cfg.Processes, RunID: runID,
			Backend: url, Capacity: cfg.Capacity, Service: cfg.Service, Wait: cfg.Wait,
			Timeout: cfg.Timeout, Tenants: cfg.Tenants, Flood: cfg.Flood, Phases: cfg.Phases,
			Seed: seed, Store: cfg.Store, RedisAddr: cfg.RedisAddr, Prefix: prefix,
			LimitSampleInterval: limitSampleInterval,
		}
		js, err := json.Marshal(wc)
		if err != nil {
			return fail(err)
		}
		cmd := exec.CommandContext(ctx, cfg.Executable)
		cmd.Env = append(os.Environ(), workerEnv+"="+string(js))
		cmd.Stderr = cfg.Stderr
		cmd.WaitDelay = 5 * time.Second
		if stdins[p], err = cmd.StdinPipe(); err != nil {
			return fail(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return fail(err)
		}
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		cmds[p] = cmd
		readers.Go(func() {
			said := false
			defer func() {
				if !said {
					ready <- false
				}
			}()
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var m message
				if json.Unmarshal(sc.Bytes(), &m) != nil {
					continue
				}
				mu.Lock()
				switch {
				case m.Ready:
					said = true
					ready <- true
				case m.Rec != nil:
					rd.recs = append(rd.recs, *m.Rec)
				case m.Lim != nil:
					rd.lims[p] = append(rd.lims[p], *m.Lim)
				case m.Done:
					done[p] = true
				}
				mu.Unlock()
			}
		})
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for range cfg.Processes {
		select {
		case ok := <-ready:
			if !ok {
				return fail(errors.New("a worker ended before it was ready"))
			}
		case <-timeout.C:
			return fail(errors.New("workers not ready within a minute"))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}

	start := time.Now().Add(200 * time.Millisecond)
	line, _ := json.Marshal(startMessage{Start: start.UnixNano()})
	for _, in := range stdins {
		_, _ = in.Write(append(line, '\n'))
	}
	rd.phaseMax = drivePhases(ctx, b, cfg.Phases, start)

	err := wait()
	mu.Lock()
	defer mu.Unlock()
	for p, d := range done {
		if !d {
			err = errors.Join(err, fmt.Errorf("worker %d did not finish", p))
		}
	}
	return rd, err
}

// drivePhases sets the backend's capacity at each phase's start and returns
// the most jobs in service during each phase.
func drivePhases(ctx context.Context, b *Backend, phases []Phase, start time.Time) []int {
	peaks := make([]int, len(phases))
	at := start
	sleepUntil(ctx, at)
	b.ResetMax()
	for i, p := range phases {
		b.SetCapacity(p.Capacity)
		at = at.Add(p.Duration)
		sleepUntil(ctx, at)
		peaks[i] = b.ResetMax()
	}
	return peaks
}

func sleepUntil(ctx context.Context, t time.Time) {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// waitIdle waits until the backend has no job left from the run before.
func waitIdle(ctx context.Context, b *Backend) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for b.InFlight() > 0 {
		select {
		case <-ctx.Done():
			return errors.New("backend not idle")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// deletePrefix deletes the keys the run left in Redis.
func deletePrefix(addr, prefix string) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}
