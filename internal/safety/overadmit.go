package safety

import (
	"slices"
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
	}
	type who struct{ group, key, owner int }
	ops := slices.Clone(h)
	slices.SortFunc(ops, func(x, y porcupine.Operation) int { return int(x.Call - y.Call) })
	open := map[who]*span{}
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
		case res.Unknown:
			end(k, in.Call)
		case in.Kind == Renew && !res.Lost:
			// Renewed: the lease was alive all along (a lost lease is never
			// resurrected), and now lives a TTL more.
			if s := open[k]; s != nil {
				s.to = max(s.to, in.Call+b.TTL-b.Early)
			}
		case in.Kind == Acquire && res.Granted:
			// Granted again: an extension when the lease was certainly
			// alive at the call; otherwise it may have lapsed, and this is
			// a new grant.
			if s := open[k]; s != nil && in.Call <= s.to {
				s.to = in.Call + b.TTL - b.Early
				continue
			}
			end(k, in.Call)
			open[k] = &span{from: in.Return, to: in.Call + b.TTL - b.Early, op: in}
		case in.Kind == Renew, in.Kind == Release:
			end(k, in.Call)
		}
	}
	for k := range open {
		end(k, Never)
	}
	// Sweep each pool and each parent.
	type edge struct {
		at time.Duration
		w  int
	}
	type capped struct {
		edges []edge
		max   int
	}
	caps := map[[2]int]*capped{}
	add := func(key [2]int, max int, s span) {
		c := caps[key]
		if c == nil {
			c = &capped{max: max}
			caps[key] = c
		}
		c.edges = append(c.edges, edge{s.from, s.op.Weight}, edge{s.to, -s.op.Weight})
	}
	for _, s := range spans {
		add([2]int{s.op.Group, s.op.Key}, s.op.Max, s)
		if s.op.Parent > 0 {
			add([2]int{s.op.Group, -1}, s.op.Parent, s)
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
		for _, e := range c.edges {
			before := n > c.max
			n += e.w
			switch after := n > c.max; {
			case !before && after:
				since = e.at
			case before && !after:
				d := e.at - since
				out.Total += d
				out.Longest = max(out.Longest, d)
			}
			out.Slots = max(out.Slots, n-c.max)
		}
	}
	return out
}
