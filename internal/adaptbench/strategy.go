package adaptbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keycap/keycap"
)

// ErrRefused is what an Admitter returns when it does not admit a request
// within the wait.
var ErrRefused = errors.New("adaptbench: refused")

// A Strategy is one way to admit work to the backend. Each of the worker
// processes opens it once per run; the processes of a run share Env.Store.
//
// To add one, write a file with a type that implements Strategy and register
// it in an init function:
//
//	func init() { Register(myStrategy{}) }
type Strategy interface {
	// Name is the strategy's name in flags, tables and plots.
	Name() string
	// Open returns the admission control of one worker process.
	Open(ctx context.Context, env Env) (Admitter, error)
}

// Admitter is a strategy's admission control in one process.
type Admitter interface {
	// Admit admits one request of tenant, waiting at most Env.Wait, and
	// returns a Ticket to end it with. Any error means not admitted;
	// ErrRefused (or keycap.ErrLimitExceeded, or an error that wraps
	// either) is a refusal, any other error an admission failure, counted
	// apart. ctx ends a second after the wait, as a safety net.
	Admit(ctx context.Context, tenant string) (Ticket, error)
	// Limit returns the limit in force, and whether it is one total shared
	// by every process (a keycap parent) rather than this process's own:
	// the trajectory takes the largest of the processes' shared totals and
	// the sum of their own limits. 0, false: no limit.
	Limit() (limit int, shared bool)
	// Close releases what Open took.
	Close() error
}

// Ticket ends an admitted request.
type Ticket interface {
	Done(Outcome)
}

// Outcome is how an admitted request ended.
type Outcome struct {
	// Latency is the time from arrival to the backend's answer: the
	// admission wait and the backend call.
	Latency time.Duration
	// Service is the backend call alone.
	Service time.Duration
	// Overloaded says that the backend refused the job (503) or did not
	// answer in time.
	Overloaded bool
}

// Env is what a strategy is opened with.
type Env struct {
	// Capacity is the backend's initial capacity C0, the total a fixed
	// limit would be configured with.
	Capacity int
	// Service is the backend's base service time S.
	Service time.Duration
	// Wait is how long a request may wait for admission, the same for
	// every strategy.
	Wait time.Duration
	// Process is this worker's index among Processes.
	Process, Processes int
	// Tenants is the number of tenants; Tenant(i) names them.
	Tenants int
	// RunID is unique to the run of one strategy in one round and the same
	// in every process: name keycap parents and limits after it.
	RunID string
	// Store is the keycap store every process of the run shares, under a
	// prefix unique to the invocation.
	Store keycap.Store
}

var (
	regMu    sync.Mutex
	registry = map[string]Strategy{}
)

// DefaultOrder is the order the built-in strategies run in; strategies
// registered from other files follow, by name.
var DefaultOrder = []string{"none", "keycap-fixed-C", "keycap-fixed-2C", "failsafe-adaptive", "gradient2", "keycap-adaptive"}

// Register adds a strategy. It panics on a duplicate name.
func Register(s Strategy) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[s.Name()]; dup {
		panic("adaptbench: strategy registered twice: " + s.Name())
	}
	registry[s.Name()] = s
}

// Lookup returns the strategy registered under name.
func Lookup(name string) (Strategy, error) {
	regMu.Lock()
	defer regMu.Unlock()
	s, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("adaptbench: no strategy %q (have %v)", name, namesLocked())
	}
	return s, nil
}

// Names returns every registered strategy's name: DefaultOrder first, then
// the others by name.
func Names() []string {
	regMu.Lock()
	defer regMu.Unlock()
	return namesLocked()
}

func namesLocked() []string {
	var names, extra []string
	for _, n := range DefaultOrder {
		if _, ok := registry[n]; ok {
			names = append(names, n)
		}
	}
	for n := range registry {
		if !slices.Contains(DefaultOrder, n) {
			extra = append(extra, n)
		}
	}
	slices.Sort(extra)
	return append(names, extra...)
}

// refusal reports whether err is a refusal rather than an admission failure.
func refusal(err error) bool {
	return errors.Is(err, ErrRefused) || errors.Is(err, keycap.ErrLimitExceeded)
}

// none admits everything.
type none struct{}

func init() { Register(none{}) }

func (none) Name() string                                  { return "none" }
func (none) Open(context.Context, Env) (Admitter, error)   { return none{}, nil }
func (none) Admit(context.Context, string) (Ticket, error) { return noTicket{}, nil }
func (none) Limit() (int, bool)                            { return 0, false }
func (none) Close() error                                  { return nil }

type noTicket struct{}

func (noTicket) Done(Outcome) {}
