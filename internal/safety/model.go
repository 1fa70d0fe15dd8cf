package safety

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of the history.
type Kind uint8

const (
	Acquire Kind = iota // store.Store.Acquire, with a ticket when Op.Line
	Release             // store.Store.Release, leaving the line when Op.Line
	Renew               // store.Store.Renew of one lease
	// Crash is the store losing every lease at once, somewhere within the
	// operation's interval: a Redis restarted without persistence. It
	// belongs to every group. Fencing tokens keep growing across it.
	Crash
	// Serve is the second half of a release of a pool without a parent
	// on a store that frees the slot at one point of the call and serves
	// the line at a later one (Bounds.ServesLater): Check adds one beside
	// each such release, with its interval. It drops the leases expired
	// by then and hands the free slots to the line, or does nothing (the
	// store saw no line when it freed the slot).
	Serve
)

func (k Kind) String() string {
	return [...]string{"acquire", "release", "renew", "crash", "serve"}[k]
}

// Never is the return time of a call whose outcome is unknown: it may take
// effect at any time after its call.
const Never = time.Duration(math.MaxInt64 / 4)

// Op is an operation's input: what a client asked of which pool, and when.
type Op struct {
	Kind   Kind
	Group  int // the partition: a plain pool, or a parent with its keys' pools
	Key    int // the key's pool within the group
	Owner  int
	Weight int  // slots the lease takes
	Max    int  // the key's max
	Parent int  // the parent's total; 0: none
	Share  int  // the key's share of the parent (store.Parent.Share); 0: 1
	Fence  bool // the acquire asked for a fencing token
	// Line: an acquire that takes a ticket in the key's line when refused
	// (Bounds.Ticket, Bounds.Claim), or a release that leaves the line.
	Line bool
	// Keep: the parent keeps a slot its key frees for the key's next
	// caller (keycap.WithKeep, for Bounds.Keep) while other keys wait.
	Keep bool
	// The call's interval on the run's clock; Return is Never for an
	// unknown outcome.
	Call, Return time.Duration
}

// Result is an operation's output.
type Result struct {
	Unknown bool   // the call failed: it may or may not have taken effect
	Granted bool   // Acquire
	Token   uint64 // Acquire with Fence, granted
	Lost    bool   // Renew: the lease was gone
	Ahead   int    // Acquire with Line, refused: tickets before the owner's
	Kept    bool   // Release with Keep: the slots freed were kept for the key
}

// kept is the owner of the slots a parent keeps for a key (store.KeptFor):
// one lease of the key, of the slots kept, which the key's next caller
// takes over.
const kept = -1

// lease is a lease the model holds: the store's expiry of it lies within
// [lo, hi] on the run's clock. A lease granted by a call of unknown
// outcome has no hi until the next operation after it (Never): then open
// is its term + the late allowance, and hi becomes that operation's
// return + open (bound).
type lease struct {
	key, owner, weight int
	lo, hi, open       time.Duration
}

// ticket is a place in a key's line: its owner's last call that took or
// kept it made it expire within [lo, hi]. An expired ticket stays in the
// line until a call that serves the line meets it at the head (or, with
// Bounds.Sweeps, a sweep drops it from anywhere): until then its owner's
// next call with a ticket keeps its place, as the stores do.
type ticket struct {
	key, owner, weight int
	max, share         int // its key's max and share, for the fills of a parent's keys
	lo, hi, open       time.Duration
}

// state is the model's state of one group: its leases, sorted by key and
// owner; its keys' lines, each in arrival order; and the last fencing
// token seen in each key's pool.
type state struct {
	leases []lease
	line   []ticket
	tokens map[int]uint64 // never mutated: replaced when it changes
}

// Bounds are the model's allowances for clocks: a lease granted by a call
// made at c and answered at r expires between c+TTL-Early and r+TTL+Late
// on the run's clock (the store rounds its clock, and reads it anywhere
// within the call); a ticket likewise after Ticket, and a slot handed to
// a ticket after Claim.
type Bounds struct {
	TTL, Early, Late time.Duration
	Ticket, Claim    time.Duration
	// Keep is how long a slot kept for a key lives (Op.Keep).
	Keep time.Duration
	// ServesLater says that a release of a pool without a parent may
	// serve the line at a later point of its call than the one where it
	// freed the slot (redisstore frees it with ZREM and, when its line was
	// not empty, hands it on in a second call, which first drops the
	// leases expired by then): Check gives such releases a Serve.
	ServesLater bool
	// Sweeps says the store may drop a key's expired tickets from
	// anywhere in its line (pgstore does), not only when they reach its
	// head (memstore, Redis).
	Sweeps bool
}

// Model returns the sequential model of the leased semaphore, as a
// porcupine model whose states branch where a lease may or may not have
// expired by an operation's linearization point: each of porcupine's
// states is the set of the model's states the history may have reached.
func Model(b Bounds) porcupine.Model {
	return porcupine.Model{
		Partition: partition,
		Init:      func() any { return newStates([]state{{tokens: map[int]uint64{}}}) },
		Step: func(cur, in, out any) (bool, any) {
			var next []state
			for _, st := range cur.(states).all {
				next = append(next, step(b, st, in.(Op), out.(Result))...)
			}
			if len(next) == 0 {
				return false, nil
			}
			return true, newStates(next)
		},
		Equal:             func(x, y any) bool { return slices.Equal(x.(states).keys, y.(states).keys) },
		Hash:              func(x any) uint64 { return x.(states).hash },
		DescribeOperation: describe,
		DescribeState: func(x any) string {
			var all []string
			for _, st := range x.(states).all {
				all = append(all, st.String())
			}
			return "{" + strings.Join(all, ", ") + "}"
		},
	}
}

// states is a set of the model's states, each with its key, in the order
// of the keys: porcupine.NondeterministicModel's power-set construction,
// whose merging and comparing of sets take time quadratic in their size
// (a parent's lines make sets of hundreds), made linear by the keys.
type states struct {
	all  []state
	keys []string
	hash uint64
}

// newStates returns the set of next's states, each once.
func newStates(next []state) states {
	byKey := make(map[string]state, len(next))
	for _, st := range next {
		byKey[st.key()] = st
	}
	s := states{keys: make([]string, 0, len(byKey))}
	for k := range byKey {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys)
	h := fnv.New64a()
	for _, k := range s.keys {
		s.all = append(s.all, byKey[k])
		h.Write([]byte(k))
		h.Write([]byte{0xff}) // not in any key: keys end where it is
	}
	s.hash = h.Sum64()
	return s
}

// key returns st in bytes: states are equal if and only if their keys are.
func (st state) key() string {
	b := make([]byte, 0, 16*(len(st.leases)+len(st.line)+len(st.tokens)))
	put := func(xs ...int64) {
		for _, x := range xs {
			b = binary.AppendVarint(b, x)
		}
	}
	put(int64(len(st.leases)), int64(len(st.line)), int64(len(st.tokens)))
	for _, l := range st.leases {
		put(int64(l.key), int64(l.owner), int64(l.weight), int64(l.lo), int64(l.hi), int64(l.open))
	}
	for _, t := range st.line {
		put(int64(t.key), int64(t.owner), int64(t.weight), int64(t.max), int64(t.share), int64(t.lo), int64(t.hi), int64(t.open))
	}
	keys := make([]int, 0, len(st.tokens))
	for k := range st.tokens {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = binary.AppendVarint(b, int64(k))
		b = binary.AppendUvarint(b, st.tokens[k])
	}
	return string(b)
}

// partition splits a history by group: groups share nothing but crashes,
// which go to every group.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	by := map[int][]porcupine.Operation{}
	var order []int
	var crashes []porcupine.Operation
	for _, op := range history {
		in := op.Input.(Op)
		if in.Kind == Crash {
			crashes = append(crashes, op)
			continue
		}
		if _, ok := by[in.Group]; !ok {
			order = append(order, in.Group)
		}
		by[in.Group] = append(by[in.Group], op)
	}
	slices.Sort(order)
	out := make([][]porcupine.Operation, 0, len(order))
	for _, g := range order {
		out = append(out, append(by[g], crashes...))
	}
	return out
}

// step returns the states that op, answered with res, can lead to from st;
// none when res is impossible.
func step(b Bounds, st state, op Op, res Result) []state {
	if op.Return != Never {
		st = st.bound(op.Return)
	}
	// Leases certainly expired before the call began are gone; those that
	// may have expired by its linearization point (at most its return)
	// branch.
	var sure []lease
	var maybe []int
	for _, l := range st.leases {
		switch {
		case l.hi < op.Call:
		case l.lo <= op.Return:
			maybe = append(maybe, len(sure))
			sure = append(sure, l)
		default:
			sure = append(sure, l)
		}
	}
	if len(maybe) > 12 {
		// Bounds the branching: the rest are kept alive, which could only
		// refuse a history, never accept a wrong one. The workload's 12
		// owners hold one lease each, but for the rare one left by a call
		// of unknown outcome.
		maybe = maybe[:12]
	}
	// A store that sweeps may also drop from anywhere in the key's line
	// (any line of a parent's keys), before the operation, the tickets
	// that may have expired by its linearization point and those whose
	// owner holds a lease of the key (pgstore's fill): each branches, kept
	// or dropped, within one budget with the leases' (12 in all: 4,096
	// branches). The rest are kept, which could only refuse a history.
	var stale []int
	for i, t := range st.line {
		if b.Sweeps && op.Kind != Crash && (t.key == op.Key || op.Parent > 0) && len(stale) < min(6, 12-len(maybe)) &&
			(t.lo <= op.Return || st.find(t.key, t.owner) >= 0) {
			stale = append(stale, i)
		}
	}
	var out []state
	for mask := 0; mask < 1<<len(maybe); mask++ {
		ls := make([]lease, 0, len(sure))
		for i, l := range sure {
			if j := slices.Index(maybe, i); j >= 0 && mask&(1<<j) != 0 {
				continue // expired in this branch
			}
			ls = append(ls, l)
		}
		for drop := 0; drop < 1<<len(stale); drop++ {
			line := st.line
			if drop != 0 {
				line = make([]ticket, 0, len(st.line))
				for i, t := range st.line {
					if j := slices.Index(stale, i); j < 0 || drop&(1<<j) == 0 {
						line = append(line, t)
					}
				}
			}
			out = append(out, apply(b, state{ls, line, st.tokens}, op, res)...)
		}
	}
	return out
}

// apply applies op to st, whose leases' expiries are decided.
func apply(b Bounds, st state, op Op, res Result) []state {
	switch op.Kind {
	case Crash:
		return []state{{tokens: st.tokens}}
	case Acquire:
		// Every store serves the line at an acquire that finds room (an
		// expiry found, a slot freed) before it decides.
		var out []state
		for _, s := range st.fill(b, op) {
			out = append(out, s.acquire(b, op, res)...)
		}
		return out
	case Release:
		s := st
		i := s.find(op.Key, op.Owner)
		if i >= 0 {
			s = s.without(i)
		}
		if t := s.ticket(op.Key, op.Owner); op.Line && t >= 0 {
			s = s.withoutTicket(t)
		}
		// A release serves the line in the same step: the slot it frees
		// goes to the head ticket at once, unless the parent keeps it for
		// the key.
		done := s.fill(b, op)
		var keeping []state
		if op.Keep && i >= 0 && !op.Line {
			// Kept when the key would be served first if it asked again,
			// before every other key that waits: one that holds more slots
			// for its share than the key then. Its line must be empty
			// (memstore passes the tickets at its head that may have
			// expired, the others do not), and another key must wait.
			if c, empty := s.passed(op); empty {
				r := c.rivals(op)
				if r.atLeast && !r.fewer {
					keeping = c.keep(b, op, st.leases[i].weight).fill(b, op)
				}
				if r.any && !r.atMost && s.waiting(op.Key) == 0 {
					done = nil // kept, surely
				}
			}
		}
		switch {
		case res.Unknown:
			return append(append([]state{st}, done...), keeping...)
		case res.Kept:
			return keeping // none when nothing could be kept
		}
		return done
	case Renew:
		// No store serves the line at a renewal.
		return st.renew(b, op, res)
	case Serve:
		return append([]state{st}, st.fill(b, op)...)
	}
	return nil
}

// acquire applies an acquire to st, whose line is decided.
func (st state) acquire(b Bounds, op Op, res Result) []state {
	i := st.find(op.Key, op.Owner)
	held := i >= 0
	fresh := expiring(b, op, b.TTL)
	room := held || st.waiting(op.Key) == 0 && st.room(op.Key, op.Weight, op.Max, op.Parent)
	// A fresh caller of a parent's key with room is granted unless
	// another key waits that the fair share serves first: one that holds
	// fewer slots for its share is refused the caller, one that holds as
	// many may be or not — the order between them is the slot-time each
	// received, which the model does not follow (the Quint model and
	// storetest check it) — and so is one whose ticket may have expired.
	var either bool
	if room && !held && op.Parent > 0 {
		r := st.rivals(op)
		room, either = !r.fewer, r.atMost && !r.fewer
	}
	granted := func() state {
		s := st.grant(i, fresh, res.Token)
		if t := s.ticket(op.Key, op.Owner); op.Line && t >= 0 {
			s = s.withoutTicket(t)
		}
		return s
	}
	if !held && st.waiting(op.Key) == 0 {
		// The slots kept for the key go to its next caller, if enough.
		if j := st.find(op.Key, kept); j >= 0 && st.leases[j].weight >= op.Weight {
			s := st
			if w := st.leases[j].weight - op.Weight; w > 0 {
				l := st.leases[j]
				l.weight = w
				s = s.with(j, l)
			} else {
				s = s.without(j)
			}
			s = s.grant(-1, fresh, res.Token)
			switch {
			case res.Unknown:
				return []state{st, s}
			case !res.Granted || op.Fence && res.Token <= st.tokens[op.Key] || !op.Fence && res.Token != 0:
				return nil
			}
			return []state{s}
		}
	}
	queued, ahead := st, 0
	if !room && op.Line {
		queued, ahead = st.queue(b, op)
	}
	if either && !res.Granted && op.Line {
		queued, ahead = st.queue(b, op)
	}
	if res.Unknown {
		if room {
			out := []state{st, granted()} // its token unknown: 0
			if either && op.Line {
				out = append(out, queued)
			}
			return out
		}
		return []state{st, queued}
	}
	switch {
	case res.Granted != room && !either:
		return nil
	case !res.Granted && res.Token != 0:
		return nil
	case !res.Granted && op.Line && res.Ahead != ahead:
		return nil // not its place in the line
	case !res.Granted:
		return []state{queued}
	case op.Fence && res.Token <= st.tokens[op.Key]:
		return nil // not above the pool's last token
	case !op.Fence && res.Token != 0:
		return nil
	}
	return []state{granted()}
}

// renew applies a renewal to st, whose line is decided.
func (st state) renew(b Bounds, op Op, res Result) []state {
	i := st.find(op.Key, op.Owner)
	held := i >= 0
	var renewed state
	if held {
		l := expiring(b, op, b.TTL)
		l.weight = st.leases[i].weight
		renewed = st.with(i, l)
	}
	switch {
	case res.Unknown && held:
		return []state{st, renewed}
	case res.Unknown:
		return []state{st}
	case res.Lost && held, !res.Lost && !held:
		return nil
	case res.Lost:
		return []state{st}
	}
	return []state{renewed}
}

// expiring returns op's owner's lease of op's key expiring d after op.
func expiring(b Bounds, op Op, d time.Duration) lease {
	l := lease{key: op.Key, owner: op.Owner, weight: op.Weight, lo: op.Call + d - b.Early, hi: op.Return + d + b.Late}
	if op.Return == Never {
		l.hi, l.open = Never, d+b.Late
	}
	return l
}

// bound gives a hi to the leases and tickets of calls of unknown outcome,
// in the step of op, a call that returned at ret: every operation in st
// took effect before op did, so before ret. Without it, each such lease
// would make every later step branch (expired or not) to the end of the
// history, and a failover's burst of unknown outcomes made sets of tens
// of thousands of states.
func (st state) bound(ret time.Duration) state {
	var ls []lease
	for i, l := range st.leases {
		if l.open > 0 {
			if ls == nil {
				ls = slices.Clone(st.leases)
			}
			ls[i].hi, ls[i].open = ret+l.open, 0
		}
	}
	var line []ticket
	for i, t := range st.line {
		if t.open > 0 {
			if line == nil {
				line = slices.Clone(st.line)
			}
			line[i].hi, line[i].open = ret+t.open, 0
		}
	}
	if ls != nil {
		st.leases = ls
	}
	if line != nil {
		st.line = line
	}
	return st
}

// fill serves op's key's line in the step of op: the head tickets, in
// order, are handed the free slots (a lease that expires after the
// ticket's claim window), until one does not fit. A head that has
// expired, or whose owner holds a lease already, is dropped; while no slot
// is free, a store may also leave it (Redis looks at the line only when
// there is room), so both are states.
func (st state) fill(b Bounds, op Op) []state {
	if op.Parent > 0 {
		return st.fillParent(b, op)
	}
	t := st.ticket(op.Key, -1)
	if t < 0 {
		return []state{st}
	}
	tk := st.line[t]
	full := !st.room(op.Key, 1, op.Max, op.Parent)
	drop := func() []state {
		out := st.withoutTicket(t).fill(b, op)
		if full {
			out = append(out, st)
		}
		return out
	}
	switch {
	case tk.hi < op.Call, st.find(tk.key, tk.owner) >= 0:
		return drop()
	case tk.lo <= op.Return:
		// It may have expired by op: dropped, or served as live.
		out := drop()
		return append(out, st.serve(b, op, t)...)
	}
	return st.serve(b, op, t)
}

// serve hands a lease to the live head ticket t if it fits, and goes on.
func (st state) serve(b Bounds, op Op, t int) []state {
	tk := st.line[t]
	if !st.room(op.Key, tk.weight, op.Max, op.Parent) {
		return []state{st} // the head waits for its slots
	}
	l := expiring(b, op, b.Claim)
	l.owner, l.weight = tk.owner, tk.weight
	return st.withoutTicket(t).grant(-1, l, 0).fill(b, op)
}

// fillParent serves the lines of a parent's keys in the step of op (a
// call on any of them): the store hands the parent's free slots to the
// head ticket of the key its fair share puts first, among the keys whose
// head fits in their key's max, and stops when that head does not fit in
// the parent's total (nobody overtakes it). First is a key that holds the
// fewest slots for its share (held ÷ share); among those, the one that
// received the least slot-time, which the model does not follow, so any
// of them may come first: a state for each. That checks both caps, the
// order within each line, the fair share's first order, that a head is
// served only when it fits, and that no slot stays free while a head
// that fits waits with nothing before it that does not. A head that has
// expired, or whose owner holds a lease of its key, is dropped or left (a
// store meets it only when it looks at that key's line).
func (st state) fillParent(b Bounds, op Op) []state {
	var out []state
	var served []int // the head tickets of the keys that may be served
	for key := range st.keys() {
		t := st.ticket(key, -1)
		tk := st.line[t]
		stale := tk.hi < op.Call || st.find(key, tk.owner) >= 0
		if stale || tk.lo <= op.Return {
			out = append(out, st.withoutTicket(t).fillParent(b, op)...)
		}
		if stale || !st.room(key, tk.weight, tk.max, 0) {
			continue // not among the keys served
		}
		served = append(served, t)
	}
	// The fill ends here when no head is served, or when one that comes
	// first waits.
	waits, serves := false, false
	for _, t := range served {
		tk := st.line[t]
		if slices.ContainsFunc(served, func(u int) bool { return st.fewer(st.line[u], tk) }) {
			continue // another key comes first
		}
		if !st.room(tk.key, tk.weight, tk.max, op.Parent) {
			waits = true // first, and waits for its slots
			continue
		}
		serves = true
		l := expiring(b, op, b.Claim)
		l.key, l.owner, l.weight = tk.key, tk.owner, tk.weight
		out = append(out, st.withoutTicket(t).grant(-1, l, 0).fillParent(b, op)...)
	}
	if waits || !serves {
		out = append(out, st)
	}
	return out
}

// held returns the slots key holds, those kept for it among them.
func (st state) held(key int) int {
	n := 0
	for _, l := range st.leases {
		if l.key == key {
			n += l.weight
		}
	}
	return n
}

// fewer reports whether the key of ticket a holds fewer slots for its
// share than the key of ticket b: the fair share's first order
// (store.Shares; the workload sets no minimum).
func (st state) fewer(a, b ticket) bool {
	return st.held(a.key)*b.share < st.held(b.key)*a.share
}

// rivals is what a parent's other keys that wait to be served are to a
// key that asks or frees slots at op. A key waits when its head ticket —
// the first of its line that has not expired and whose owner holds no
// lease of the key, as a store finds it — fits in its key's max; whether
// a ticket has expired by op may be unknown, and with it whether, and
// with which head, the key waits. A store may also not have met a head
// that has expired, or whose owner holds a lease (fillParent leaves it):
// then the key may wait behind it, or not.
type rivals struct {
	any     bool // a key surely waits
	fewer   bool // a key surely waits that holds fewer slots for its share
	atMost  bool // a key may wait that holds at most as many
	atLeast bool // a key may wait that holds at least as many
}

// rivals returns the other keys of op's parent that wait at op, against
// op's key.
func (st state) rivals(op Op) rivals {
	var r rivals
	mine := ticket{key: op.Key, share: max(op.Share, 1)}
	for key := range st.keys() {
		if key == op.Key {
			continue
		}
		may, sure, found := false, true, false
		var tk ticket // its head, or the last that may be
		for _, t := range st.line {
			if t.key != key {
				continue
			}
			if t.hi < op.Call || st.find(key, t.owner) >= 0 {
				sure = false // the store may not have met it
				continue
			}
			tk = t
			fits := st.room(key, t.weight, t.max, 0)
			may, sure = may || fits, sure && fits
			if t.lo > op.Return {
				found = true
				break
			}
		}
		sure = sure && found
		fewer, more := st.fewer(tk, mine), st.fewer(mine, tk)
		r.any = r.any || sure
		r.fewer = r.fewer || sure && fewer
		r.atMost = r.atMost || may && !more
		r.atLeast = r.atLeast || may && !fewer
	}
	return r
}

// passed returns st without the tickets at the head of op's key's line
// that a store may pass as it meets them — those that may have expired by
// op, or whose owner holds a lease of the key — and whether the key's line
// is empty then. A release meets its key's line before it decides to keep
// when it reaps a lapsed lease of the key (memstore).
func (st state) passed(op Op) (state, bool) {
	for {
		t := st.ticket(op.Key, -1)
		if t < 0 {
			return st, true
		}
		if tk := st.line[t]; tk.lo > op.Return && st.find(op.Key, tk.owner) < 0 {
			return st, false
		}
		st = st.withoutTicket(t)
	}
}

// keep returns st with weight slots kept for op's key until Bounds.Keep
// after op: added to those kept already, whose expiry moves with them.
func (st state) keep(b Bounds, op Op, weight int) state {
	l := expiring(b, op, b.Keep)
	l.owner, l.weight = kept, weight
	if j := st.find(op.Key, kept); j >= 0 {
		l.weight += st.leases[j].weight
		return st.with(j, l)
	}
	return st.grant(-1, l, 0)
}

// keys yields each key that has a line, once, in the order of its head.
func (st state) keys() func(func(int) bool) {
	return func(yield func(int) bool) {
		var seen []int
		for _, t := range st.line {
			if slices.Contains(seen, t.key) {
				continue
			}
			seen = append(seen, t.key)
			if !yield(t.key) {
				return
			}
		}
	}
}

// queue gives op's owner a ticket in its key's line, keeping its place if
// it has one, and returns the state and how many tickets wait before it.
func (st state) queue(b Bounds, op Op) (state, int) {
	l := expiring(b, op, b.Ticket)
	tk := ticket{key: l.key, owner: l.owner, weight: l.weight, max: op.Max, share: max(op.Share, 1), lo: l.lo, hi: l.hi, open: l.open}
	line := slices.Clone(st.line)
	ahead := 0
	for i, x := range line {
		if x.key != op.Key {
			continue
		}
		if x.owner == op.Owner {
			line[i] = tk
			return state{st.leases, line, st.tokens}, ahead
		}
		ahead++
	}
	return state{st.leases, append(line, tk), st.tokens}, ahead
}

// find returns the index of owner's lease of key, or -1.
func (st state) find(key, owner int) int {
	return slices.IndexFunc(st.leases, func(l lease) bool { return l.key == key && l.owner == owner })
}

// ticket returns the index of owner's ticket in key's line (the head's,
// for owner -1), or -1.
func (st state) ticket(key, owner int) int {
	return slices.IndexFunc(st.line, func(t ticket) bool { return t.key == key && (owner < 0 || t.owner == owner) })
}

// waiting returns how many tickets key's line holds.
func (st state) waiting(key int) int {
	n := 0
	for _, t := range st.line {
		if t.key == key {
			n++
		}
	}
	return n
}

func (st state) withoutTicket(i int) state {
	return state{st.leases, slices.Delete(slices.Clone(st.line), i, i+1), st.tokens}
}

// room reports whether a lease of weight slots of key fits beside st's:
// in the key's max, and in the parent's total (0: none).
func (st state) room(key, weight, max, parent int) bool {
	in, all := 0, 0
	for _, l := range st.leases {
		all += l.weight
		if l.key == key {
			in += l.weight
		}
	}
	return in+weight <= max && (parent == 0 || all+weight <= parent)
}

// grant returns st with the lease l granted (extending the one at i, which
// keeps its weight, when i >= 0), and token as its key's last.
func (st state) grant(i int, l lease, token uint64) state {
	if i >= 0 {
		l.weight = st.leases[i].weight
		st = st.with(i, l)
	} else {
		ls := append(slices.Clone(st.leases), l)
		slices.SortFunc(ls, func(a, b lease) int {
			if a.key != b.key {
				return a.key - b.key
			}
			return a.owner - b.owner
		})
		st = state{ls, st.line, st.tokens}
	}
	if token != 0 {
		t := make(map[int]uint64, len(st.tokens)+1)
		for k, v := range st.tokens {
			t[k] = v
		}
		t[l.key] = token
		st.tokens = t
	}
	return st
}

func (st state) with(i int, l lease) state {
	ls := slices.Clone(st.leases)
	ls[i] = l
	return state{ls, st.line, st.tokens}
}

func (st state) without(i int) state {
	return state{slices.Delete(slices.Clone(st.leases), i, i+1), st.line, st.tokens}
}

func (st state) String() string {
	var b strings.Builder
	for _, l := range st.leases {
		hi := "?"
		if l.hi != Never {
			hi = ms(l.hi)
		}
		if l.owner == kept {
			fmt.Fprintf(&b, "k%d/kept×%d [%s, %s] ", l.key, l.weight, ms(l.lo), hi)
			continue
		}
		fmt.Fprintf(&b, "k%d/o%d×%d [%s, %s] ", l.key, l.owner, l.weight, ms(l.lo), hi)
	}
	for _, t := range st.line {
		hi := "?"
		if t.hi != Never {
			hi = ms(t.hi)
		}
		fmt.Fprintf(&b, "line(k%d) o%d×%d [%s, %s] ", t.key, t.owner, t.weight, ms(t.lo), hi)
	}
	keys := make([]int, 0, len(st.tokens))
	for k := range st.tokens {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "token(k%d)=%d ", k, st.tokens[k])
	}
	if b.Len() == 0 {
		return "empty"
	}
	return strings.TrimSpace(b.String())
}

func describe(in, out any) string {
	op, res := in.(Op), out.(Result)
	switch op.Kind {
	case Crash:
		return "crash: every lease lost"
	case Serve:
		return fmt.Sprintf("serve g%d k%d: the line, after o%d's release freed its slot", op.Group, op.Key, op.Owner)
	}
	s := fmt.Sprintf("%s g%d k%d o%d", op.Kind, op.Group, op.Key, op.Owner)
	if op.Kind == Acquire {
		s += fmt.Sprintf(" ×%d max %d", op.Weight, op.Max)
		if op.Parent > 0 {
			s += fmt.Sprintf(" parent %d", op.Parent)
		}
	}
	if op.Line {
		s += map[Kind]string{Acquire: " with a ticket", Release: " leaving the line"}[op.Kind]
	}
	switch {
	case res.Unknown:
		return s + " → unknown"
	case op.Kind == Acquire && res.Granted && res.Token != 0:
		return fmt.Sprintf("%s → granted, token %d", s, res.Token)
	case op.Kind == Acquire && res.Granted:
		return s + " → granted"
	case op.Kind == Acquire && op.Line:
		return fmt.Sprintf("%s → refused, %d ahead", s, res.Ahead)
	case op.Kind == Acquire:
		return s + " → refused"
	case op.Kind == Renew && res.Lost:
		return s + " → lost"
	case op.Kind == Release && res.Kept:
		return s + " → kept for its key"
	}
	return s + " → ok"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
