package memstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keycap/keycap/store"
)

// InspectPools implements store.Store. Its cursor is the last pool's
// ID: a page costs a pass over every shard's pools (the store's pools are
// in this process's memory), never a copy of them.
func (s *Store) InspectPools(_ context.Context, q store.PageQuery) (store.PoolPage, error) {
	after, err := cursor(q.Cursor)
	if err != nil {
		return store.PoolPage{}, err
	}
	now := s.clock()
	var out []store.PoolState
	add := func(id store.PoolID, pls ...*pool) {
		if id.Tag() != q.Tag {
			return
		}
		st := store.PoolState{Pool: id}
		for _, pl := range pls {
			st.Holders, st.Waiting = pl.state(now, st.Holders, st.Waiting)
		}
		if len(st.Holders) > 0 || len(st.Waiting) > 0 {
			out = append(out, st)
		}
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for id, pl := range sh.pools {
			add(id, pl)
		}
		for id, pa := range sh.parents {
			kids := make([]*pool, 0, len(pa.kids))
			for kid, k := range pa.kids {
				add(kid, &k.pool)
				kids = append(kids, &k.pool)
			}
			add(id, kids...) // the parent: every kid's leases and tickets
		}
		sh.mu.Unlock()
	}
	pools, next := pageOf(out, func(p store.PoolState) store.PoolID { return p.Pool }, after, q.PageSize())
	return store.PoolPage{Pools: pools, Next: next}, nil
}

// pageOf sorts entries by ID and returns the page after the ID after (nil:
// the first page) of at most n entries, and the cursor of the next page.
func pageOf[T any](entries []T, id func(T) store.PoolID, after []byte, n int) ([]T, string) {
	slices.SortFunc(entries, func(a, b T) int { x, y := id(a), id(b); return bytes.Compare(x[:], y[:]) })
	if after != nil {
		i, _ := slices.BinarySearchFunc(entries, after, func(e T, a []byte) int {
			if x := id(e); bytes.Compare(x[:], a) > 0 {
				return 1
			}
			return -1 // at or before the cursor: shown already
		})
		entries = entries[i:]
	}
	if len(entries) > n {
		return entries[:n], id(entries[n-1]).String()
	}
	return entries, ""
}

// state appends the pool's live leases and tickets.
func (pl *pool) state(now time.Duration, hs []store.Holder, ws []store.Waiter) ([]store.Holder, []store.Waiter) {
	for _, l := range pl.leases {
		switch {
		case l.expires >= pinned:
			hs = append(hs, store.Holder{Owner: l.owner, Weight: l.slots(), Expires: l.expires - pinned})
		case l.expires > now:
			hs = append(hs, store.Holder{Owner: l.owner, Weight: l.slots(), Expires: l.expires - now})
		}
	}
	for _, t := range pl.line {
		if t.expires > now {
			ws = append(ws, store.Waiter{Owner: t.owner, Expires: t.expires - now})
		}
	}
	return hs, ws
}

// InspectPauses implements store.Store.
func (s *Store) InspectPauses(_ context.Context, q store.PageQuery) (store.PausePage, error) {
	after, err := cursor(q.Cursor)
	if err != nil {
		return store.PausePage{}, err
	}
	now := s.clock()
	var out []store.PauseState
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for id, end := range sh.pauses {
			if id.Tag() == q.Tag && end > now {
				out = append(out, store.PauseState{ID: id, Left: end - now})
			}
		}
		for id, tat := range sh.rates {
			if id.Tag() == q.Tag && tat > now {
				out = append(out, store.PauseState{ID: id, Pace: true, Left: tat - now})
			}
		}
		sh.mu.Unlock()
	}
	pauses, next := pageOf(out, func(p store.PauseState) store.PoolID { return p.ID }, after, q.PageSize())
	return store.PausePage{Pauses: pauses, Next: next}, nil
}

// cursor decodes a page cursor: the hex ID of the last entry shown.
func cursor(c string) ([]byte, error) {
	if c == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(c)
	if err != nil || len(b) != len(store.PoolID{}) {
		return nil, fmt.Errorf("memstore: bad page cursor %q", c)
	}
	return b, nil
}

// overrides is the store's set of store.Override.
type overrides struct {
	mu      sync.Mutex
	version uint64
	m       map[store.PoolID]overrideEntry
}

type overrideEntry struct {
	o       store.Override
	expires time.Duration // 0: none
}

// SetOverride implements store.Store. It never blocks.
func (s *Store) SetOverride(_ context.Context, o store.Override) error {
	now := s.clock()
	e := overrideEntry{o: o}
	if o.TTL > 0 {
		e.expires = now + o.TTL
	}
	s.ov.mu.Lock()
	defer s.ov.mu.Unlock()
	if s.ov.m == nil {
		s.ov.m = map[store.PoolID]overrideEntry{}
	}
	s.ov.m[o.Pool] = e
	s.ov.version++
	return nil
}

// DeleteOverride implements store.Store.
func (s *Store) DeleteOverride(_ context.Context, pool store.PoolID) error {
	s.ov.mu.Lock()
	defer s.ov.mu.Unlock()
	if _, ok := s.ov.m[pool]; ok {
		delete(s.ov.m, pool)
		s.ov.version++
	}
	return nil
}

// Overrides implements store.Store.
func (s *Store) Overrides(_ context.Context, since uint64) (uint64, []store.Override, error) {
	now := s.clock()
	s.ov.mu.Lock()
	defer s.ov.mu.Unlock()
	if s.ov.version == since {
		return since, nil, nil
	}
	var list []store.Override
	for id, e := range s.ov.m {
		if e.expires != 0 && e.expires <= now {
			delete(s.ov.m, id) // expired: gone without a new version
			continue
		}
		o := e.o
		if e.expires != 0 {
			o.TTL = e.expires - now
		}
		list = append(list, o)
	}
	return s.ov.version, list, nil
}
