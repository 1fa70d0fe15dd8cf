package keycap

import (
	"sync"
	"sync/atomic"
	"time"
)

// defaultRecoverAfter is how long a partition of the store must answer
// without a single failure before its outage is over, unless
// WithRecoverAfter says otherwise: a node that fails on and off (a failover,
// a flapping link) is one outage, reported once.
const defaultRecoverAfter = time.Second

// outages tracks the store's outages, one per partition, and decides which
// failures and successes to report: the first failure of an outage, and the
// first success after a quiet time with no failure.
type outages struct {
	open  atomic.Int32 // partitions in an outage; 0 makes answered free
	quiet time.Duration

	mu    sync.Mutex
	parts map[string]*outage
}

type outage struct {
	since, lastFailure time.Duration
	failures           int64
}

// failed records a failure in partition part at now. It returns true for
// the failure that starts an outage.
func (o *outages) failed(part string, now time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.parts == nil {
		o.parts = map[string]*outage{}
	}
	if p := o.parts[part]; p != nil {
		p.lastFailure = now
		p.failures++
		return false
	}
	o.parts[part] = &outage{since: now, lastFailure: now, failures: 1}
	o.open.Add(1)
	return true
}

// answered records a success in partition part at now. It returns the
// outage it ends, if the partition had one whose last failure is at least
// quiet old.
func (o *outages) answered(part string, now time.Duration) (outage, bool) {
	if o.open.Load() == 0 {
		return outage{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	p := o.parts[part]
	if p == nil || now-p.lastFailure < o.quiet {
		return outage{}, false
	}
	delete(o.parts, part)
	o.open.Add(-1)
	return *p, true
}

// any reports whether some partition is in an outage.
func (o *outages) any() bool { return o.open.Load() > 0 }
