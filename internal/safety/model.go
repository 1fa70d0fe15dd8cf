package safety

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation of the history.
type Kind uint8

const (
	Acquire Kind = iota // store.Store.Acquire, without a ticket
	Release             // store.Store.Release
	Renew               // store.Store.Renew of one lease
	// Crash is the store losing every lease at once, somewhere within the
	// operation's interval: a Redis restarted without persistence. It
	// belongs to every group. Fencing tokens keep growing across it.
	Crash
)

func (k Kind) String() string { return [...]string{"acquire", "release", "renew", "crash"}[k] }

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
	Fence  bool // the acquire asked for a fencing token
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
}

// lease is a lease the model holds: the store's expiry of it lies within
// [lo, hi] on the run's clock.
type lease struct {
	key, owner, weight int
	lo, hi             time.Duration
}

// state is the model's state of one group: its leases, sorted by key and
// owner, and the last fencing token seen in each key's pool.
type state struct {
	leases []lease
	tokens map[int]uint64 // never mutated: replaced when it changes
}

// Bounds are the model's allowances for clocks: a lease granted by a call
// made at c and answered at r expires between c+TTL-Early and r+TTL+Late
// on the run's clock (the store rounds its clock, and reads it anywhere
// within the call).
type Bounds struct {
	TTL, Early, Late time.Duration
}

// Model returns the sequential model of the leased semaphore, as a
// porcupine model whose states branch where a lease may or may not have
// expired by an operation's linearization point.
func Model(b Bounds) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{state{tokens: map[int]uint64{}}} },
		Step: func(st, in, out any) []any {
			return step(b, st.(state), in.(Op), out.(Result))
		},
		Equal:             equal,
		DescribeOperation: describe,
		DescribeState:     func(st any) string { return st.(state).String() },
	}
	return m.ToModel()
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
func step(b Bounds, st state, op Op, res Result) []any {
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
		// Bounds the branching (4,096 branches): the rest are kept alive,
		// which could only refuse a history, never accept a wrong one.
		// The workload's 12 owners hold one lease each, but for the
		// rare one left by a call of unknown outcome.
		maybe = maybe[:12]
	}
	var out []any
	for mask := 0; mask < 1<<len(maybe); mask++ {
		ls := make([]lease, 0, len(sure))
		for i, l := range sure {
			if j := slices.Index(maybe, i); j >= 0 && mask&(1<<j) != 0 {
				continue // expired in this branch
			}
			ls = append(ls, l)
		}
		for _, next := range apply(b, state{ls, st.tokens}, op, res) {
			out = append(out, next)
		}
	}
	return out
}

// apply applies op to st, whose expiries are decided.
func apply(b Bounds, st state, op Op, res Result) []state {
	i := slices.IndexFunc(st.leases, func(l lease) bool { return l.key == op.Key && l.owner == op.Owner })
	held := i >= 0
	fresh := lease{key: op.Key, owner: op.Owner, weight: op.Weight, lo: op.Call + b.TTL - b.Early, hi: op.Return + b.TTL + b.Late}
	if op.Return == Never {
		fresh.hi = Never
	}
	switch op.Kind {
	case Crash:
		return []state{{tokens: st.tokens}}
	case Acquire:
		room := held || st.room(op)
		if res.Unknown {
			if !room {
				return []state{st}
			}
			return []state{st, st.grant(i, fresh, 0)}
		}
		if res.Granted != room {
			return nil
		}
		if !res.Granted {
			if res.Token != 0 {
				return nil
			}
			return []state{st}
		}
		if op.Fence && res.Token <= st.tokens[op.Key] {
			return nil // not above the pool's last token
		}
		if !op.Fence && res.Token != 0 {
			return nil
		}
		return []state{st.grant(i, fresh, res.Token)}
	case Release:
		if !held {
			return []state{st}
		}
		gone := st.without(i)
		if res.Unknown {
			return []state{st, gone}
		}
		return []state{gone}
	case Renew:
		switch {
		case res.Unknown && held:
			renewed := st.with(i, lease{key: op.Key, owner: op.Owner, weight: st.leases[i].weight, lo: fresh.lo, hi: fresh.hi})
			return []state{st, renewed}
		case res.Unknown:
			return []state{st}
		case res.Lost && held, !res.Lost && !held:
			return nil
		case res.Lost:
			return []state{st}
		}
		return []state{st.with(i, lease{key: op.Key, owner: op.Owner, weight: st.leases[i].weight, lo: fresh.lo, hi: fresh.hi})}
	}
	return nil
}

// room reports whether op's lease fits beside st's: in the key's max, and
// in the parent's total.
func (st state) room(op Op) bool {
	key, all := 0, 0
	for _, l := range st.leases {
		all += l.weight
		if l.key == op.Key {
			key += l.weight
		}
	}
	return key+op.Weight <= op.Max && (op.Parent == 0 || all+op.Weight <= op.Parent)
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
		st = state{ls, st.tokens}
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
	return state{ls, st.tokens}
}

func (st state) without(i int) state {
	return state{slices.Delete(slices.Clone(st.leases), i, i+1), st.tokens}
}

func equal(a, b any) bool {
	x, y := a.(state), b.(state)
	if !slices.Equal(x.leases, y.leases) || len(x.tokens) != len(y.tokens) {
		return false
	}
	for k, v := range x.tokens {
		if y.tokens[k] != v {
			return false
		}
	}
	return true
}

func (st state) String() string {
	var b strings.Builder
	for _, l := range st.leases {
		hi := "?"
		if l.hi != Never {
			hi = ms(l.hi)
		}
		fmt.Fprintf(&b, "k%d/o%d×%d [%s, %s] ", l.key, l.owner, l.weight, ms(l.lo), hi)
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
	if op.Kind == Crash {
		return "crash: every lease lost"
	}
	s := fmt.Sprintf("%s g%d k%d o%d", op.Kind, op.Group, op.Key, op.Owner)
	if op.Kind == Acquire {
		s += fmt.Sprintf(" ×%d max %d", op.Weight, op.Max)
		if op.Parent > 0 {
			s += fmt.Sprintf(" parent %d", op.Parent)
		}
	}
	switch {
	case res.Unknown:
		return s + " → unknown"
	case op.Kind == Acquire && res.Granted && res.Token != 0:
		return fmt.Sprintf("%s → granted, token %d", s, res.Token)
	case op.Kind == Acquire && res.Granted:
		return s + " → granted"
	case op.Kind == Acquire:
		return s + " → refused"
	case op.Kind == Renew && res.Lost:
		return s + " → lost"
	}
	return s + " → ok"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
