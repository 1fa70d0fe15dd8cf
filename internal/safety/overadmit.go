package safety

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Overadmission is what holders were certainly granted at once beyond a
// cap (a key's max or a parent's total), measured from a history: the
// most slots over, the longest stretch of time with any over, and the
// time over in all.
type Overadmission struct {
	Slots   int
	Longest time.Duration
	Total   time.Duration
	// Witness is the grants certainly held when the longest stretch began,
	// in the order of their calls: what to read first when it is not zero.
	Witness []porcupine.Operation
}

// Overadmitted measures h's overadmission. A holder certainly holds a
// lease from its grant's answer until the first of: its release's call,
// a renewal that found it lost, a call of unknown outcome, and the
// earliest the store may expire it (the call of its last grant or renewal
// plus the TTL, less b.Early). On a store that loses nothing it is zero:
// a nonzero figure is what a crash or a failover let through.
func Overadmitted(h []porcupine.Operation, b Bounds) Overadmission {
	type span struct {
		from, to time.Duration
		op       Op
		weight   int // what the lease takes: a grant extends a lease the owner held, of its weight
		grant    porcupine.Operation
		latest   time.Duration // the latest the lease can expire, renewals included
	}
	type who struct{ group, key, owner int }
	ops := slices.Clone(h)
	slices.SortFunc(ops, func(x, y porcupine.Operation) int { return int(x.Call - y.Call) })
	open := map[who]*span{}
	// A grant may extend a lease its owner held unseen, keeping that
	// lease's weight: a slot handed to its ticket, the lease of an acquire
	// of unknown outcome, a lease a release or renewal of unknown outcome
	// may have left, or one past its earliest expiry but not its latest.
	// The lighter weight is the one certain.
	// A ticket can bring its owner a handed slot until it expires and the
	// claim window after (never, for a wait of unknown outcome).
	type ticket struct {
		weight int
		until  time.Duration
	}
	tickets, unsure := map[who]ticket{}, map[who]int{}
	// weight is the lighter of w and what k may hold unseen at at.
	weight := func(k who, w int, at time.Duration) int {
		if t, ok := tickets[k]; ok && at <= t.until {
			w = min(w, t.weight)
		}
		if x, ok := unsure[k]; ok {
			w = min(w, x)
		}
		return w
	}
	var spans []span
	end := func(k who, at time.Duration) {
		if s := open[k]; s != nil {
			s.to = min(s.to, at)
			if s.to > s.from {
				spans = append(spans, *s)
			}
			delete(open, k)
		}
	}
	for _, o := range ops {
		in, res := o.Input.(Op), o.Output.(Result)
		if in.Kind == Crash {
			continue
		}
		k := who{in.Group, in.Key, in.Owner}
		switch {
		case res.Unknown && in.Kind == Acquire:
			unsure[k] = weight(k, in.Weight, in.Call)
			if in.Line {
				tickets[k] = ticket{weight(k, in.Weight, in.Call), Never}
			}
		case res.Unknown && (in.Kind == Release || in.Kind == Renew):
			if s := open[k]; s != nil {
				unsure[k] = weight(k, s.weight, in.Call)
			}
		case in.Kind == Acquire && in.Line && !res.Granted:
			tickets[k] = ticket{weight(k, in.Weight, in.Call), in.Return + b.Ticket + b.Late + b.Claim}
		case in.Kind == Release:
			delete(unsure, k)
			if in.Line {
				delete(tickets, k)
			}
		}
		switch {
		case res.Unknown:
			end(k, in.Call)
		case in.Kind == Renew && !res.Lost:
			// Renewed: the lease was alive all along (a lost lease is never
			// resurrected), and now lives a TTL more.
			if s := open[k]; s != nil {
				s.to = max(s.to, in.Call+b.TTL-b.Early)
				s.latest = max(s.latest, in.Return+b.TTL+b.Late)
			}
		case in.Kind == Acquire && res.Granted:
			// Granted again: an extension when the lease was certainly
			// alive at the answer; otherwise it may have lapsed, and this
			// is a new grant.
			w := weight(k, in.Weight, in.Call)
			if s := open[k]; s != nil {
				if in.Return <= s.to {
					s.to = max(s.to, in.Call+b.TTL-b.Early)
					s.latest = max(s.latest, in.Return+b.TTL+b.Late)
					continue
				}
				// The lease may have lapsed before the grant took effect
				// (a call that outlived it: its client stopped, say): held
				// for certain until then, and again from the answer.
				if in.Call <= s.latest {
					w = min(w, s.weight)
				}
			}
			end(k, Never)
			open[k] = &span{from: in.Return, to: in.Call + b.TTL - b.Early, op: in, weight: w, grant: o, latest: in.Return + b.TTL + b.Late}
			if in.Line {
				delete(tickets, k) // a grant takes the ticket out of the line
			}
		case in.Kind == Renew, in.Kind == Release:
			end(k, in.Call)
		}
	}
	for k := range open {
		end(k, Never)
	}
	// Sweep each pool and each parent.
	type edge struct {
		at   time.Duration
		w    int
		span int
	}
	type capped struct {
		edges []edge
		max   int
	}
	caps := map[[2]int]*capped{}
	add := func(key [2]int, max int, i int) {
		c := caps[key]
		if c == nil {
			c = &capped{max: max}
			caps[key] = c
		}
		s := spans[i]
		c.edges = append(c.edges, edge{s.from, s.weight, i}, edge{s.to, -s.weight, i})
	}
	for i, s := range spans {
		add([2]int{s.op.Group, s.op.Key}, s.op.Max, i)
		if s.op.Parent > 0 {
			add([2]int{s.op.Group, -1}, s.op.Parent, i)
		}
	}
	var out Overadmission
	for _, c := range caps {
		slices.SortFunc(c.edges, func(x, y edge) int {
			if x.at != y.at {
				return int(x.at - y.at)
			}
			return x.w - y.w // ends before starts at the same instant
		})
		n := 0
		var since time.Duration
		held := map[int]bool{}
		var witness []porcupine.Operation
		for _, e := range c.edges {
			before := n > c.max
			n += e.w
			if e.w > 0 {
				held[e.span] = true
			} else {
				delete(held, e.span)
			}
			switch after := n > c.max; {
			case !before && after:
				since, witness = e.at, witness[:0]
				for i := range held {
					witness = append(witness, spans[i].grant)
				}
			case before && !after:
				d := e.at - since
				out.Total += d
				if d > out.Longest {
					out.Longest = d
					out.Witness = slices.Clone(witness)
				}
			}
			out.Slots = max(out.Slots, n-c.max)
		}
	}
	slices.SortFunc(out.Witness, func(x, y porcupine.Operation) int { return int(x.Call - y.Call) })
	return out
}

// Explain describes the longest stretch over a cap: the witness's grants,
// and every operation of h on their pools from a TTL before the first
// grant's call to a TTL after the last's.
func (o Overadmission) Explain(h []porcupine.Operation, b Bounds) string {
	if len(o.Witness) == 0 {
		return "nothing over a cap"
	}
	first, last := o.Witness[0].Input.(Op), o.Witness[len(o.Witness)-1].Input.(Op)
	from, to := first.Call-b.TTL, last.Call+b.TTL
	pools := map[[2]int]bool{}
	for _, w := range o.Witness {
		in := w.Input.(Op)
		pools[[2]int{in.Group, in.Key}] = true
	}
	ops := slices.Clone(h)
	slices.SortFunc(ops, func(x, y porcupine.Operation) int { return int(x.Call - y.Call) })
	var s strings.Builder
	fmt.Fprintf(&s, "up to %d slots over a cap; the longest stretch, %s, began with these held:\n", o.Slots, o.Longest)
	for _, w := range o.Witness {
		fmt.Fprintf(&s, "  %s\n", entry(w))
	}
	s.WriteString("their pools' operations around it:\n")
	for _, op := range ops {
		in := op.Input.(Op)
		if (pools[[2]int{in.Group, in.Key}] || in.Kind == Crash) && in.Call >= from && in.Call <= to {
			fmt.Fprintf(&s, "  %s\n", entry(op))
		}
	}
	return s.String()
}

// entry describes one operation of a history with its client and interval.
func entry(op porcupine.Operation) string {
	in := op.Input.(Op)
	ret := "…"
	if in.Return != Never {
		ret = ms(in.Return)
	}
	return fmt.Sprintf("client %d [%s, %s] %s", op.ClientId, ms(in.Call), ret, describe(op.Input, op.Output))
}
