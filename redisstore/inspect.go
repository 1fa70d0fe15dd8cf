package redisstore

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

var (
	//go:embed inspect.lua
	inspectLua    string
	inspectScript = redis.NewScript(inspectLua)
)

// parentTag is the tag of every parent's pool (keycap.Parent): the
// parents' pools are all of one internal name. shadowParentTag is the tag
// of the shadows of parents, which shadow limits (keycap.Spec.Shadow) with
// a parent count in.
var (
	parentTag       = store.TagOf(store.Internal, "parent")
	shadowParentTag = store.TagOf(store.Internal|store.Shadow, "parent")
)

// isParentTag reports whether t is the tag of parents or of their shadows.
func isParentTag(t store.Tag) bool { return t == parentTag || t == shadowParentTag }

const (
	// scanBudget is the most SCAN calls one page makes: a page of a name
	// whose pools are few among many keys ends early, with a cursor,
	// rather than walk the whole keyspace in one call.
	scanBudget = 256
	// SCAN's COUNT, the keys Redis walks per call, matching or not, is ten
	// times the page size within these bounds. Redis walks them in one go
	// (one to two microseconds a key on a small machine), so the upper
	// bound is what keeps small the delay one SCAN adds to the decisions
	// queued behind it: in BenchmarkInspect, an inspector paging once a
	// second beside acquires and releases raised their p99 by 60–100 %
	// with 1000 keys a SCAN, by 5–45 % with 250.
	minScanCount = 100
	maxScanCount = 250
)

// InspectPools implements store.Store with SCAN, never KEYS: on a
// cluster, over every master in turn, ordered by the first slot each
// serves, so that a failover keeps the order. A page costs up to 256 SCANs
// of COUNT ten times the page size (100 to 250), one round trip each, then
// one pipelined round trip per node to read the pools found (a script per
// pool, and per parent, by Redis's clock); on a cluster whose slot ranges
// are not cached yet, one CLUSTER SLOTS more. It stops when the page is
// full, the keyspace walked, the SCANs spent or the context's deadline
// near: a page may hold fewer pools than asked, even none, and have a next
// one.
//
// The pools of keys with a parent (keycap.Spec.Parent) live in their
// parent's keys, so every page of the paging that SCAN brings to a parent
// reads it (parents are few); a parent's own pool is listed, with every
// key's leases and tickets, when its tag is the one asked.
//
// The cursor names the node (by its first slot) and its SCAN cursor and,
// when a page had no room for every key one SCAN found, those keys (at
// most 32 beyond the page's size: a SCAN that finds more runs again with a
// smaller COUNT) and the first entry not shown; it carries the tag and a
// checksum, so that a cursor of another tag, or a forged one, is refused.
// A pool that changes during the paging may be shown twice, as SCAN may
// return a key twice.
func (s *Store) InspectPools(ctx context.Context, q store.PageQuery) (store.PoolPage, error) {
	childTag := q.Tag.String()
	if isParentTag(q.Tag) {
		childTag = "" // the parents' own pools: every key's leases
	}
	base := s.prefix + "keycap:"
	pg := pager[store.PoolState]{
		kind:  'p',
		match: globEscape(base) + "[sl][hil]*:{" + globTags(q.Tag, parentTag, shadowParentTag) + "*",
		classify: func(key string) (f found, ok bool) {
			typ, id, ok := splitKey(key, base)
			if !ok {
				return f, false
			}
			f.at = entryKey(id, 0)
			switch {
			case typ == "slots" && id.Tag() == q.Tag:
			case typ == "line" && id.Tag() == q.Tag:
				f.secondary = true
			case typ == "share" && isParentTag(id.Tag()):
				f.container = true
			case typ == "shwait" && isParentTag(id.Tag()):
				f.container, f.secondary = true, true
			default:
				return f, false
			}
			return f, true
		},
		valid: func(f found) bool {
			if f.container {
				return isParentTag(f.at.pool().Tag()) && f.at[16] == 0
			}
			return f.at.pool().Tag() == q.Tag && f.at[16] == 0
		},
		read: func(ctx context.Context, p redis.Pipeliner, f found) func() ([]entry[store.PoolState], error) {
			if f.container {
				return s.readParent(ctx, p, f, q.Tag, childTag)
			}
			return s.readPool(ctx, p, f)
		},
		merge: func(a, b store.PoolState) store.PoolState {
			a.Holders = append(a.Holders, b.Holders...)
			a.Waiting = append(a.Waiting, b.Waiting...)
			return a
		},
	}
	pools, next, err := scanPage(ctx, s, q, pg)
	if err != nil {
		return store.PoolPage{}, fmt.Errorf("redisstore: inspect pools: %w", err)
	}
	return store.PoolPage{Pools: pools, Next: next}, nil
}

// readPool queues the script that reads a pool without a parent.
func (s *Store) readPool(ctx context.Context, p redis.Pipeliner, f found) func() ([]entry[store.PoolState], error) {
	id := f.at.pool()
	names, _ := s.names(id)
	cmd := inspectScript.EvalSha(ctx, p, names, "pool", flag(f.secondary))
	return func() ([]entry[store.PoolState], error) {
		reply, err := cmd.Slice()
		if errors.Is(err, redis.Nil) {
			return nil, nil // left to its slots key
		}
		if err != nil {
			return nil, err
		}
		if len(reply) != 2 {
			return nil, fmt.Errorf("unexpected reply %v", reply)
		}
		st := store.PoolState{Pool: id}
		if st.Holders, err = holders(reply[0]); err != nil {
			return nil, err
		}
		if st.Waiting, err = waiters(reply[1]); err != nil {
			return nil, err
		}
		if len(st.Holders) == 0 && len(st.Waiting) == 0 {
			return nil, nil
		}
		return []entry[store.PoolState]{{at: f.at, val: st}}, nil
	}
}

// readParent queues the script that reads the pools of a parent's keys of
// tag (childTag, in hex; "" for every key when tag is the parents' own).
func (s *Store) readParent(ctx context.Context, p redis.Pipeliner, f found, tag store.Tag, childTag string) func() ([]entry[store.PoolState], error) {
	parent := f.at.pool()
	names, lines, _ := s.shareNames(parent)
	cmd := inspectScript.EvalSha(ctx, p, []string{names[0], names[2]}, "parent", lines, childTag, flag(f.secondary))
	return func() ([]entry[store.PoolState], error) {
		reply, err := cmd.Slice()
		if errors.Is(err, redis.Nil) {
			return nil, nil // left to its leases key
		}
		if err != nil {
			return nil, err
		}
		if len(reply)%3 != 0 {
			return nil, fmt.Errorf("unexpected reply %v", reply)
		}
		var out []entry[store.PoolState]
		all := store.PoolState{Pool: parent}
		for i := 0; i < len(reply); i += 3 {
			c, _ := reply[i].(string)
			var kid store.PoolID
			if n, err := hex.Decode(kid[:], []byte(c)); err != nil || n != len(kid) {
				return nil, fmt.Errorf("unexpected key %q in parent %s", c, parent)
			}
			st := store.PoolState{Pool: kid}
			if st.Holders, err = holders(reply[i+1]); err != nil {
				return nil, err
			}
			if st.Waiting, err = waiters(reply[i+2]); err != nil {
				return nil, err
			}
			if kid.Tag() == tag {
				out = append(out, entry[store.PoolState]{at: entryKey(kid, 0), val: st})
			}
			if tag == parent.Tag() {
				all.Holders = append(all.Holders, st.Holders...)
				all.Waiting = append(all.Waiting, st.Waiting...)
			}
		}
		if len(all.Holders) > 0 || len(all.Waiting) > 0 {
			out = append(out, entry[store.PoolState]{at: f.at, val: all})
		}
		return out, nil
	}
}

// holders decodes a script's holders: owner, weight, ms left, ...
func holders(v any) ([]store.Holder, error) {
	r, ok := v.([]any)
	if !ok || len(r)%3 != 0 {
		return nil, fmt.Errorf("unexpected holders %v", v)
	}
	var out []store.Holder
	for i := 0; i < len(r); i += 3 {
		o, ok1 := r[i].(string)
		w, ok2 := r[i+1].(int64)
		left, ok3 := r[i+2].(int64)
		if !ok1 || !ok2 || !ok3 || len(o) != len(store.Owner{}) {
			return nil, fmt.Errorf("unexpected holder %v", r[i:i+3])
		}
		out = append(out, store.Holder{Owner: store.Owner([]byte(o)), Weight: int(w), Expires: time.Duration(left) * time.Millisecond})
	}
	return out, nil
}

// waiters decodes a script's waiters: owner, ms left, ...
func waiters(v any) ([]store.Waiter, error) {
	r, ok := v.([]any)
	if !ok || len(r)%2 != 0 {
		return nil, fmt.Errorf("unexpected waiters %v", v)
	}
	var out []store.Waiter
	for i := 0; i < len(r); i += 2 {
		o, ok1 := r[i].(string)
		left, ok2 := r[i+1].(int64)
		if !ok1 || !ok2 || len(o) != len(store.Owner{}) {
			return nil, fmt.Errorf("unexpected waiter %v", r[i:i+2])
		}
		out = append(out, store.Waiter{Owner: store.Owner([]byte(o)), Expires: time.Duration(left) * time.Millisecond})
	}
	return out, nil
}

// InspectPauses implements store.Store as InspectPools does, at the
// same cost: SCANs, then one pipelined round trip per node that reads each
// pause's PTTL and each pace's theoretical arrival time (a script, by
// Redis's clock).
func (s *Store) InspectPauses(ctx context.Context, q store.PageQuery) (store.PausePage, error) {
	pause, rate := s.prefix+"keycap:", "rate:"+s.prefix+"keycap:"
	pg := pager[store.PauseState]{
		kind: 's',
		// "*": a pace's key starts with redis_rate's "rate:".
		match: "*" + globEscape(pause) + "[pr]a[ut][se]*:{" + q.Tag.String() + "*",
		classify: func(key string) (f found, ok bool) {
			if typ, id, ok := splitKey(key, pause); ok && typ == "pause" && id.Tag() == q.Tag {
				return found{at: entryKey(id, 0)}, true
			}
			if typ, id, ok := splitKey(key, rate); ok && typ == "rate" && id.Tag() == q.Tag {
				return found{at: entryKey(id, 1)}, true
			}
			return f, false
		},
		valid: func(f found) bool {
			return !f.container && !f.secondary && f.at.pool().Tag() == q.Tag && f.at[16] <= 1
		},
		read: func(ctx context.Context, p redis.Pipeliner, f found) func() ([]entry[store.PauseState], error) {
			id := f.at.pool()
			if f.at[len(id)] == 0 {
				cmd := p.PTTL(ctx, s.pauseKey(id))
				return func() ([]entry[store.PauseState], error) {
					left, err := cmd.Result()
					if err != nil || left <= 0 { // -2: gone
						return nil, err
					}
					return []entry[store.PauseState]{{at: f.at, val: store.PauseState{ID: id, Left: left}}}, nil
				}
			}
			cmd := inspectScript.EvalSha(ctx, p, []string{"rate:" + s.rateKey(id)}, "pace")
			return func() ([]entry[store.PauseState], error) {
				us, err := cmd.Int64()
				if err != nil || us <= 0 {
					return nil, err
				}
				return []entry[store.PauseState]{{at: f.at, val: store.PauseState{ID: id, Pace: true, Left: time.Duration(us) * time.Microsecond}}}, nil
			}
		},
	}
	pauses, next, err := scanPage(ctx, s, q, pg)
	if err != nil {
		return store.PausePage{}, fmt.Errorf("redisstore: inspect pauses: %w", err)
	}
	return store.PausePage{Pauses: pauses, Next: next}, nil
}

// at is the order of the entries of a page's keys: a pool's ID, then 0
// for a pool or a pause, 1 for a pace.
type at [17]byte

func entryKey(id store.PoolID, sub byte) at {
	var a at
	copy(a[:], id[:])
	a[len(id)] = sub
	return a
}

func (a at) pool() store.PoolID { return store.PoolID(a[:16]) }

func (a at) less(b at) bool { return bytes.Compare(a[:], b[:]) < 0 }

// found is one key a SCAN found, to read.
type found struct {
	at        at   // its entry; for a container, the container's own
	container bool // a parent, that holds the pools of its keys
	secondary bool // found by a key (a line) read only while the main key is gone
}

// entry is one thing a page shows.
type entry[T any] struct {
	at  at
	val T
}

// pager says what one kind of page scans for, and how it reads what it
// finds.
type pager[T any] struct {
	kind     byte   // in the cursor: 'p' pools, 's' pauses
	match    string // SCAN's MATCH
	classify func(key string) (found, bool)
	// valid checks a found key that a cursor carries.
	valid func(f found) bool
	// read queues in p what reads f, and returns what decodes it, after
	// the pipeline ran.
	read  func(ctx context.Context, p redis.Pipeliner, f found) func() ([]entry[T], error)
	merge func(a, b T) T // two entries of one at, from two keys
}

// unit is the keys of one SCAN call, or those a cursor carried over: the
// entries of a unit are shown in the order of their at.
type unit[T any] struct {
	after      cursor  // where the paging goes on after the unit
	from       *at     // the entries before it were shown already
	direct     []found // from from on, sorted
	containers []found
	take       int          // direct[:take] and the containers are read
	got        [][]entry[T] // what they hold, by the order of read
}

func (u *unit[T]) read() []found {
	return append(u.direct[:u.take:u.take], u.containers...)
}

// rest returns the keys of u that may hold entries from x on.
func (u *unit[T]) rest(x at) []found {
	var out []found
	for _, f := range u.direct {
		if !f.at.less(x) {
			out = append(out, f)
		}
	}
	return append(out, u.containers...)
}

// maxCarried is the most keys a cursor carries over beyond those a page
// reads: when one SCAN finds more, it runs again with a smaller COUNT.
const maxCarried = 32

// doneNode is the node of a cursor whose paging has walked every node
// (and carries the keys left to show).
const doneNode = 1 << 14

// scanPage returns the entries of one page and the cursor of the next.
func scanPage[T any](ctx context.Context, s *Store, q store.PageQuery, pg pager[T]) ([]T, string, error) {
	pos, err := decodeCursor(q.Cursor, pg.kind, q.Tag, pg.valid)
	if err != nil {
		return nil, "", err
	}
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		s.failed(err)
		return nil, "", err
	}
	// The node at pos, or, if it is gone (a resharded cluster), the next.
	i := sort.Search(len(nodes), func(i int) bool { return nodes[i].order >= pos.node })
	scan := pos.scan
	if i < len(nodes) && nodes[i].order != pos.node {
		scan = 0
	}
	here := func() cursor { // where the walk stands
		if i < len(nodes) {
			return cursor{node: nodes[i].order, scan: scan}
		}
		return cursor{node: doneNode}
	}
	size := q.PageSize()
	need := size // keys still to read for the page
	var units []*unit[T]
	if len(pos.carried) > 0 {
		u := &unit[T]{after: here(), from: &pos.from}
		for _, f := range pos.carried {
			if f.container {
				u.containers = append(u.containers, f)
			} else {
				u.direct = append(u.direct, f)
			}
		}
		u.take = min(len(u.direct), need)
		need -= u.take
		units = append(units, u)
	}
	count := int64(min(max(10*size, minScanCount), maxScanCount))
	deadline, bounded := ctx.Deadline()
	var slowest time.Duration
	for scans := 0; i < len(nodes) && need > 0 && scans < scanBudget; {
		if bounded && time.Until(deadline) < 3*slowest {
			break // room left for the reads
		}
		var keys []string
		var next uint64
		var direct, containers []found
		for {
			start := time.Now()
			keys, next, err = nodes[i].c.Scan(ctx, scan, pg.match, count).Result()
			if err != nil {
				s.failed(err)
				return nil, "", fmt.Errorf("SCAN: %w", err)
			}
			scans++
			slowest = max(slowest, time.Since(start))
			direct, containers = sortFound(keys, pg.classify)
			if len(direct) <= need+maxCarried || count == 1 || scans >= scanBudget {
				break
			}
			count = max(count/4, 1) // too many to carry: fewer keys per SCAN
		}
		u := &unit[T]{direct: direct, containers: containers, take: min(len(direct), need)}
		need -= u.take
		if scan = next; next == 0 {
			i++
		}
		u.after = here()
		units = append(units, u)
	}
	if err := readAll(ctx, s, pg, units); err != nil {
		return nil, "", err
	}
	var out []T
	for _, u := range units {
		var bound *at
		if u.take < len(u.direct) {
			bound = &u.direct[u.take].at
		}
		for _, e := range u.entries(bound, pg.merge) {
			if len(out) == size { // full inside this unit
				return out, encodeCursor(pg.kind, q.Tag, u.after.carry(e.at, u.rest(e.at))), nil
			}
			out = append(out, e.val)
		}
		if bound != nil {
			return out, encodeCursor(pg.kind, q.Tag, u.after.carry(*bound, u.rest(*bound))), nil
		}
	}
	if i >= len(nodes) {
		return out, "", nil
	}
	return out, encodeCursor(pg.kind, q.Tag, here()), nil
}

// sortFound classifies a SCAN's keys and sorts them, merging the keys of
// one entry.
func sortFound(keys []string, classify func(string) (found, bool)) (direct, containers []found) {
	type id struct {
		at        at
		container bool
	}
	seen := map[id]bool{} // → found by a secondary key only
	for _, k := range keys {
		f, ok := classify(k)
		if !ok {
			continue
		}
		key := id{f.at, f.container}
		if only, ok := seen[key]; ok {
			seen[key] = only && f.secondary
		} else {
			seen[key] = f.secondary
		}
	}
	for key, only := range seen {
		f := found{at: key.at, container: key.container, secondary: only}
		if f.container {
			containers = append(containers, f)
		} else {
			direct = append(direct, f)
		}
	}
	byAt := func(a, b found) int { return bytes.Compare(a.at[:], b.at[:]) }
	slices.SortFunc(direct, byAt)
	slices.SortFunc(containers, byAt)
	return direct, containers
}

// entries returns the unit's entries to show, in order: from u.from on,
// before bound.
func (u *unit[T]) entries(bound *at, merge func(a, b T) T) []entry[T] {
	var out []entry[T]
	for _, es := range u.got {
		for _, e := range es {
			if (u.from != nil && e.at.less(*u.from)) || (bound != nil && !e.at.less(*bound)) {
				continue
			}
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(x, y entry[T]) int { return bytes.Compare(x.at[:], y.at[:]) })
	merged := out[:0]
	for _, e := range out {
		if n := len(merged); n > 0 && merged[n-1].at == e.at && merge != nil {
			merged[n-1].val = merge(merged[n-1].val, e.val)
			continue
		}
		merged = append(merged, e)
	}
	return merged
}

// readAll reads every unit's keys in one pipeline (go-redis sends it to
// each node as one round trip), once more if Redis lost its scripts.
func readAll[T any](ctx context.Context, s *Store, pg pager[T], units []*unit[T]) error {
	n := 0
	for _, u := range units {
		n += len(u.read())
	}
	if n == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		var decoders []func() ([]entry[T], error)
		_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, u := range units {
				for _, f := range u.read() {
					decoders = append(decoders, pg.read(ctx, p, f))
				}
			}
			return nil
		})
		var failed error
		noScript := false
		j := 0
		for _, u := range units {
			read := u.read()
			u.got = make([][]entry[T], len(read))
			for k := range read {
				es, err := decoders[j]()
				j++
				if redis.HasErrorPrefix(err, "NOSCRIPT") {
					noScript = true
				}
				if err != nil && failed == nil {
					failed = err
				}
				u.got[k] = es
			}
		}
		if noScript && attempt == 0 {
			if err := inspectScript.Load(ctx, s.client).Err(); err != nil {
				s.failed(err)
				return fmt.Errorf("loading script: %w", err)
			}
			continue
		}
		if failed != nil {
			s.failed(failed)
		}
		return failed
	}
}

// scanNode is one node SCAN walks.
type scanNode struct {
	order int // the cursor's name of it: on a cluster, its first slot
	c     redis.Cmdable
}

// scanNodes returns the nodes that hold the store's keys, in a stable
// order: a cluster's masters by the first slot each serves (the replica
// that replaces one takes its place), a ring's live shards by address (a
// ring whose shards change during a paging may skip or repeat one's
// pools), or the one Redis.
func (s *Store) scanNodes(ctx context.Context) ([]scanNode, error) {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		ranges, err := s.slots.list(ctx, c)
		if err != nil {
			return nil, err
		}
		var nodes []scanNode
		at := map[*redis.Client]bool{}
		for _, r := range ranges { // sorted by their first slot
			m, err := c.MasterForKey(ctx, keyInSlot(r.start))
			if err != nil {
				return nil, err
			}
			if !at[m] {
				at[m] = true
				nodes = append(nodes, scanNode{order: r.start, c: m})
			}
		}
		return nodes, nil
	case *redis.Ring:
		var mu sync.Mutex
		var shards []*redis.Client
		err := c.ForEachShard(ctx, func(_ context.Context, shard *redis.Client) error {
			mu.Lock()
			shards = append(shards, shard)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.SortFunc(shards, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
		nodes := make([]scanNode, len(shards))
		for i, sh := range shards {
			nodes[i] = scanNode{order: i, c: sh}
		}
		return nodes, nil
	}
	return []scanNode{{c: s.client}}, nil
}

// cursor is where a paging stands: the node and SCAN cursor to walk on
// from, and the keys found already that may hold entries not shown yet
// (from from on).
type cursor struct {
	node    int    // the node's order (scanNode), or doneNode
	scan    uint64 // its SCAN cursor
	from    at
	carried []found
}

// carry returns c carrying keys whose entries from x on are still to show.
func (c cursor) carry(x at, keys []found) cursor {
	c.from, c.carried = x, keys
	return c
}

// encodeCursor writes c as kind and the tag, the node, the SCAN cursor
// and, when it carries keys, from and the keys (each its at and a byte of
// flags) in base64, and a checksum of them.
func encodeCursor(kind byte, tag store.Tag, c cursor) string {
	body := fmt.Sprintf("%c%s.%d.%d", kind, tag, c.node, c.scan)
	if len(c.carried) > 0 {
		b := make([]byte, 0, len(c.from)+len(c.carried)*(len(at{})+1))
		b = append(b, c.from[:]...)
		for _, f := range c.carried {
			var flags byte
			if f.container {
				flags |= 1
			}
			if f.secondary {
				flags |= 2
			}
			b = append(append(b, f.at[:]...), flags)
		}
		body += "." + base64.RawURLEncoding.EncodeToString(b)
	}
	return body + "." + checksum(body)
}

func checksum(body string) string {
	return fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(body)))
}

// decodeCursor reads a cursor of encodeCursor, of the same kind and tag,
// whose keys carried are valid.
func decodeCursor(s string, kind byte, tag store.Tag, valid func(found) bool) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	bad := fmt.Errorf("bad page cursor %q", s)
	dot := strings.LastIndexByte(s, '.')
	if dot < 0 || checksum(s[:dot]) != s[dot+1:] {
		return c, bad
	}
	f := strings.Split(s[:dot], ".")
	if (len(f) != 3 && len(f) != 4) || f[0] != string(kind)+tag.String() {
		return c, bad
	}
	node, err1 := strconv.ParseUint(f[1], 10, 64)
	scan, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil || node > doneNode {
		return c, bad
	}
	c.node, c.scan = int(node), scan
	if len(f) == 3 {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(f[3])
	const rec = len(at{}) + 1
	if err != nil || len(b) <= len(c.from) || (len(b)-len(c.from))%rec != 0 {
		return c, bad
	}
	copy(c.from[:], b)
	for r := b[len(c.from):]; len(r) > 0; r = r[rec:] {
		var k found
		copy(k.at[:], r)
		flags := r[rec-1]
		k.container, k.secondary = flags&1 != 0, flags&2 != 0
		if flags > 3 || !valid(k) {
			return c, bad
		}
		c.carried = append(c.carried, k)
	}
	return c, nil
}

// splitKey splits a key base + typ + ":{" + 32 hex + "}" into typ and its
// pool.
func splitKey(key, base string) (typ string, id store.PoolID, ok bool) {
	rest, ok := strings.CutPrefix(key, base)
	if !ok {
		return "", id, false
	}
	i := strings.Index(rest, ":{")
	if i < 0 || len(rest) != i+2+2*len(id)+1 || rest[len(rest)-1] != '}' {
		return "", id, false
	}
	if _, err := hex.Decode(id[:], []byte(rest[i+2:len(rest)-1])); err != nil {
		return "", id, false
	}
	return rest[:i], id, true
}

// globEscape escapes the characters special to SCAN's MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// globTags returns a MATCH pattern of 8 hex digits that matches both
// tags: a class where their digits differ. It may match other tags
// too, which the caller drops.
func globTags(tags ...store.Tag) string {
	hexes := make([]string, len(tags))
	for i, t := range tags {
		hexes[i] = t.String()
	}
	var out strings.Builder
	for i := range len(hexes[0]) {
		var chars []byte
		for _, h := range hexes {
			if !bytes.ContainsRune(chars, rune(h[i])) {
				chars = append(chars, h[i])
			}
		}
		if len(chars) == 1 {
			out.WriteByte(chars[0])
		} else {
			out.WriteString("[" + string(chars) + "]")
		}
	}
	return out.String()
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
