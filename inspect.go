package keycap

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// InspectOptions says what a Limiter remembers for its inspection
// (WithInspection).
type InspectOptions struct {
	// ShowKeys shows the keys of the pools this Limiter has leases in, in
	// clear, in its reports. Keys may be personal data (a user ID, an
	// e-mail, an IP address): by default a report shows only pools' IDs.
	ShowKeys bool
	// Refusals is how many recent refusals the Limiter remembers; default
	// 256.
	Refusals int
}

// WithInspection makes the Limiter remember, for its reports (Inspect), the
// labels its callers attach (WithLabel), its recent refusals and, if asked,
// the keys in clear. It costs nothing on the acquire path but a context
// lookup for the label, and a lock on a refusal.
func WithInspection(o InspectOptions) Option {
	return Option{func(l *Limiter) {
		n := o.Refusals
		if n <= 0 {
			n = 256
		}
		l.inspect = &ledger{keys: o.ShowKeys, ring: make([]Refusal, n), rates: map[rateKey]*rateWindow{}}
	}}
}

type labelKey struct{}

// WithLabel returns a copy of ctx whose leases carry label (a request or job
// ID, say) in the reports of a Limiter built WithInspection.
func WithLabel(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, labelKey{}, label)
}

// ledger is what a Limiter remembers for its reports.
type ledger struct {
	keys bool

	mu    sync.Mutex
	ring  []Refusal
	next  int   // where the next refusal goes in ring
	total int64 // refusals ever seen
	rates map[rateKey]*rateWindow
}

// refusalWindow is how far back a report's refusal rate looks.
const refusalWindow = 10 * time.Second

// maxRates bounds the limits whose refusal rates a ledger keeps: limit names
// come from code and configuration, but a ledger must not grow without end.
const maxRates = 10000

type rateKey struct {
	family Family
	shadow bool
	name   string
}

// rateWindow counts refusals in one-second buckets over refusalWindow.
type rateWindow struct {
	sec   [10]int64 // the Unix second each bucket counts
	count [10]int64
}

func (w *rateWindow) add(now int64) {
	i := now % int64(len(w.sec))
	if w.sec[i] != now {
		w.sec[i], w.count[i] = now, 0
	}
	w.count[i]++
}

// perSecond returns the refusals per second over the window before now.
func (w *rateWindow) perSecond(now int64) float64 {
	var n int64
	for i := range w.sec {
		if now-w.sec[i] < int64(len(w.sec)) {
			n += w.count[i]
		}
	}
	return float64(n) / float64(len(w.sec))
}

// Refusal is one refusal a Limiter made.
type Refusal struct {
	At     time.Time
	Limit  string // the limit's name
	Family Family
	Shadow bool
	Pool   store.PoolID
	Key    string // in clear only with InspectOptions.ShowKeys
	Waited time.Duration
}

func (g *ledger) refused(lim *Limit, waited time.Duration) {
	r := Refusal{At: time.Now(), Limit: lim.spec.Name, Family: lim.spec.Family, Shadow: lim.spec.Shadow, Pool: lim.pool, Waited: waited}
	if g.keys {
		r.Key = lim.key
	}
	k := rateKey{lim.spec.Family, lim.spec.Shadow, lim.spec.Name}
	g.mu.Lock()
	g.ring[g.next] = r
	g.next = (g.next + 1) % len(g.ring)
	g.total++
	w := g.rates[k]
	if w == nil && len(g.rates) < maxRates {
		w = &rateWindow{}
		g.rates[k] = w
	}
	if w != nil {
		w.add(r.At.Unix())
	}
	g.mu.Unlock()
}

// rate returns the refusals per second of (f, name) over refusalWindow.
func (g *ledger) rate(f Family, name string, shadow bool) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.rates[rateKey{f, shadow, name}]; w != nil {
		return w.perSecond(time.Now().Unix())
	}
	return 0
}

// recent returns the remembered refusals of (f, name), newest first, and
// the number of all refusals ever seen.
func (g *ledger) recent(f Family, name string, shadow bool) ([]Refusal, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Refusal
	for i := range len(g.ring) {
		r := g.ring[(g.next-1-i+2*len(g.ring))%len(g.ring)]
		if r.At.IsZero() {
			break
		}
		if r.Limit == name && r.Family == f && r.Shadow == shadow {
			out = append(out, r)
		}
	}
	return out, g.total
}

// Inspection asks Limiter.Inspect for one page of a limit's pools.
type Inspection struct {
	Family Family
	Name   string
	Shadow bool   // the pools of the shadow limit of that name (Spec.Shadow)
	Cursor string // "" for the first page, then the previous report's Next
	Limit  int    // pools per page; 0: DefaultPage
}

// Report is one page of a limit's pools, as a Limiter sees them.
type Report struct {
	Pools []PoolReport
	Next  string // the cursor of the next page; "" when this one is the last
	// The Limiter's own recent refusals of the limit, newest first (the
	// last of every limit's, InspectOptions.Refusals of them), its count of
	// all refusals (of every limit) since it started, and the limit's
	// refusals per second over the last 10 seconds; with WithInspection
	// only.
	Refusals          []Refusal
	RefusalsTotal     int64
	RefusalsPerSecond float64
}

// PoolReport is one pool of a report.
type PoolReport struct {
	Pool     store.PoolID
	Key      string // in clear when this Limiter has a lease in it and shows keys
	KeyShown bool
	Held     int // slots taken
	Holders  []HolderReport
	Waiting  []store.Waiter
}

// HolderReport is one lease of a pool, with what the Limiter knows of it.
type HolderReport struct {
	store.Holder
	Age   time.Duration // since the lease was asked for; 0 when unknown
	Node  string        // the holding node's name when known, else its tag in hex; "" when unknown
	Here  bool          // held by this Limiter (a slot Do pinned: by this node, as its owner's stamp tells)
	Label string        // the caller's label (WithLabel), for this Limiter's leases
}

// Inspect returns one page of the pools of a limit name, on any server of
// the store, with their holders and wait lines, and what this Limiter
// knows that the store does not: which holders are its own, their labels
// and keys (WithInspection), and its recent refusals. The store must keep
// inspections (memstore, redisstore, pgstore; else the error matches
// ErrNotSupported). One store call, within the decision budget.
func (l *Limiter) Inspect(ctx context.Context, q Inspection) (*Report, error) {
	if err := l.need(store.Inspection); err != nil {
		return nil, err
	}
	if q.Name == "" {
		return nil, fmt.Errorf("%w: Inspect: the name is empty", ErrInvalidLimit)
	}
	f := q.Family
	if q.Shadow {
		f |= shadowFamily
	}
	tag := store.TagOf(byte(f), q.Name)
	var page store.PoolPage
	err := l.run(ctx, l.budget, func(ctx context.Context) error {
		var err error
		page, err = l.store.InspectPools(ctx, store.PageQuery{Tag: tag, Cursor: q.Cursor, Limit: q.Limit})
		return err
	})
	if err != nil {
		return nil, err
	}
	local := l.localLeases(tag)
	r := &Report{Next: page.Next}
	for _, p := range page.Pools {
		pr := PoolReport{Pool: p.Pool, Held: p.Held(), Waiting: p.Waiting}
		if k, ok := local.keys[p.Pool]; ok && l.inspect != nil && l.inspect.keys {
			pr.Key, pr.KeyShown = k, true
		}
		for _, h := range p.Holders {
			hr := HolderReport{Holder: h}
			if ll, ok := local.leases[h.Owner]; ok {
				hr.Here, hr.Node, hr.Label = true, l.nodes.name, ll.label
				if !ll.member {
					hr.Age = l.precise() - ll.acquired
				}
			} else if node, at, ok := stamp(h.Owner); ok {
				hr.Age = max(time.Since(at), 0)
				hr.Node = node.String()
				if node == l.owners.tag {
					// On a store that pins, a slot Do pinned: not on the
					// keeper's list.
					hr.Node, hr.Here = l.nodes.name, l.has(store.Pinned)
				}
			} else if store.NodeID(h.Owner[:8]) == l.nodes.id {
				hr.Here, hr.Node = true, l.nodes.name
			}
			pr.Holders = append(pr.Holders, hr)
		}
		slices.SortFunc(pr.Holders, func(a, b HolderReport) int { return int(b.Age - a.Age) })
		r.Pools = append(r.Pools, pr)
	}
	if l.inspect != nil {
		r.Refusals, r.RefusalsTotal = l.inspect.recent(q.Family, q.Name, q.Shadow)
		r.RefusalsPerSecond = l.inspect.rate(q.Family, q.Name, q.Shadow)
	}
	return r, nil
}

// localLease is what a Limiter knows of one of its leases.
type localLease struct {
	acquired time.Duration
	label    string
	member   bool
}

type localView struct {
	keys   map[store.PoolID]string
	leases map[store.Owner]localLease
}

// localLeases collects this Limiter's leases in the pools of tag: its held
// leases and its node's members.
func (l *Limiter) localLeases(tag store.Tag) localView {
	v := localView{keys: map[store.PoolID]string{}, leases: map[store.Owner]localLease{}}
	for i := range l.keeper.shards {
		sh := &l.keeper.shards[i]
		sh.mu.Lock()
		for ls := sh.head; ls != nil; ls = ls.next {
			for j := range ls.slots {
				if s := &ls.slots[j]; s.limit.pool.Tag() == tag {
					v.keys[s.limit.pool] = s.limit.key
					ls.mu.Lock()
					v.leases[ls.owner] = localLease{acquired: ls.acquired, label: ls.label()}
					ls.mu.Unlock()
				}
			}
		}
		sh.mu.Unlock()
	}
	l.nodes.mu.Lock()
	for id, mp := range l.nodes.pools {
		if id.Tag() == tag {
			v.keys[id] = mp.limit.key
			for o := range mp.members {
				v.leases[o] = localLease{member: true}
			}
		}
	}
	l.nodes.mu.Unlock()
	return v
}
