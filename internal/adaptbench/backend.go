package adaptbench

import (
	"container/heap"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// ErrOverloaded is the backend's answer when it holds OverloadFactor×C jobs
// already: it refuses at once, like a 503.
var ErrOverloaded = errors.New("adaptbench: backend overloaded")

// OverloadFactor is how many times its capacity the backend holds in service
// before it refuses new jobs.
const OverloadFactor = 3

// Backend is a processor-sharing server of true capacity C: with n jobs in
// service each progresses at rate min(1, C/n), so a job of base service time
// S takes S while n ≤ C and stretches as n grows past C. Above
// OverloadFactor×C jobs it refuses new ones at once (ErrOverloaded).
//
// Sharing is computed exactly, in virtual time: V advances at min(1, C/n)
// seconds per second, a job that arrives at V with work w leaves when V
// reaches V+w, and one timer is set for the next departure whenever n or C
// changes.
type Backend struct {
	mu       sync.Mutex
	capacity int
	service  time.Duration
	jitter   float64
	rng      *rand.Rand
	v        float64   // virtual time, in seconds of service
	last     time.Time // real time v was last advanced to
	jobs     jobHeap
	timer    *time.Timer
	max      int // most jobs in service at once since ResetMax
	served   int64
	refused  int64
}

type job struct {
	finish float64 // virtual time it leaves
	done   chan struct{}
}

type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].finish < h[j].finish }
func (h jobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)        { *h = append(*h, x.(*job)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return j
}

// NewBackend returns a backend of capacity c whose jobs take a base service
// time drawn uniformly from service×(1±jitter), with a generator seeded by
// seed.
func NewBackend(c int, service time.Duration, jitter float64, seed uint64) *Backend {
	b := &Backend{
		capacity: max(c, 1),
		service:  service,
		jitter:   jitter,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		last:     time.Now(),
	}
	b.timer = time.AfterFunc(time.Hour, b.depart)
	b.timer.Stop()
	return b
}

// Capacity returns C.
func (b *Backend) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity
}

// SetCapacity changes C; the jobs in service speed up or slow down at once.
func (b *Backend) SetCapacity(c int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	b.capacity = max(c, 1)
	b.schedule()
}

// InFlight returns how many jobs are in service.
func (b *Backend) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.jobs)
}

// ResetMax returns the most jobs in service at once since the last call, and
// starts counting again from the jobs in service now.
func (b *Backend) ResetMax() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.max
	b.max = len(b.jobs)
	return m
}

// Counts returns how many jobs were served and refused since the start.
func (b *Backend) Counts() (served, refused int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.served, b.refused
}

// Do runs one job: it returns when the job leaves, ErrOverloaded at once if
// the backend is full, or ctx's error if ctx ends first (the job then stays
// in service, as on a server that does not notice the client left).
func (b *Backend) Do(ctx context.Context) error {
	done, err := b.arrive(b.work())
	if err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// work draws a job's base service time.
func (b *Backend) work() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := 1 + b.jitter*(2*b.rng.Float64()-1)
	return time.Duration(float64(b.service) * f)
}

func (b *Backend) arrive(w time.Duration) (<-chan struct{}, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.jobs) >= OverloadFactor*b.capacity {
		b.refused++
		return nil, ErrOverloaded
	}
	b.advance(time.Now())
	j := &job{finish: b.v + w.Seconds(), done: make(chan struct{})}
	heap.Push(&b.jobs, j)
	b.max = max(b.max, len(b.jobs))
	b.schedule()
	return j.done, nil
}

// rate is how fast each job progresses with n in service.
func (b *Backend) rate(n int) float64 {
	if n <= b.capacity {
		return 1
	}
	return float64(b.capacity) / float64(n)
}

// advance moves virtual time to now. b.mu is held.
func (b *Backend) advance(now time.Time) {
	if n := len(b.jobs); n > 0 {
		b.v += now.Sub(b.last).Seconds() * b.rate(n)
	}
	b.last = now
}

// schedule sets the timer for the next departure. b.mu is held.
func (b *Backend) schedule() {
	if len(b.jobs) == 0 {
		b.timer.Stop()
		return
	}
	left := (b.jobs[0].finish - b.v) / b.rate(len(b.jobs))
	b.timer.Reset(time.Duration(math.Max(left, 0) * float64(time.Second)))
}

// depart lets every job whose work is done leave. It may run more often than
// needed (a Reset racing a firing timer): it then finds nothing to do.
func (b *Backend) depart() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	const eps = 1e-6 // a microsecond of service: float rounding
	for len(b.jobs) > 0 && b.jobs[0].finish <= b.v+eps {
		j := heap.Pop(&b.jobs).(*job)
		close(j.done)
		b.served++
	}
	b.schedule()
}

// ServeHTTP runs one job per request: 200 when it is done, 503 when the
// backend is overloaded.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch err := b.Do(r.Context()); {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, ErrOverloaded):
		w.WriteHeader(http.StatusServiceUnavailable)
	default: // the client left
		w.WriteHeader(http.StatusGatewayTimeout)
	}
}
