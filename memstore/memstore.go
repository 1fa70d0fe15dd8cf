// Package memstore is keycap's in-process store: the default, with nothing to
// install. Its pools live in this process's memory, so its caps hold within
// one process only; use redisstore (or pgstore) when several processes must
// share them.
//
// The store is split into 256 shards by pool, each with its own lock, so
// goroutines working on different pools seldom contend. Leases expire by the
// store's monotonic clock. Pools with no live lease are reclaimed as the shard
// they live in is used, at most one sweep per shard per second, so memory
// follows the pools in use, not every key ever seen.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/internal/coarse"
	"github.com/keycap/keycap/internal/testhook"
	"github.com/keycap/keycap/store"
)

const shards = 256

// sweepEvery is how often, at most, a shard drops its idle pools.
const sweepEvery = time.Second

// Store is an in-process keycap store. The zero value is not usable; call New.
type Store struct {
	store.Unsupported // asynchronous releases, partitions: not here

	clock func() time.Duration // monotonic, precise: leases, lines, pauses, paces, marks
	// judge is a cheaper clock that may lag clock but is never ahead: it
	// may judge whether something has expired (a late answer only keeps
	// it longer), never set when something expires.
	judge  func() time.Duration
	shards [shards]shard
	hub    hub
	ov     overrides
	tokens atomic.Uint64 // the last fencing token granted
}

type shard struct {
	mu        sync.Mutex
	pools     map[store.PoolID]*pool
	marks     map[store.PoolID]mark
	pauses    map[store.PoolID]time.Duration // pause end
	rates     map[store.PoolID]time.Duration // GCRA theoretical arrival time
	parents   map[store.PoolID]*parent
	totals    map[store.PoolID]*total
	lastSweep time.Duration

	// The pool used last: an acquire and its release find it with one map
	// lookup between them.
	lastID   store.PoolID
	lastPool *pool
	_        [128 - 88]byte // keep shards on separate cache lines
}

type mark struct{ start, expires time.Duration }

// pool holds the live leases of one pool. Limits are small (1 to a few
// dozen), so a slice scanned in full beats any index.
type pool struct {
	leases []lease
	line   []ticket // the wait line, oldest first (store.Lines)
	max    int      // the max of the last call, which fills the line on a release
	extra  int      // slots of weighted leases beyond one each: held = len(leases)+extra
}

// ticket is a place in a pool's line.
type ticket struct {
	owner   store.Owner
	expires time.Duration
	claim   time.Duration
	weight  int
	seq     uint64 // arrival in the parent's lines
}

type lease struct {
	owner   store.Owner
	expires time.Duration
	weight  int // 0 and 1: one slot
}

// slots returns the slots the lease takes.
func (l *lease) slots() int { return max(l.weight, 1) }

// An Option configures a Store.
type Option struct{ apply func(*Store) }

// withClock replaces the store's clock, a monotonic duration since an
// arbitrary origin, for tests that move time by hand (internal/testhook).
func withClock(now func() time.Duration) Option {
	return Option{func(s *Store) { s.clock, s.judge = now, now }}
}

func init() { testhook.MemstoreClock = func(now func() time.Duration) any { return withClock(now) } }

// New returns an empty store.
//
// Leases are timed by the precise monotonic clock, read once a call: a
// lease never lives shorter than its TTL, whatever the process's load. (A
// coarse clock, refreshed every millisecond by a goroutine, saved the read —
// 25–30 ns on a VM's kvm-clock — but lagged by several milliseconds when
// the process was starved of CPU, and a lease timed by it ended early by
// as much: internal/safety's checker found it.) A pinned slot (Limiter.Do)
// never expires, so its acquire reads the coarse clock, only to judge the
// others' expiries.
func New(opts ...Option) *Store {
	s := &Store{clock: coarse.Precise, judge: coarse.Now}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(s)
		}
	}
	for i := range s.shards {
		s.shards[i].pools = make(map[store.PoolID]*pool)
		s.shards[i].marks = make(map[store.PoolID]mark)
		s.shards[i].pauses = make(map[store.PoolID]time.Duration)
		s.shards[i].rates = make(map[store.PoolID]time.Duration)
		s.shards[i].parents = make(map[store.PoolID]*parent)
		s.shards[i].totals = make(map[store.PoolID]*total)
	}
	return s
}

var _ store.Store = (*Store)(nil)

// features is what memstore does: everything but asynchronous releases and
// partitions, in this process (no call waits on anything but a shard's
// lock, so a Limiter gives them no deadline).
const features = store.Lines | store.Notifications | store.Shares | store.Pinned | store.Members |
	store.Marks | store.Pauses | store.Paces | store.Inspection | store.Overrides | store.InProcess | store.Fences |
	store.Totals

// Features implements store.Store.
func (s *Store) Features() store.Features { return features }

func (s *Store) shard(p store.PoolID) *shard { return &s.shards[p[15]] }

// find returns pool p, or nil. The caller holds sh.mu.
func (sh *shard) find(p store.PoolID) *pool {
	if sh.lastPool != nil && sh.lastID == p {
		return sh.lastPool
	}
	pl := sh.pools[p]
	if pl != nil {
		sh.lastID, sh.lastPool = p, pl
	}
	return pl
}

// pool returns pool p, made if missing. The caller holds sh.mu.
func (sh *shard) pool(p store.PoolID) *pool {
	if pl := sh.find(p); pl != nil {
		return pl
	}
	pl := &pool{}
	sh.pools[p] = pl
	sh.lastID, sh.lastPool = p, pl
	return pl
}

// Acquire implements store.Store. A pinned slot is held until Release;
// InspectPools reports its TTL as its Expires. It never blocks and ignores
// ctx.
func (s *Store) Acquire(_ context.Context, p store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	switch {
	case !d.Plain():
		var t *store.Ticket
		if d.Line.TTL > 0 {
			t = &d.Line
		}
		return s.acquireShared(demand{d, p, owner}, t), nil
	case d.Line.TTL > 0:
		return s.queue(p, owner, d.Max, d.TTL, d.Line, d.Fence), nil
	}
	ok, token := s.acquire(p, owner, d.Max, d.TTL, d.Pinned, d.Fence)
	return store.Grant{Granted: ok, Token: token}, nil
}

// token returns the fencing token of a grant (0 when ok is false or fence
// is not asked for). The caller holds the lock of the pool granted: tokens
// come from one counter of the store, so that they grow within each pool in
// the order of its grants.
func (s *Store) token(ok, fence bool) uint64 {
	if !ok || !fence {
		return 0
	}
	return s.tokens.Add(1)
}

// Release implements store.Store. It never blocks and ignores ctx.
func (s *Store) Release(_ context.Context, p store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	switch {
	case !d.Plain():
		return s.releaseShared(demand{d, p, owner}, leave), nil
	case leave:
		s.dequeue(p, owner)
	default:
		s.release(p, owner)
	}
	return false, nil
}

// demand is a Demand with the pool and the owner it is made for.
type demand struct {
	store.Demand
	Pool  store.PoolID
	Owner store.Owner
}

// pinned starts the expiries of pinned leases: pinned+ttl is never reached
// (the clock would need 146 years), and tells InspectPools the ttl to show.
const pinned = time.Duration(1 << 62)

// acquire takes a slot of pool p for owner, for ttl or pinned, with a
// fencing token when fence asks for one.
func (s *Store) acquire(p store.PoolID, owner store.Owner, max int, ttl time.Duration, pin, fence bool) (bool, uint64) {
	var now, expires time.Duration
	if pin {
		now, expires = s.judge(), pinned+min(ttl, store.MaxTTL) // no overflow
	} else {
		now = s.clock()
		expires = now + ttl
	}
	sh := s.shard(p)
	sh.mu.Lock()
	sh.maybeSweep(now)
	pl := sh.pool(p)
	if pin && len(pl.line) > 0 {
		now = s.clock() // the slots handed to the line are timed from it
	}
	ok, granted := pl.acquire(owner, 1, max, now, expires)
	token := s.token(ok, fence)
	sh.mu.Unlock()
	if granted != nil {
		s.hub.notify(p, granted)
	}
	return ok, token
}

// release frees owner's plain slot of pool p.
func (s *Store) release(p store.PoolID, owner store.Owner) {
	sh := s.shard(p)
	sh.mu.Lock()
	var granted []store.Owner
	if pl := sh.find(p); pl != nil {
		if i := pl.find(owner); i >= 0 {
			pl.remove(i)
		}
		if len(pl.line) > 0 { // only then is the clock read
			now := s.clock()
			pl.expire(now)
			granted = pl.fill(now)
		}
	}
	sh.mu.Unlock()
	if granted != nil {
		s.hub.notify(p, granted)
	}
}

// queue is acquire for a caller that waits in p's line when refused.
func (s *Store) queue(p store.PoolID, owner store.Owner, max int, ttl time.Duration, t store.Ticket, fence bool) store.Grant {
	now := s.clock()
	sh := s.shard(p)
	sh.mu.Lock()
	sh.maybeSweep(now)
	pl := sh.pool(p)
	ok, granted := pl.acquire(owner, 1, max, now, now+ttl)
	ahead := 0
	if ok {
		pl.dequeue(owner)
	} else {
		ahead = pl.queue(ticket{owner: owner, expires: now + t.TTL, claim: t.Claim, weight: 1})
	}
	token := s.token(ok, fence)
	sh.mu.Unlock()
	s.hub.notify(p, granted)
	return store.Grant{Granted: ok, Ahead: ahead, Token: token}
}

// dequeue takes owner out of p's line, and frees a slot handed to it.
func (s *Store) dequeue(p store.PoolID, owner store.Owner) {
	sh := s.shard(p)
	sh.mu.Lock()
	var granted []store.Owner
	if pl := sh.pools[p]; pl != nil {
		pl.dequeue(owner)
		if i := pl.find(owner); i >= 0 {
			pl.remove(i)
		}
		if len(pl.line) > 0 {
			now := s.clock()
			pl.expire(now)
			granted = pl.fill(now)
		}
	}
	sh.mu.Unlock()
	s.hub.notify(p, granted)
}

// Notify implements store.Store, in-process: fn runs in the goroutine
// whose call handed the slot, after the store's lock is released.
func (s *Store) Notify(_ context.Context, p store.PoolID, fn func([]store.Owner)) (func(), error) {
	return s.hub.watch(p, fn), nil
}

// Renew implements store.Store. It never blocks and ignores ctx.
func (s *Store) Renew(_ context.Context, batch []store.Renewal) error {
	now := s.clock()
	for i := range batch {
		r := &batch[i]
		if r.Parent != (store.PoolID{}) {
			s.renewKid(r, now)
			continue
		}
		sh := s.shard(r.Pool)
		sh.mu.Lock()
		r.Lost = true
		if pl := sh.pools[r.Pool]; pl != nil {
			if j := pl.find(r.Owner); j >= 0 {
				switch e := pl.leases[j].expires; {
				case e >= pinned: // held until Release
					r.Lost = false
				case e > now:
					pl.leases[j].expires = now + r.TTL
					r.Lost = false
				default:
					pl.remove(j)
				}
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Mark implements store.Store. It never blocks and ignores ctx.
func (s *Store) Mark(_ context.Context, id store.PoolID, ttl time.Duration) (time.Duration, bool, error) {
	now := s.clock()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(now)
	if m, ok := sh.marks[id]; ok && m.expires > now {
		return now - m.start, false, nil
	}
	sh.marks[id] = mark{start: now, expires: now + ttl}
	return 0, true, nil
}

// Pause implements store.Store. It never blocks and ignores ctx.
func (s *Store) Pause(_ context.Context, id store.PoolID, d time.Duration) (time.Duration, error) {
	now := s.clock()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(now)
	end := max(sh.pauses[id], now+d)
	if end > now {
		sh.pauses[id] = end
	}
	return max(end-now, 0), nil
}

// Paused implements store.Store. It never blocks and ignores ctx.
func (s *Store) Paused(_ context.Context, id store.PoolID) (time.Duration, error) {
	now := s.clock()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return max(sh.pauses[id]-now, 0), nil
}

// Pace implements store.Store with GCRA, the algorithm go-redis/redis_rate
// runs on Redis. It never blocks and ignores ctx.
func (s *Store) Pace(_ context.Context, id store.PoolID, rate store.Rate) (time.Duration, error) {
	if !rate.Valid() {
		return 0, fmt.Errorf("memstore: invalid rate %+v: events, period and burst must be positive", rate)
	}
	now := s.clock()
	emission := rate.Period / time.Duration(rate.Events)
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(now)
	tat := max(sh.rates[id], now)
	next := tat + emission
	if allowAt := next - emission*time.Duration(rate.Burst); now < allowAt {
		return allowAt - now, nil
	}
	sh.rates[id] = next
	return 0, nil
}

// Sync implements store.Store. It never blocks and ignores ctx.
func (s *Store) Sync(_ context.Context, node store.NodeID, ttl time.Duration, batch []store.SyncPool) error {
	now := s.clock()
	for i := range batch {
		sp := &batch[i]
		sh := s.shard(sp.Pool)
		sh.mu.Lock()
		pl := sh.pools[sp.Pool]
		if pl == nil {
			pl = &pool{}
			sh.pools[sp.Pool] = pl
		}
		sp.Removed = pl.sync(node, sp.Members, now, now+ttl)
		sh.mu.Unlock()
	}
	return nil
}

// Pools returns the number of pools the store keeps in memory, idle ones not
// yet reclaimed included.
func (s *Store) Pools() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.pools)
		sh.mu.Unlock()
	}
	return n
}

// acquire drops the expired leases and hands freed slots to the line, then
// grants owner a lease of weight slots until expires if it already holds one
// (a slot handed to its ticket included) or the pool has room and no line.
// It returns the owners of the tickets it handed a slot.
func (pl *pool) acquire(owner store.Owner, weight, max int, now, expires time.Duration) (bool, []store.Owner) {
	if pl.max != max {
		pl.max = max
	}
	if len(pl.leases) == 0 && len(pl.line) == 0 { // an idle pool: the commonest case
		if weight > max {
			return false, nil
		}
		pl.add(lease{owner: owner, expires: expires, weight: weight})
		return true, nil
	}
	held := pl.expireFind(owner, now) // one pass: the common path
	var granted []store.Owner
	if len(pl.line) > 0 {
		granted = pl.fill(now)
		held = pl.find(owner)
	}
	switch {
	case held >= 0:
		pl.leases[held].expires = expires
		return true, granted
	case len(pl.line) == 0 && pl.held()+weight <= max:
		pl.add(lease{owner: owner, expires: expires, weight: weight})
		return true, granted
	}
	return false, granted
}

// held returns the slots the pool's leases take.
func (pl *pool) held() int { return len(pl.leases) + pl.extra }

// add adds a lease.
func (pl *pool) add(l lease) {
	pl.leases = append(pl.leases, l)
	pl.extra += l.slots() - 1
}

// expireFind drops the expired leases and returns the index of owner's, or
// -1.
func (pl *pool) expireFind(owner store.Owner, now time.Duration) int {
	held := -1
	for i := range pl.leases {
		l := &pl.leases[i]
		if l.expires <= now {
			return pl.expireFindSlow(owner, now, i)
		}
		if l.owner == owner {
			held = i
		}
	}
	return held // nothing expired: nothing moved
}

// expireFindSlow is expireFind from the first expired lease, at i, on.
func (pl *pool) expireFindSlow(owner store.Owner, now time.Duration, i int) int {
	live := pl.leases[:i]
	held := -1
	for j, l := range pl.leases[:i] {
		if l.owner == owner {
			held = j
		}
	}
	for _, l := range pl.leases[i:] {
		switch {
		case l.expires <= now:
			pl.extra -= l.slots() - 1
		case l.owner == owner:
			held = len(live)
			live = append(live, l)
		default:
			live = append(live, l)
		}
	}
	clear(pl.leases[len(live):])
	pl.leases = live
	return held
}

// expire drops the expired leases and returns the slots they took.
func (pl *pool) expire(now time.Duration) int {
	before := pl.held()
	pl.expireFind(store.Owner{}, now)
	return before - pl.held()
}

// fill hands the pool's free slots to the tickets at the head of its line,
// dropping the expired tickets it meets, and returns their owners. A ticket
// of weight n waits at the head until n slots are free. The caller has
// dropped the expired leases.
func (pl *pool) fill(now time.Duration) []store.Owner {
	if len(pl.line) == 0 {
		return nil
	}
	var granted []store.Owner
	n := 0
	for n < len(pl.line) {
		t := pl.line[n]
		if t.expires <= now || pl.find(t.owner) >= 0 {
			n++
			continue
		}
		if pl.held()+max(t.weight, 1) > pl.max {
			break
		}
		n++
		pl.add(lease{owner: t.owner, expires: now + t.claim, weight: t.weight})
		granted = append(granted, t.owner)
	}
	if n > 0 {
		clear(pl.line[:n])
		pl.line = slices.Delete(pl.line, 0, n)
	}
	return granted
}

// queue gives t.owner the ticket t, keeping its place if it has one, and
// returns how many tickets wait before it.
func (pl *pool) queue(t ticket) int {
	for i := range pl.line {
		if pl.line[i].owner == t.owner {
			pl.line[i].expires, pl.line[i].claim, pl.line[i].weight = t.expires, t.claim, t.weight
			return i
		}
	}
	pl.line = append(pl.line, t)
	return len(pl.line) - 1
}

// dequeue takes owner's ticket out of the line.
func (pl *pool) dequeue(owner store.Owner) {
	for i := range pl.line {
		if pl.line[i].owner == owner {
			pl.line = slices.Delete(pl.line, i, i+1)
			return
		}
	}
}

// sync drops expired leases and node's leases not in live, then renews (or
// adds back) every live lease to expire at expires. It returns how many of
// node's leases it dropped.
func (pl *pool) sync(node store.NodeID, live []store.Owner, now, expires time.Duration) int {
	kept := pl.leases[:0]
	removed := 0
	for _, l := range pl.leases {
		switch {
		case l.expires <= now:
			pl.extra -= l.slots() - 1
		case [8]byte(l.owner[:8]) == node && !slices.Contains(live, l.owner):
			pl.extra -= l.slots() - 1
			removed++
		default:
			kept = append(kept, l)
		}
	}
	clear(pl.leases[len(kept):])
	pl.leases = kept
	for _, o := range live {
		if i := pl.find(o); i >= 0 {
			pl.leases[i].expires = expires
		} else {
			pl.add(lease{owner: o, expires: expires})
		}
	}
	return removed
}

func (pl *pool) find(owner store.Owner) int {
	for i := range pl.leases {
		if pl.leases[i].owner == owner {
			return i
		}
	}
	return -1
}

func (pl *pool) remove(i int) {
	pl.extra -= pl.leases[i].slots() - 1
	last := len(pl.leases) - 1
	pl.leases[i] = pl.leases[last]
	pl.leases = pl.leases[:last]
}

// maybeSweep drops the shard's pools that hold no live lease, and its expired
// marks, pauses and paces, at most once per sweepEvery. The caller holds sh.mu.
func (sh *shard) maybeSweep(now time.Duration) {
	if now-sh.lastSweep < sweepEvery {
		return
	}
	sh.lastSweep = now
	sh.lastPool = nil
	for id, pl := range sh.pools {
		live := false
		for _, t := range pl.line {
			if t.expires > now {
				live = true
				break
			}
		}
		for _, l := range pl.leases {
			if l.expires > now {
				live = true
				break
			}
		}
		if !live {
			delete(sh.pools, id)
		}
	}
	for id, pa := range sh.parents {
		if !pa.live(now) {
			delete(sh.parents, id)
		}
	}
	for id, m := range sh.marks {
		if m.expires <= now {
			delete(sh.marks, id)
		}
	}
	for id, end := range sh.pauses {
		if end <= now {
			delete(sh.pauses, id)
		}
	}
	for id, tat := range sh.rates {
		if tat <= now {
			delete(sh.rates, id)
		}
	}
	for id, t := range sh.totals {
		if !t.live(now) {
			delete(sh.totals, id)
		}
	}
}

// hub delivers the store's handoffs to the watchers of each pool.
type hub struct {
	mu    sync.Mutex
	n     atomic.Int32 // watchers: 0 makes notify free
	pools map[store.PoolID][]*watcher
}

type watcher struct{ fn func([]store.Owner) }

func (h *hub) watch(p store.PoolID, fn func([]store.Owner)) func() {
	w := &watcher{fn: fn}
	h.mu.Lock()
	if h.pools == nil {
		h.pools = make(map[store.PoolID][]*watcher)
	}
	h.pools[p] = append(h.pools[p], w)
	h.n.Add(1)
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			list := h.pools[p]
			if i := slices.Index(list, w); i >= 0 {
				list = slices.Delete(list, i, i+1)
				h.n.Add(-1)
			}
			if len(list) == 0 {
				delete(h.pools, p)
			} else {
				h.pools[p] = list
			}
		})
	}
}

func (h *hub) notify(p store.PoolID, granted []store.Owner) {
	if len(granted) == 0 || h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	list := slices.Clone(h.pools[p])
	h.mu.Unlock()
	for _, w := range list {
		w.fn(granted)
	}
}
