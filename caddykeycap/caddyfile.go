package caddykeycap

import (
	"math"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	keycap [<matcher>] [<name> <max> [<key>]] {
//		limit <name> [<max> [<key>]] {
//			key         <template>
//			max         <n>
//			empty_key   client_ip|refuse
//			wait        <duration>
//			ttl         <duration>
//			weight      <n>
//			parent      <name> <max> [{
//				adaptive       <floor> <ceiling>
//				interval       <duration>
//				tolerance      <x>
//				overloads_only
//				shadow
//			}]
//			share       <n>
//			minimum     <n>
//			fail_mode   open|closed
//			shadow
//			retry_after <duration>
//		}
//		store memory
//		store redis [<addr>] {
//			addr     <host:port>
//			username <user>
//			password <password>
//			db       <n>
//			tls
//			prefix   <prefix>
//			budget   <duration>
//		}
//		store cluster [<addr>...] { addrs <host:port>...; ... }
//		store sentinel [<addr>...] { addrs <host:port>...; master <name>; ... }
//	}
//
// The arguments after the directive are a limit of their own, the first. An
// error names the file and line of the token that is wrong.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		l, err := limitArgs(d, true)
		if err != nil {
			return err
		}
		h.Limits = append(h.Limits, l)
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "limit":
			if !d.NextArg() {
				return d.ArgErr()
			}
			l, err := limitArgs(d, false)
			if err != nil {
				return err
			}
			for nesting := d.Nesting(); d.NextBlock(nesting); {
				if err := limitOption(d, &l); err != nil {
					return err
				}
			}
			if l.Max == nil {
				return d.Errf("limit %q: max is required", l.Name)
			}
			h.Limits = append(h.Limits, l)
		case "store":
			if h.Store != nil {
				return d.Err("store given twice")
			}
			s, err := storeBlock(d)
			if err != nil {
				return err
			}
			h.Store = s
		default:
			return d.Errf("unknown option %q (want limit or store)", d.Val())
		}
	}
	if len(h.Limits) == 0 {
		return d.Err("keycap needs a limit: keycap <name> <max> [<key>], or a limit block")
	}
	return nil
}

// limitArgs reads "<name> [<max> [<key>]]", the cursor on the name. The
// directive's own arguments must give max; a limit block may give it inside.
func limitArgs(d *caddyfile.Dispenser, needMax bool) (LimitConfig, error) {
	l := LimitConfig{Name: d.Val()}
	args := d.RemainingArgs()
	if len(args) > 2 || needMax && len(args) == 0 {
		return l, d.ArgErr()
	}
	if len(args) > 0 {
		n, err := intArg(d, "max", args[0])
		if err != nil {
			return l, err
		}
		l.Max = &n
	}
	if len(args) > 1 {
		l.Key = args[1]
	}
	return l, nil
}

// limitOption reads one option of a limit block, the cursor on its name.
func limitOption(d *caddyfile.Dispenser, l *LimitConfig) error {
	opt := d.Val()
	switch opt {
	case "shadow":
		if d.NextArg() {
			return d.ArgErr()
		}
		l.Shadow = true
		return nil
	case "parent":
		var name, maxArg string
		if !d.AllArgs(&name, &maxArg) {
			return d.ArgErr()
		}
		n, err := intArg(d, "parent max", maxArg)
		if err != nil {
			return err
		}
		l.Parent = &ParentConfig{Name: name, Max: n}
		return parentBlock(d, l.Parent)
	}
	var v string
	if !d.AllArgs(&v) {
		return d.ArgErr()
	}
	var err error
	switch opt {
	case "key":
		l.Key = v
	case "empty_key":
		if v != EmptyKeyClientIP && v != EmptyKeyRefuse {
			return d.Errf("empty_key %q: must be %s or %s", v, EmptyKeyClientIP, EmptyKeyRefuse)
		}
		l.EmptyKey = v
	case "fail_mode":
		if v != "open" && v != "closed" {
			return d.Errf("fail_mode %q: must be open or closed", v)
		}
		l.FailMode = v
	case "max":
		var n int
		n, err = intArg(d, opt, v)
		l.Max = &n
	case "weight":
		l.Weight, err = intArg(d, opt, v)
	case "share":
		l.Share, err = intArg(d, opt, v)
	case "minimum":
		l.Minimum, err = intArg(d, opt, v)
	case "wait":
		err = durationArg(d, opt, v, &l.Wait)
	case "ttl":
		err = durationArg(d, opt, v, &l.TTL)
	case "retry_after":
		var ra caddy.Duration
		err = durationArg(d, opt, v, &ra)
		l.RetryAfter = &ra
	default:
		return d.Errf("limit %q: unknown option %q", l.Name, opt)
	}
	return err
}

// parentBlock reads the block that may follow "parent <name> <max>": the
// settings of an adaptive total. Every option but adaptive needs it.
func parentBlock(d *caddyfile.Dispenser, p *ParentConfig) error {
	a := &AdaptiveConfig{}
	var orphan error // an option given without adaptive, said at its line
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "adaptive":
			if p.Adaptive != nil {
				return d.Err("parent: adaptive given twice")
			}
			var floor, ceiling string
			if !d.AllArgs(&floor, &ceiling) {
				return d.ArgErr()
			}
			var err error
			if a.Floor, err = intArg(d, "adaptive floor", floor); err != nil {
				return err
			}
			if a.Ceiling, err = intArg(d, "adaptive ceiling", ceiling); err != nil {
				return err
			}
			p.Adaptive = a
			continue
		case "overloads_only", "shadow":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.OverloadsOnly = a.OverloadsOnly || opt == "overloads_only"
			a.Shadow = a.Shadow || opt == "shadow"
		case "interval":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			if err := durationArg(d, opt, v, &a.Interval); err != nil {
				return err
			}
		case "tolerance":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) { // JSON has neither
				return d.Errf("tolerance %q: not a number (such as 1.5)", v)
			}
			a.Tolerance = x
		default:
			return d.Errf("parent %q: unknown option %q (want adaptive, interval, tolerance, overloads_only or shadow)", p.Name, opt)
		}
		if orphan == nil {
			orphan = d.Errf("parent %q: %s needs adaptive <floor> <ceiling> in the parent's block", p.Name, opt)
		}
	}
	if p.Adaptive == nil && orphan != nil {
		return orphan
	}
	return nil
}

// storeBlock reads "store <type> [<addr>...] [{ ... }]", the cursor on store.
func storeBlock(d *caddyfile.Dispenser) (*StoreConfig, error) {
	s := &StoreConfig{}
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	s.Type = d.Val()
	switch s.Type {
	case StoreMemory, StoreRedis, StoreCluster, StoreSentinel:
	default:
		return nil, d.Errf("store type %q: must be memory, redis, cluster or sentinel", s.Type)
	}
	args := d.RemainingArgs()
	switch {
	case s.Type == StoreMemory && len(args) > 0, s.Type == StoreRedis && len(args) > 1:
		return nil, d.ArgErr()
	case s.Type == StoreRedis && len(args) == 1:
		s.Addr = args[0]
	default:
		s.Addrs = args
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if s.Type == StoreMemory {
			return nil, d.Errf("store memory takes no options (found %q)", opt)
		}
		switch opt {
		case "tls":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			s.TLS = true
			continue
		case "addrs":
			if s.Type == StoreRedis {
				return nil, d.Err("addrs: for cluster and sentinel; redis takes addr")
			}
			s.Addrs = append(s.Addrs, d.RemainingArgs()...)
			if len(s.Addrs) == 0 {
				return nil, d.ArgErr()
			}
			continue
		}
		var v string
		if !d.AllArgs(&v) {
			return nil, d.ArgErr()
		}
		var err error
		switch opt {
		case "addr":
			if s.Type != StoreRedis {
				return nil, d.Errf("addr: for redis; %s takes addrs", s.Type)
			}
			s.Addr = v
		case "master":
			if s.Type != StoreSentinel {
				return nil, d.Err("master: for sentinel only")
			}
			s.Master = v
		case "username":
			s.Username = v
		case "password":
			s.Password = v
		case "prefix":
			s.Prefix = v
		case "db":
			s.DB, err = intArg(d, opt, v)
		case "budget":
			err = durationArg(d, opt, v, &s.Budget)
		default:
			return nil, d.Errf("store %s: unknown option %q", s.Type, opt)
		}
		if err != nil {
			return nil, err
		}
	}
	// what can be checked before placeholders are expanded, with the line
	if err := s.check(false); err != nil {
		return nil, d.Err(err.Error())
	}
	return s, nil
}

func intArg(d *caddyfile.Dispenser, opt, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, d.Errf("%s %q: not a whole number", opt, v)
	}
	return n, nil
}

func durationArg(d *caddyfile.Dispenser, opt, v string, to *caddy.Duration) error {
	t, err := caddy.ParseDuration(v)
	if err != nil {
		return d.Errf("%s %q: not a duration (such as 500ms, 2s, 1m)", opt, v)
	}
	*to = caddy.Duration(t)
	return nil
}
