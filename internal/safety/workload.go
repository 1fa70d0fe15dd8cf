package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// Config is one run of the workload.
type Config struct {
	Seed     int64
	Name     string        // unique per run: the pools' names start with it, so runs share no keys
	Clients  int           // each with a store client of its own; default 4
	Duration time.Duration // default 2 s
	Timeout  time.Duration // of every call: past it, the outcome is unknown; default 1 s
	// Bounds hold the run's timings — Bounds.TTL of every lease (default
	// 300 ms); Bounds.Ticket and Bounds.Claim of the acquires that wait in
	// a line (default 150 ms, claimed within 60 ms) — and the model's
	// allowances: the one place the workload and the checker read them
	// (Check(cfg.Seed, h, cfg.Bounds, …)).
	Bounds Bounds
	// NotSent, if set, reports whether a call's error proves that the
	// call never reached the server (it could not connect): such a call
	// had no effect, and is left out of the history rather than recorded
	// as of unknown outcome. A server that is down answers every call so,
	// and as many unknown outcomes would make the checker branch past its
	// time.
	NotSent func(error) bool
}

func (c *Config) defaults() {
	if c.Clients == 0 {
		c.Clients = 4
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Second
	}
	if c.Bounds.TTL == 0 {
		c.Bounds.TTL = 300 * time.Millisecond
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	if c.Bounds.Ticket == 0 {
		c.Bounds.Ticket = 150 * time.Millisecond
	}
	if c.Bounds.Claim == 0 {
		c.Bounds.Claim = 60 * time.Millisecond
	}
	if c.Bounds.Keep == 0 {
		c.Bounds.Keep = 60 * time.Millisecond
	}
}

// Store is what the workload calls: a store.Store, or a client process's
// store (Process).
type Store interface {
	Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error)
	Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (kept bool, err error)
	Renew(ctx context.Context, batch []store.Renewal) error
}

// group is a partition of the workload: a plain pool (no parent), or a
// parent and its keys' pools.
type group struct {
	parent store.PoolID // zero: none
	total  int
	keep   bool // the parent keeps freed slots for their key (Bounds.Keep)
	keys   []store.PoolID
	max    []int
	shares []int // each key's share of the parent; nil: 1 each
}

// share returns key's share of g's parent.
func (g group) share(key int) int {
	if g.shares == nil {
		return 1
	}
	return g.shares[key]
}

// groups are the workload's: a lock (max 1), a pool of 3 with weights, a
// parent of 3 shared by three keys of max 2, a parent of 2 shared by two
// that keeps a slot its key frees for the key's next caller (WithKeep),
// its first key with 4 times the other's share: a key is kept its slot
// only when it would be served first, which a greater share makes
// common.
func groups(name string) []group {
	pool := func(g, k int) store.PoolID {
		return store.PoolOf(byte(keycap.FamilyApp), name, fmt.Sprintf("g%d/k%d", g, k))
	}
	parent := func(g, total int) store.PoolID {
		return keycap.MustParent(fmt.Sprintf("%s/g%d", name, g), total).Pool()
	}
	return []group{
		{keys: []store.PoolID{pool(0, 0)}, max: []int{1}},
		{keys: []store.PoolID{pool(1, 0)}, max: []int{3}},
		{parent: parent(2, 3), total: 3, keys: []store.PoolID{pool(2, 0), pool(2, 1), pool(2, 2)}, max: []int{2, 2, 2}},
		{parent: parent(3, 2), total: 2, keep: true, keys: []store.PoolID{pool(3, 0), pool(3, 1)}, max: []int{2, 2}, shares: []int{4, 1}},
	}
}

// held is what an owner of the workload holds.
type held struct {
	op Op // the acquire that granted it
}

// Faults is what a fault injector running beside a workload may record.
type Faults struct {
	clock  func() time.Duration
	record func(int, Op, Result)
}

// Now reads the run's clock.
func (f *Faults) Now() time.Duration { return f.clock() }

// Crashed records that the store lost every lease at some point between
// since (a Now read before the fault began) and now.
func (f *Faults) Crashed(since time.Duration) {
	f.record(-1, Op{Kind: Crash, Group: -1, Call: since, Return: f.clock()}, Result{})
}

// Run drives cfg's workload through the stores that open returns, one per
// client, and returns the history it recorded. open is called on the
// caller's goroutine before the clients start, and faults, if set, runs on
// it while they run (so either may fail the caller's test), and must
// return once its ctx ends.
func Run(ctx context.Context, cfg Config, open func() Store, faults func(ctx context.Context, f *Faults)) []porcupine.Operation {
	cfg.defaults()
	gs := groups(cfg.Name)
	start := time.Now()
	clock := func() time.Duration { return time.Since(start) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
	)
	record := func(client int, op Op, res Result) {
		ret := int64(op.Return)
		if res.Unknown {
			op.Return, ret = Never, int64(Never)
		}
		id := client
		if id < 0 {
			id = cfg.Clients // the fault injector's row
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: id, Input: op, Call: int64(op.Call), Output: res, Return: ret})
		mu.Unlock()
	}
	// Every client's store opened here, on the caller's goroutine: open
	// may fail its test (t.Fatal), which no other goroutine may do.
	stores := make([]Store, cfg.Clients)
	for c := range stores {
		stores[c] = open()
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &client{id: c, cfg: cfg, gs: gs, s: stores[c], clock: clock, record: record,
				rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(c)))}
			cl.run(runCtx)
		}()
	}
	if faults != nil {
		faults(runCtx, &Faults{clock: clock, record: record})
	}
	wg.Wait()
	return history
}

// client is one client of the workload, with three owners of its own: an
// owner's calls are never concurrent.
type client struct {
	id     int
	cfg    Config
	gs     []group
	s      Store
	clock  func() time.Duration
	record func(int, Op, Result)
	rng    *rand.Rand
}

func (c *client) run(ctx context.Context) {
	const owners = 3
	var ids [owners]store.Owner
	var holds [owners]*held
	var waits [owners]*Op // the acquire an owner waits with in a line
	// The weight an owner asks of a key, drawn once a run: an owner may
	// hold a lease it does not know of (a slot handed to a ticket it
	// walked away from, a lease a release of unknown outcome left), which
	// its next acquire extends with the lease's weight — the weight its
	// release must name (store.Store.Release).
	weights := map[[3]int]int{}
	weight := func(o, g, k int) int {
		w, ok := weights[[3]int{o, g, k}]
		if !ok {
			w = 1
			if c.gs[g].max[k] > 1 && c.rng.IntN(3) == 0 {
				w = 2
			}
			weights[[3]int{o, g, k}] = w
		}
		return w
	}
	for i := range ids {
		ids[i] = store.NewOwner()
	}
	// poll acquires again with the owner's ticket: the owner holds the
	// slot, waits on, or (an unknown outcome) leaves the line.
	poll := func(o int) {
		op := *waits[o]
		switch res := c.acquire(ctx, ids[o], op); {
		case res.Unknown:
			c.release(ctx, ids[o], op, true)
			waits[o] = nil
		case res.Granted:
			holds[o], waits[o] = &held{op: op}, nil
		}
	}
	for ctx.Err() == nil {
		o := c.rng.IntN(owners)
		owner := c.id*owners + o
		h := holds[o]
		switch r := c.rng.Float64(); {
		case waits[o] != nil:
			switch {
			case r < 0.6:
				poll(o)
			case r < 0.75:
				c.release(ctx, ids[o], *waits[o], true) // gives up waiting
				waits[o] = nil
			case r < 0.85:
				waits[o] = nil // walks away: its ticket expires
			default:
				// The waiter pauses past its ticket, then comes back.
				sleep(ctx, c.cfg.Bounds.Ticket+time.Duration(c.rng.Int64N(int64(c.cfg.Bounds.Ticket/2))))
				poll(o)
			}
		case h == nil:
			g := c.rng.IntN(len(c.gs))
			k := c.rng.IntN(len(c.gs[g].keys))
			op := Op{Kind: Acquire, Group: g, Key: k, Owner: owner, Weight: weight(o, g, k), Max: c.gs[g].max[k], Parent: c.gs[g].total, Share: c.gs[g].share(k), Keep: c.gs[g].keep, Fence: c.rng.IntN(2) == 0}
			// Half the acquires wait in their key's line.
			op.Line = c.rng.IntN(2) == 0
			res := c.acquire(ctx, ids[o], op)
			switch {
			case res.Unknown:
				c.release(ctx, ids[o], op, op.Line) // it may hold it: give it back
			case res.Granted:
				holds[o] = &held{op: op}
			case op.Line:
				waits[o] = &op
			}
		case r < 0.45:
			c.release(ctx, ids[o], h.op, false)
			holds[o] = nil
		case r < 0.8:
			if res := c.renew(ctx, ids[o], h.op); res.Lost {
				holds[o] = nil
			}
		case r < 0.9:
			// Granted again, without waiting: a refusal (the lease lapsed,
			// the pool full) leaves no ticket the client does not track.
			again := h.op
			again.Fence, again.Line = c.rng.IntN(2) == 0, false
			if res := c.acquire(ctx, ids[o], again); res.Unknown {
				c.release(ctx, ids[o], h.op, false)
				holds[o] = nil
			}
		default:
			// The holder pauses past its lease, then renews: it finds the
			// lease lost, unless it renewed in time.
			sleep(ctx, c.cfg.Bounds.TTL+time.Duration(c.rng.Int64N(int64(c.cfg.Bounds.TTL/2))))
			if res := c.renew(ctx, ids[o], h.op); res.Lost || res.Unknown {
				c.release(ctx, ids[o], h.op, false)
				holds[o] = nil
			}
		}
		sleep(ctx, time.Duration(c.rng.Int64N(int64(3*time.Millisecond))))
	}
	// Every lease is given back and every line left, after the run's clock
	// stops mattering.
	for o := range ids {
		switch {
		case holds[o] != nil:
			c.release(context.Background(), ids[o], holds[o].op, false)
		case waits[o] != nil:
			c.release(context.Background(), ids[o], *waits[o], true)
		}
	}
}

func (c *client) demand(op Op) store.Demand {
	d := store.Demand{Max: op.Max, TTL: c.cfg.Bounds.TTL, Fence: op.Fence}
	if op.Kind == Acquire && op.Line {
		d.Line = store.Ticket{TTL: c.cfg.Bounds.Ticket, Claim: c.cfg.Bounds.Claim}
	}
	if op.Weight > 1 || op.Parent > 0 {
		g := c.gs[op.Group]
		d.Shared = &store.Shared{Weight: op.Weight, Parent: store.Parent{Pool: g.parent, Max: g.total, Share: g.share(op.Key)}}
		if g.keep {
			d.Shared.Parent.Keep = c.cfg.Bounds.Keep
		}
	}
	return d
}

func (c *client) acquire(ctx context.Context, owner store.Owner, op Op) Result {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	op.Call = c.clock()
	g, err := c.s.Acquire(cctx, c.gs[op.Group].keys[op.Key], owner, c.demand(op))
	op.Return = c.clock()
	if c.notSent(err) {
		return Result{} // nothing happened: not granted, and what was held still is
	}
	res := Result{Unknown: err != nil, Granted: g.Granted, Token: g.Token, Ahead: g.Ahead}
	c.record(c.id, op, res)
	return res
}

// release gives back acq's lease; with leave, the owner also leaves the
// line.
func (c *client) release(ctx context.Context, owner store.Owner, acq Op, leave bool) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	op := acq
	op.Kind, op.Fence, op.Line = Release, false, leave
	op.Call = c.clock()
	kept, err := c.s.Release(cctx, c.gs[op.Group].keys[op.Key], owner, c.demand(op), leave)
	op.Return = c.clock()
	if c.notSent(err) {
		return // the lease stays until its TTL
	}
	c.record(c.id, op, Result{Unknown: err != nil, Kept: kept && err == nil})
}

func (c *client) renew(ctx context.Context, owner store.Owner, acq Op) Result {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	defer cancel()
	op := acq
	op.Kind, op.Fence, op.Line = Renew, false, false
	g := c.gs[op.Group]
	batch := []store.Renewal{{Pool: g.keys[op.Key], Owner: owner, TTL: c.cfg.Bounds.TTL, Weight: op.Weight, Parent: g.parent}}
	op.Call = c.clock()
	err := c.s.Renew(cctx, batch)
	op.Return = c.clock()
	if c.notSent(err) || err == nil && c.notSent(batch[0].Err) {
		return Result{Unknown: true} // unrecorded: the holder gives the lease up, which then expires
	}
	res := Result{Unknown: err != nil || batch[0].Err != nil, Lost: batch[0].Lost}
	c.record(c.id, op, res)
	return res
}

// notSent reports whether err proves that a call never reached the
// server (Config.NotSent).
func (c *client) notSent(err error) bool {
	return err != nil && c.cfg.NotSent != nil && c.cfg.NotSent(err)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
