package keycap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Inspector is a Store that can show what it holds, for the people who run
// it: the pools of a limit name, each with its holders and its wait line,
// and the pauses and paces running. It reads; it never changes a pool. It
// pages, so that a store with millions of pools answers a page at a bounded
// cost, and it never lists the whole store at once (redisstore uses SCAN,
// never KEYS). Implemented by memstore, pgstore and redisstore; storetest
// checks it.
type Inspector interface {
	// InspectPools returns a page of the pools whose ID carries q.Tag and
	// that hold a lease or a ticket. A pool that exists for the whole
	// paging is returned at least once; one that changes meanwhile may be
	// seen in either state, or twice.
	InspectPools(ctx context.Context, q PageQuery) (PoolPage, error)

	// InspectPauses returns a page of the pauses and paces of q.Tag that
	// are running: a pause with time left, a pace whose next event is not
	// yet allowed.
	InspectPauses(ctx context.Context, q PageQuery) (PausePage, error)
}

// PageQuery asks an Inspector for one page.
type PageQuery struct {
	Tag    Tag
	Cursor string // "" for the first page, then the previous page's Next
	Limit  int    // at most this many entries (the store may return fewer); 0: DefaultPage
}

// DefaultPage is the size of a page when a PageQuery gives none.
const DefaultPage = 100

// PageSize returns q.Limit, or DefaultPage when it is not positive.
func (q PageQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultPage
	}
	return q.Limit
}

// PoolPage is one page of pools.
type PoolPage struct {
	Pools []PoolState
	Next  string // the cursor of the next page; "" when this one is the last
}

// PoolState is what a store holds for one pool.
type PoolState struct {
	Pool    PoolID
	Holders []Holder // the unexpired leases, slots handed to tickets included
	Waiting []Waiter // the line, its head first
}

// Held returns the slots the pool's holders take.
func (p PoolState) Held() int {
	n := 0
	for _, h := range p.Holders {
		n += max(h.Weight, 1)
	}
	return n
}

// Holder is one lease in a pool.
type Holder struct {
	Owner   Owner
	Weight  int           // slots the lease takes: 1 for a plain lease
	Expires time.Duration // time left before it expires, by the store's clock
}

// Waiter is one ticket in a pool's wait line.
type Waiter struct {
	Owner   Owner
	Expires time.Duration // time left before the ticket expires
}

// PausePage is one page of pauses and paces.
type PausePage struct {
	Pauses []PauseState
	Next   string
}

// PauseState is one running pause, or one pace ahead of its rate.
type PauseState struct {
	ID   PoolID
	Pace bool          // a pace (Pacer) rather than a pause (Pauser)
	Left time.Duration // a pause: time left; a pace: time until its next event may go
}

// ErrNoInspector is returned by Limiter.Inspect on a store that is no
// Inspector.
var ErrNoInspector = errors.New("keycap: the store cannot be inspected (keycap.Inspector)")

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

// Labels reports whether the Limiter keeps its callers' labels (it was built
// WithInspection): front doors attach one (a job's kind and ID) only then.
func (l *Limiter) Labels() bool { return l.inspect != nil }

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

// RefusalWindow is how far back a report's refusal rate looks.
const RefusalWindow = 10 * time.Second

// maxRates bounds the limits whose refusal rates a ledger keeps: limit names
// come from code and configuration, but a ledger must not grow without end.
const maxRates = 10000

type rateKey struct {
	family Family
	shadow bool
	name   string
}

// rateWindow counts refusals in one-second buckets over RefusalWindow.
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
	Pool   PoolID
	Key    string // in clear only with InspectOptions.ShowKeys
	Waited time.Duration
}

func (g *ledger) refused(lim Limit, waited time.Duration) {
	r := Refusal{At: time.Now(), Limit: lim.name, Family: lim.family, Shadow: lim.shadow, Pool: lim.pool, Waited: waited}
	if g.keys {
		r.Key = lim.key
	}
	k := rateKey{lim.family, lim.shadow, lim.name}
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

// rate returns the refusals per second of (f, name) over RefusalWindow.
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

// newOwner returns a fresh owner token stamped with the node and the time:
// bytes 0–3 are the node's tag, 4–9 the Unix time in milliseconds, byte 10
// is 'k' and 11–15 a per-Limiter sequence from a random start, so that
// tokens never repeat within a Limiter and, with the node's tag, nearly
// never across nodes. An Inspector's holders then show, on any server, how
// old a lease is and which node holds it.
func (l *Limiter) newOwner(now time.Duration) Owner {
	var o Owner
	copy(o[:4], l.nodeTag[:])
	ms := l.wallBase + int64(now/time.Millisecond)
	o[4], o[5], o[6], o[7], o[8], o[9] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	seq := l.ownerSeq.Add(1)
	o[10] = 'k'
	o[11], o[12], o[13], o[14], o[15] = byte(seq>>32), byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	return o
}

// initOwners sets what newOwner stamps.
func (l *Limiter) initOwners() {
	l.nodeTag = NodeTag(l.nodeName)
	l.wallBase = l.base.UnixMilli()
	l.ownerSeq.Store(rand.Uint64())
}

// ownerForTag starts every OwnerFor token: such an owner carries no stamp.
var ownerForTag = TagOf(familyInternal, "owner")

// NodeTag returns the tag that the owners of a node's leases start with.
func NodeTag(node string) Tag { return TagOf(familyInternal, "node:"+node) }

// Stamp returns what a Limiter stamped in the owner of one of its leases:
// its node's tag (NodeTag) and when the lease was asked for. ok is false for
// an owner that carries no stamp (a job's or a member's, whose token is a
// hash), as far as the stamp's marker can tell.
func (o Owner) Stamp() (node Tag, at time.Time, ok bool) {
	if o[10] != 'k' || Tag(o[:4]) == ownerForTag {
		return Tag{}, time.Time{}, false
	}
	ms := int64(o[4])<<40 | int64(o[5])<<32 | int64(o[6])<<24 | int64(o[7])<<16 | int64(o[8])<<8 | int64(o[9])
	return Tag(o[:4]), time.UnixMilli(ms), true
}

// Inspection asks Limiter.Inspect for one page of a limit's pools.
type Inspection struct {
	Family Family
	Name   string
	Shadow bool   // the pools of the shadow limit of that name (WithShadow)
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
	// refusals per second over the last RefusalWindow; with WithInspection
	// only.
	Refusals          []Refusal
	RefusalsTotal     int64
	RefusalsPerSecond float64
}

// PoolReport is one pool of a report.
type PoolReport struct {
	Pool     PoolID
	Key      string // in clear when this Limiter has a lease in it and shows keys
	KeyShown bool
	Held     int // slots taken
	Holders  []HolderReport
	Waiting  []Waiter
}

// HolderReport is one lease of a pool, with what the Limiter knows of it.
type HolderReport struct {
	Holder
	Age   time.Duration // since the lease was asked for; 0 when unknown
	Node  string        // the holding node's name when known, else its tag in hex; "" when unknown
	Here  bool          // held by this Limiter (a slot Do pinned on a Pinner: by this node, as its owner's stamp tells)
	Label string        // the caller's label (WithLabel), for this Limiter's leases
}

// Inspect returns one page of the pools of a limit name, on any server of
// the store, with their holders and wait lines, and what this Limiter
// knows that the store does not: which holders are its own, their labels
// and keys (WithInspection), and its recent refusals. The store must be an
// Inspector. One store call, within the decision budget.
func (l *Limiter) Inspect(ctx context.Context, q Inspection) (*Report, error) {
	ins, ok := l.store.(Inspector)
	if !ok {
		return nil, ErrNoInspector
	}
	if q.Name == "" {
		return nil, fmt.Errorf("%w: Inspect: the name is empty", ErrInvalidLimit)
	}
	f := q.Family
	if q.Shadow {
		f |= shadowFamily
	}
	tag := TagOf(f, q.Name)
	ctx, cancel := l.bound(ctx, l.budget)
	defer cancel()
	page, err := ins.InspectPools(ctx, PageQuery{Tag: tag, Cursor: q.Cursor, Limit: q.Limit})
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
				hr.Here, hr.Node, hr.Label = true, l.nodeName, ll.label
				if !ll.member {
					hr.Age = l.precise() - ll.acquired
				}
			} else if node, at, ok := h.Owner.Stamp(); ok {
				hr.Age = max(time.Since(at), 0)
				hr.Node = node.String()
				if node == l.nodeTag {
					// On a Pinner, a slot Do pinned: not on the keeper's list.
					hr.Node, hr.Here = l.nodeName, l.pinner != nil
				}
			} else if NodeID(h.Owner[:8]) == l.node {
				hr.Here, hr.Node = true, l.nodeName
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
	keys   map[PoolID]string
	leases map[Owner]localLease
}

// localLeases collects this Limiter's leases in the pools of tag: its held
// leases and its node's members.
func (l *Limiter) localLeases(tag Tag) localView {
	v := localView{keys: map[PoolID]string{}, leases: map[Owner]localLease{}}
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
