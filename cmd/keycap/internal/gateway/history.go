package gateway

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/store"
)

// The history behind the admin page (docs/gateway.md, "The incident
// page"): what this gateway saw over the last HistoryWindow, per limit (a
// route's pool and one key source: never two limits merged) and per route,
// in memory whose bound does not depend on traffic:
//
//   - per limit and per route, one step of counters per HistoryStep (180
//     steps: 5.8 KB per limit, 4.3 KB per route);
//   - per limit, a table of the keys it refused or whose slots it released,
//     with their refusals and slot-time per minute: at most
//     admin_api.history_keys keys (default DefaultHistoryKeys, 204 bytes
//     each, measured in BENCHMARKS.md); a new key when the table is
//     full takes the place of the least active of a few sampled ones, as
//     Redis's LFU eviction does, so a flood of new keys cannot push out
//     the key that is refused all the time.
//
// It learns from the Limiter's events (an Observer) and the route's answers
// (routeHandler.finish): one lock per limit per event, no allocation but a key's
// first entry.

const (
	// HistoryWindow is how far back the page's charts and key tables look.
	HistoryWindow = 15 * time.Minute
	// HistoryStep is one point of a chart.
	HistoryStep = 5 * time.Second
	// DefaultHistoryKeys is how many keys each limit's table holds by
	// default (admin_api.history_keys).
	DefaultHistoryKeys = 10000

	historySteps = int(HistoryWindow / HistoryStep)
	keySlot      = time.Minute
	keySlots     = int(HistoryWindow / keySlot)
	// maxHistoryTables bounds the limits and routes a history follows:
	// they come from the configuration, but nothing may grow without end.
	maxHistoryTables = 1000
	// evictSample is how many keys a full table compares to choose the one
	// a new key replaces.
	evictSample = 8
)

// limitID names one limit: a route's pool and the source of its keys
// (header:X-User, ip, …), or a Pusher app (source "user").
type limitID struct {
	family keycap.Family
	name   string
	shadow bool
	source string
}

// history is the gateway's memory for the page.
type history struct {
	on      atomic.Bool
	maxKeys atomic.Int64
	// now is the time of the events: time.Now read at most every
	// clockTick by a ticker while the history is on (a clock read per
	// event costs more than the rest of the event on some machines).
	// Tests set another.
	now func() time.Time

	// The limits and routes followed, copied on write: read on every
	// event without a lock, written once per limit or route.
	limits atomic.Pointer[map[limitID]*limitHistory]
	routes atomic.Pointer[map[string]*routeHistory]
	mu     sync.Mutex // serialises writers of the maps, and the ticker

	clock     atomic.Int64 // Unix nanoseconds, set by the ticker
	stopClock func()
}

// clockTick is how stale the time of an event may be.
const clockTick = 100 * time.Millisecond

func newHistory() *history {
	h := &history{}
	h.now = func() time.Time { return time.Unix(0, h.clock.Load()) }
	h.reset()
	return h
}

// reset forgets every limit and route.
func (h *history) reset() {
	h.limits.Store(&map[limitID]*limitHistory{})
	h.routes.Store(&map[string]*routeHistory{})
}

// configure turns the history on (keys: the keys per limit) or off (keys <
// 0), from a configuration being applied. Off forgets everything.
func (h *history) configure(keys int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if keys < 0 {
		if h.on.Swap(false) {
			h.stopClock()
			h.reset()
		}
		return
	}
	h.maxKeys.Store(int64(keys))
	h.trim(keys)
	if !h.on.Load() {
		h.clock.Store(time.Now().UnixNano()) // before any event can read it
		h.on.Store(true)
		t := time.NewTicker(clockTick)
		done := make(chan struct{})
		go func() {
			for {
				select {
				case now := <-t.C:
					h.clock.Store(now.UnixNano())
				case <-done:
					return
				}
			}
		}()
		h.stopClock = func() { t.Stop(); close(done) }
	}
}

// trim brings every table within a new bound: a reload that lowers
// history_keys frees the memory at once (0: no key at all).
func (h *history) trim(keys int) {
	minute := h.now().Unix() / 60
	for _, lh := range *h.limits.Load() {
		lh.mu.Lock()
		if keys == 0 {
			clear(lh.keys)
		}
		for len(lh.keys) > keys {
			lh.evict(minute)
		}
		lh.mu.Unlock()
	}
}

// close stops the history's clock.
func (h *history) close() { h.configure(-1) }

// stepOf is the number of the step t falls in.
func stepOf(t time.Time) int64 { return t.UnixNano() / int64(HistoryStep) }

// limitStep is one step of a limit's chart.
type limitStep struct {
	at       int64 // the step's number (stepOf); 0: never written
	start    int32 // slots this gateway held when the step began
	peak     int32 // the most it held at once during the step
	acquired uint32
	refused  uint32
	waited   int64 // nanoseconds of the waits that ended in the step
}

// limitHistory is one limit's steps and key table.
type limitHistory struct {
	mu      sync.Mutex
	inUse   int32 // slots this gateway holds now
	steps   [historySteps]limitStep
	keys    map[string]*keyHistory
	dropped int64 // keys evicted to stay within bounds
}

// keyHistory is one key of a limit: its refusals and the slot-time of its
// holds that ended, per minute of the window. Slot i holds the minute m,
// last-keySlots < m <= last, with m%keySlots == i.
type keyHistory struct {
	pool        store.PoolID
	last        int64 // the last minute written (Unix minutes)
	lastRefused int64 // Unix nanoseconds; 0: never
	refused     [keySlots]uint32
	heldMs      [keySlots]uint32
}

// step returns the step of now, starting it (the older one in its place
// forgotten) if need be. Called with lh.mu held.
func (lh *limitHistory) step(now int64) *limitStep {
	s := &lh.steps[now%int64(historySteps)]
	if s.at != now {
		*s = limitStep{at: now, start: lh.inUse, peak: lh.inUse}
	}
	return s
}

// advance moves k to minute m, clearing the slots of the minutes skipped.
func (k *keyHistory) advance(m int64) {
	if m <= k.last {
		return
	}
	if m-k.last >= int64(keySlots) {
		k.refused, k.heldMs = [keySlots]uint32{}, [keySlots]uint32{}
	} else {
		for x := k.last + 1; x <= m; x++ {
			k.refused[x%int64(keySlots)], k.heldMs[x%int64(keySlots)] = 0, 0
		}
	}
	k.last = m
}

// window returns k's refusals and slot-time within the window that ends
// with minute m.
func (k *keyHistory) window(m int64) (refused int, held time.Duration) {
	for x := max(k.last-int64(keySlots)+1, m-int64(keySlots)+1); x <= min(k.last, m); x++ {
		refused += int(k.refused[x%int64(keySlots)])
		held += time.Duration(k.heldMs[x%int64(keySlots)]) * time.Millisecond
	}
	return refused, held
}

// key returns the entry of key in lh's table, making room for it if need
// be; nil when the table holds no keys. Called with lh.mu held.
func (lh *limitHistory) key(l keycap.Limit, minute int64, maxKeys int) *keyHistory {
	k := lh.keys[l.Key()]
	if k != nil {
		k.advance(minute)
		return k
	}
	if maxKeys <= 0 {
		return nil
	}
	if len(lh.keys) >= maxKeys {
		lh.evict(minute)
	}
	k = &keyHistory{pool: l.Pool(), last: minute}
	lh.keys[l.Key()] = k
	return k
}

// evict drops the least active of a few keys of the table (map iteration
// starts at random): one idle for the whole window first, else the one
// with the fewest refusals, then the least slot-time.
func (lh *limitHistory) evict(minute int64) {
	var victim string
	var worst struct {
		idle    bool
		refused int
		held    time.Duration
	}
	n := 0
	for key, k := range lh.keys {
		r, h := k.window(minute)
		idle := minute-k.last >= int64(keySlots)
		if n == 0 || idle && !worst.idle || idle == worst.idle && (r < worst.refused || r == worst.refused && h < worst.held) {
			victim = key
			worst.idle, worst.refused, worst.held = idle, r, h
		}
		if n++; n == evictSample || idle {
			break
		}
	}
	delete(lh.keys, victim)
	lh.dropped++
}

// limitOf returns the history of l's limit, nil when it follows no more.
func (h *history) limitOf(l keycap.Limit) *limitHistory {
	id := limitID{family: l.Family(), name: l.Name(), shadow: l.Shadow(), source: "user"}
	if id.family == keycap.FamilyApp {
		id.source = strings.TrimSuffix(keySourceOf(l.Key()), " absent")
	}
	if lh := (*h.limits.Load())[id]; lh != nil {
		return lh
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.limits.Load()
	if lh := old[id]; lh != nil || len(old) >= maxHistoryTables {
		return lh
	}
	lh := &limitHistory{keys: map[string]*keyHistory{}}
	m := make(map[limitID]*limitHistory, len(old)+1)
	maps.Copy(m, old)
	m[id] = lh
	h.limits.Store(&m)
	return lh
}

// Observe records a slot event of an HTTP route's or a Pusher app's limit.
func (h *history) Observe(e keycap.Event) {
	if !h.on.Load() {
		return
	}
	switch e.Kind {
	case keycap.SlotAcquired, keycap.LimitExceeded, keycap.SlotReleased:
	default:
		return
	}
	if e.Family != keycap.FamilyApp && e.Family != keycap.FamilyConn {
		return
	}
	lh := h.limitOf(e.Limit)
	if lh == nil {
		return
	}
	now := h.now()
	step, minute := stepOf(now), now.Unix()/60
	weight := int32(max(e.Limit.Spec().Weight, 1))
	maxKeys := int(h.maxKeys.Load())
	lh.mu.Lock()
	s := lh.step(step)
	switch e.Kind {
	case keycap.SlotAcquired:
		lh.inUse += weight
		s.peak = max(s.peak, lh.inUse)
		s.acquired++
		s.waited += int64(e.Waited)
	case keycap.LimitExceeded:
		s.refused++
		s.waited += int64(e.Waited)
		if k := lh.key(e.Limit, minute, maxKeys); k != nil {
			k.refused[minute%int64(keySlots)]++
			k.lastRefused = now.UnixNano()
		}
	case keycap.SlotReleased:
		// A slot taken before the history was on: not counted.
		lh.inUse = max(lh.inUse-weight, 0)
		if k := lh.key(e.Limit, minute, maxKeys); k != nil {
			i := minute % int64(keySlots)
			k.heldMs[i] = uint32(min(int64(k.heldMs[i])+e.Held.Milliseconds()*int64(weight), 1<<32-1))
		}
	}
	lh.mu.Unlock()
}

// routeStep is one step of a route's chart.
type routeStep struct {
	at       int64
	requests uint32
	refused  uint32 // 429: a limit refused
	failed   uint32 // 502, 503, 504 of the gateway: upstream down or slow, store down (failing closed)
	upstream uint32 // 5xx of the upstream
}

type routeHistory struct {
	mu    sync.Mutex
	steps [historySteps]routeStep
}

// request records a finished request of a route.
func (h *history) request(q *request, outcome string) {
	if !h.on.Load() {
		return
	}
	rh := (*h.routes.Load())[q.route]
	if rh == nil {
		if rh = h.routeOf(q.route); rh == nil {
			return
		}
	}
	now := stepOf(h.now())
	rh.mu.Lock()
	s := &rh.steps[now%int64(historySteps)]
	if s.at != now {
		*s = routeStep{at: now}
	}
	s.requests++
	switch outcome {
	case outcomeRefused:
		s.refused++
	case outcomeUpstreamError, outcomeUpstreamTimeout, outcomeStoreDown:
		s.failed++
	case outcomeUpstream:
		if q.status >= 500 {
			s.upstream++
		}
	}
	rh.mu.Unlock()
}

// routeOf adds a route to follow, nil when it follows no more.
func (h *history) routeOf(name string) *routeHistory {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := *h.routes.Load()
	if rh := old[name]; rh != nil || len(old) >= maxHistoryTables {
		return rh
	}
	rh := &routeHistory{}
	m := make(map[string]*routeHistory, len(old)+1)
	maps.Copy(m, old)
	m[name] = rh
	h.routes.Store(&m)
	return rh
}

// History is what GET /admin/api/history returns and the page charts: this
// gateway's last HistoryWindow, one point per Step seconds, the last point
// the step now running.
type History struct {
	Node   string         `json:"node"`
	First  int64          `json:"first_step"` // the first point's step: Unix time / Step
	Step   float64        `json:"step_seconds"`
	Limits []LimitHistory `json:"limits"`
	Routes []RouteHistory `json:"routes"`
	Off    bool           `json:"off,omitempty"` // admin_api.history_keys: -1
}

// LimitHistory is one limit's history: the slots this gateway held (the
// most at once in each step), the requests waiting (the mean of each step,
// counted when their waits end), its refusals, and its keys.
type LimitHistory struct {
	Family  string    `json:"family"` // app (a route's pool) or conn (a Pusher app)
	Pool    string    `json:"pool"`
	Source  string    `json:"source"` // the key's source: header:X-User, claim:sub, ip, … ("user" for an app)
	Shadow  bool      `json:"shadow"`
	InUse   []int     `json:"in_use"`
	Waiting []float64 `json:"waiting"`
	Refused []int     `json:"refused"`
	// The window's totals, and its keys: those matching the query, in its
	// order, at most its n. KeysSeen counts every key in the table within
	// the window; KeysDropped those the table let go since it began.
	RefusedTotal int          `json:"refused_total"`
	KeysSeen     int          `json:"keys_seen"`
	KeysDropped  int64        `json:"keys_dropped"`
	Keys         []KeyHistory `json:"keys"`
}

// KeyHistory is one key of a limit over the window.
type KeyHistory struct {
	Limit       string     `json:"limit,omitempty"` // in a key's report: its limit's source, and "shadow"
	Key         string     `json:"key"`             // in clear unless admin_api.hash_keys, else "#" and the pool's hash
	Refused     int        `json:"refused"`
	LastRefused *time.Time `json:"last_refused,omitempty"`
	SlotSeconds float64    `json:"slot_seconds"` // the slot-time of its holds that ended in the window
}

// RouteHistory is one route's requests per step.
type RouteHistory struct {
	Route    string `json:"route"`
	Requests []int  `json:"requests"`
	Refused  []int  `json:"refused"`  // 429
	Failed   []int  `json:"failed"`   // 502, 503, 504 of the gateway
	Upstream []int  `json:"upstream"` // 5xx of the upstream
}

// HistoryQuery picks and orders the keys of a History.
type HistoryQuery struct {
	Route  string // only the limits and route of this route's pool
	Search string // only keys holding this text (case-insensitive)
	Sort   string // "refused" (default), "last" (last refused), "slot" (slot-time) or "key"
	N      int    // keys per limit; 0: 10; at most 1000
	Hash   bool   // keys as their pools' hashes
	pools  map[string]bool
}

// Sorts are HistoryQuery.Sort's values.
var Sorts = []string{"refused", "last", "slot", "key"}

// view reads the history for q.
func (h *history) view(q HistoryQuery) History {
	now := h.now()
	last, minute := stepOf(now), now.Unix()/60
	out := History{First: last - int64(historySteps) + 1, Step: HistoryStep.Seconds(), Off: !h.on.Load(),
		Limits: []LimitHistory{}, Routes: []RouteHistory{}}
	n := q.N
	if n <= 0 {
		n = 10
	}
	n = min(n, 1000)
	search := strings.ToLower(q.Search)
	for id, lh := range *h.limits.Load() {
		if q.pools != nil && (!q.pools[id.name] || id.family != keycap.FamilyApp) {
			continue
		}
		v := LimitHistory{Family: id.family.String(), Pool: id.name, Source: id.source, Shadow: id.shadow,
			InUse: make([]int, historySteps), Waiting: make([]float64, historySteps), Refused: make([]int, historySteps)}
		lh.mu.Lock()
		// From now back: a step no event wrote held what the next one
		// started with.
		level := lh.inUse
		for i := historySteps - 1; i >= 0; i-- {
			at := out.First + int64(i)
			s := &lh.steps[at%int64(historySteps)]
			if s.at != at {
				v.InUse[i] = int(level)
				continue
			}
			v.InUse[i], level = int(s.peak), s.start
			v.Waiting[i] = float64(s.waited) / float64(HistoryStep)
			v.Refused[i] = int(s.refused)
			v.RefusedTotal += int(s.refused)
		}
		best := top[keyRank]{n: n, cmp: keyOrder(q.Sort)}
		for key, k := range lh.keys {
			if minute-k.last >= int64(keySlots) {
				delete(lh.keys, key) // out of the window: its place is free
				continue
			}
			v.KeysSeen++
			if search != "" {
				shown := key
				if q.Hash {
					shown = "#" + k.pool.String()
				}
				if !strings.Contains(strings.ToLower(shown), search) {
					continue
				}
			}
			r, held := k.window(minute)
			kr := keyRank{key: key, pool: k.pool, refused: r, held: held}
			if q.Hash {
				kr.key = "#" + k.pool.String() // ordered as shown: never by the key in clear
			}
			if k.lastRefused != 0 && now.UnixNano()-k.lastRefused < int64(HistoryWindow) {
				kr.last = k.lastRefused
			}
			best.push(kr)
		}
		v.KeysDropped = lh.dropped
		lh.mu.Unlock()
		for _, kr := range best.sorted() {
			v.Keys = append(v.Keys, kr.history())
		}
		out.Limits = append(out.Limits, v)
	}
	for name, rh := range *h.routes.Load() {
		if q.Route != "" && name != q.Route {
			continue
		}
		v := RouteHistory{Route: name, Requests: make([]int, historySteps), Refused: make([]int, historySteps),
			Failed: make([]int, historySteps), Upstream: make([]int, historySteps)}
		rh.mu.Lock()
		for i := range historySteps {
			at := out.First + int64(i)
			if s := &rh.steps[at%int64(historySteps)]; s.at == at {
				v.Requests[i], v.Refused[i], v.Failed[i], v.Upstream[i] = int(s.requests), int(s.refused), int(s.failed), int(s.upstream)
			}
		}
		rh.mu.Unlock()
		out.Routes = append(out.Routes, v)
	}
	sortHistory(&out)
	return out
}

// keyRank is a key of a table, as the orders compare them.
type keyRank struct {
	key     string
	pool    store.PoolID
	refused int
	held    time.Duration
	last    int64 // Unix nanoseconds of its last refusal in the window; 0: none
}

func (k keyRank) history() KeyHistory {
	kh := KeyHistory{Key: k.key, Refused: k.refused, SlotSeconds: k.held.Seconds()}
	if k.last != 0 {
		t := time.Unix(0, k.last).UTC()
		kh.LastRefused = &t
	}
	return kh
}

// keyOrder compares keys by sort (Sorts), ties by key: negative when a
// comes first.
func keyOrder(sort string) func(a, b keyRank) int {
	return func(a, b keyRank) int {
		var c int
		switch sort {
		case "last":
			c = cmp.Compare(b.last, a.last)
		case "slot":
			c = cmp.Compare(b.held, a.held)
		case "key":
		default:
			c = cmp.Or(cmp.Compare(b.refused, a.refused), cmp.Compare(b.last, a.last))
		}
		return cmp.Or(c, strings.Compare(a.key, b.key))
	}
}

// sortKeys orders keys by sort (Sorts), ties by key.
func sortKeys(keys []KeyHistory, sort string) {
	rank := func(k KeyHistory) keyRank {
		r := keyRank{key: k.Key, refused: k.Refused, held: time.Duration(k.SlotSeconds * float64(time.Second))}
		if k.LastRefused != nil {
			r.last = k.LastRefused.UnixNano()
		}
		return r
	}
	order := keyOrder(sort)
	slices.SortFunc(keys, func(a, b KeyHistory) int { return order(rank(a), rank(b)) })
}

// top keeps the n first of the items pushed in the order cmp gives, in a
// heap whose root is the last of them: O(log n) a push, so a page of ten
// keys out of 10,000 costs no sort of 10,000.
type top[T any] struct {
	n   int
	cmp func(a, b T) int
	h   []T
}

func (t *top[T]) push(x T) {
	if len(t.h) < t.n {
		t.h = append(t.h, x)
		for i := len(t.h) - 1; i > 0; {
			p := (i - 1) / 2
			if t.cmp(t.h[p], t.h[i]) >= 0 {
				break
			}
			t.h[p], t.h[i] = t.h[i], t.h[p]
			i = p
		}
		return
	}
	if t.n == 0 || t.cmp(x, t.h[0]) >= 0 {
		return
	}
	t.h[0] = x
	for i := 0; ; {
		w := 2*i + 1
		if w >= len(t.h) {
			break
		}
		if r := w + 1; r < len(t.h) && t.cmp(t.h[r], t.h[w]) > 0 {
			w = r
		}
		if t.cmp(t.h[w], t.h[i]) <= 0 {
			break
		}
		t.h[w], t.h[i] = t.h[i], t.h[w]
		i = w
	}
}

// sorted returns the items kept, in order.
func (t *top[T]) sorted() []T {
	slices.SortFunc(t.h, t.cmp)
	return t.h
}

// sortHistory puts limits and routes in a stable order.
func sortHistory(h *History) {
	slices.SortFunc(h.Limits, func(a, b LimitHistory) int {
		return cmp.Or(strings.Compare(a.Family, b.Family), strings.Compare(a.Pool, b.Pool),
			cmp.Compare(boolInt(a.Shadow), boolInt(b.Shadow)), strings.Compare(a.Source, b.Source))
	})
	slices.SortFunc(h.Routes, func(a, b RouteHistory) int { return strings.Compare(a.Route, b.Route) })
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// MergeHistories adds up the histories of several gateways of one store
// (keycap inspect -admin URL,URL…): their series step by step (aligned on
// the newest's window), their keys by name. n bounds the keys per limit
// again, in sort's order.
func MergeHistories(sort string, n int, hs ...History) History {
	if len(hs) == 0 {
		return History{Limits: []LimitHistory{}, Routes: []RouteHistory{}}
	}
	out := History{First: hs[0].First, Step: hs[0].Step, Limits: []LimitHistory{}, Routes: []RouteHistory{}}
	var nodes []string
	for _, h := range hs {
		out.First = max(out.First, h.First)
		nodes = append(nodes, h.Node)
	}
	out.Node = strings.Join(nodes, ", ")
	type mergeID struct {
		family, pool, source string
		shadow               bool
	}
	limits := map[mergeID]*LimitHistory{}
	keys := map[mergeID]map[string]*KeyHistory{}
	routes := map[string]*RouteHistory{}
	for _, h := range hs {
		shift := int(out.First - h.First) // h's point i is the merged point i-shift
		for _, l := range h.Limits {
			id := mergeID{family: l.Family, pool: l.Pool, source: l.Source, shadow: l.Shadow}
			m := limits[id]
			if m == nil {
				m = &LimitHistory{Family: l.Family, Pool: l.Pool, Source: l.Source, Shadow: l.Shadow,
					InUse: make([]int, historySteps), Waiting: make([]float64, historySteps), Refused: make([]int, historySteps)}
				limits[id], keys[id] = m, map[string]*KeyHistory{}
			}
			for i := shift; i < min(len(l.InUse), len(l.Waiting), len(l.Refused)) && i-shift < historySteps; i++ {
				m.InUse[i-shift] += l.InUse[i]
				m.Waiting[i-shift] += l.Waiting[i]
				m.Refused[i-shift] += l.Refused[i]
				m.RefusedTotal += l.Refused[i]
			}
			m.KeysSeen += l.KeysSeen
			m.KeysDropped += l.KeysDropped
			for _, k := range l.Keys {
				mk := keys[id][k.Key]
				if mk == nil {
					mk = &KeyHistory{Key: k.Key}
					keys[id][k.Key] = mk
				}
				mk.Refused += k.Refused
				mk.SlotSeconds += k.SlotSeconds
				if k.LastRefused != nil && (mk.LastRefused == nil || k.LastRefused.After(*mk.LastRefused)) {
					mk.LastRefused = k.LastRefused
				}
			}
		}
		for _, r := range h.Routes {
			m := routes[r.Route]
			if m == nil {
				m = &RouteHistory{Route: r.Route, Requests: make([]int, historySteps), Refused: make([]int, historySteps),
					Failed: make([]int, historySteps), Upstream: make([]int, historySteps)}
				routes[r.Route] = m
			}
			for i := shift; i < min(len(r.Requests), len(r.Refused), len(r.Failed), len(r.Upstream)) && i-shift < historySteps; i++ {
				m.Requests[i-shift] += r.Requests[i]
				m.Refused[i-shift] += r.Refused[i]
				m.Failed[i-shift] += r.Failed[i]
				m.Upstream[i-shift] += r.Upstream[i]
			}
		}
	}
	for id, m := range limits {
		for _, k := range keys[id] {
			m.Keys = append(m.Keys, *k)
		}
		sortKeys(m.Keys, sort)
		if n > 0 {
			m.Keys = m.Keys[:min(len(m.Keys), n)]
		}
		out.Limits = append(out.Limits, *m)
	}
	for _, r := range routes {
		out.Routes = append(out.Routes, *r)
	}
	sortHistory(&out)
	return out
}

// keysOf returns the keys of a route's pool this gateway remembers, by
// their pools: the page can then name the keys that only other gateways
// hold right now.
func (h *history) keysOf(pool string, shadow bool) map[store.PoolID]string {
	out := map[store.PoolID]string{}
	if !h.on.Load() {
		return out
	}
	for id, lh := range *h.limits.Load() {
		if id.family != keycap.FamilyApp || id.name != pool || id.shadow != shadow {
			continue
		}
		lh.mu.Lock()
		for key, k := range lh.keys {
			out[k.pool] = key
		}
		lh.mu.Unlock()
	}
	return out
}

// recentRate returns a limit's refusals per second over about the last
// 10 seconds: the step running and the two before it. ok is false when the
// history is off.
func (h *history) recentRate(pool string, shadow bool, source string) (perSecond float64, ok bool) {
	if !h.on.Load() {
		return 0, false
	}
	lh := (*h.limits.Load())[limitID{family: keycap.FamilyApp, name: pool, shadow: shadow, source: source}]
	if lh == nil {
		return 0, true
	}
	now := h.now()
	step := stepOf(now)
	elapsed := time.Duration(now.UnixNano()-step*int64(HistoryStep)) + 2*HistoryStep
	n := 0
	lh.mu.Lock()
	for at := step - 2; at <= step; at++ {
		if s := &lh.steps[at%int64(historySteps)]; s.at == at {
			n += int(s.refused)
		}
	}
	lh.mu.Unlock()
	return float64(n) / elapsed.Seconds(), true
}

// keyOfPool returns the key of a limit named name (of family) whose pool
// (or shadow pool) is id, if a table holds it.
func (h *history) keyOfPool(family keycap.Family, name string, id store.PoolID) (string, bool) {
	for lid, lh := range *h.limits.Load() {
		if lid.family != family || lid.name != name {
			continue
		}
		lh.mu.Lock()
		for key, k := range lh.keys {
			if k.pool == id {
				lh.mu.Unlock()
				return key, true
			}
		}
		lh.mu.Unlock()
	}
	return "", false
}

// keyRows returns the history of one key in every limit named name (of
// family) that has it: one row per limit, its source (and "shadow") in
// Limit, the key shown as its pool's hash with hash.
func (h *history) keyRows(family keycap.Family, name, key string, hash bool) []KeyHistory {
	now := h.now()
	minute := now.Unix() / 60
	var out []KeyHistory
	for id, lh := range *h.limits.Load() {
		if id.family != family || id.name != name {
			continue
		}
		lh.mu.Lock()
		if k := lh.keys[key]; k != nil && minute-k.last < int64(keySlots) {
			r, held := k.window(minute)
			kr := keyRank{key: key, refused: r, held: held}
			if hash {
				kr.key = "#" + k.pool.String()
			}
			if k.lastRefused != 0 && now.UnixNano()-k.lastRefused < int64(HistoryWindow) {
				kr.last = k.lastRefused
			}
			row := kr.history()
			if row.Limit = id.source; id.shadow {
				row.Limit += " shadow"
			}
			out = append(out, row)
		}
		lh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b KeyHistory) int { return strings.Compare(a.Limit, b.Limit) })
	return out
}
