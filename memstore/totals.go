package memstore

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/keycap/keycap/store"
)

// total is an adaptive total (store.Totals): its value and the reports of
// the periods still kept.
type total struct {
	value   store.Total
	expires time.Duration // of the value
	reports map[int64]map[store.NodeID]report
}

type report struct {
	data    []byte
	expires time.Duration
}

// live reports whether t holds anything unexpired, dropping what expired.
func (t *total) live(now time.Duration) bool {
	if t.expires <= now {
		t.value = store.Total{}
	}
	for period, nodes := range t.reports {
		for node, r := range nodes {
			if r.expires <= now {
				delete(nodes, node)
			}
		}
		if len(nodes) == 0 {
			delete(t.reports, period)
		}
	}
	return t.value.Version != 0 || len(t.reports) > 0
}

// totalOf returns id's total, made if needed. The caller holds sh.mu.
func (sh *shard) totalOf(id store.PoolID, now time.Duration) *total {
	t := sh.totals[id]
	if t == nil {
		t = &total{reports: map[int64]map[store.NodeID]report{}}
		sh.totals[id] = t
	}
	t.live(now)
	return t
}

// ReportTotal implements store.Store (store.Totals). It never blocks and
// ignores ctx.
func (s *Store) ReportTotal(_ context.Context, id store.PoolID, node store.NodeID, period int64, data []byte, ttl time.Duration) (store.Total, [][]byte, error) {
	now := s.clock()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(now)
	t := sh.totalOf(id, now)
	if t.reports[period] == nil {
		t.reports[period] = map[store.NodeID]report{}
	}
	t.reports[period][node] = report{data: bytes.Clone(data), expires: now + ttl}
	prev := t.reports[period-1]
	nodes := make([]store.NodeID, 0, len(prev))
	for n := range prev {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, func(a, b store.NodeID) int { return bytes.Compare(a[:], b[:]) })
	out := make([][]byte, len(nodes))
	for i, n := range nodes {
		out[i] = bytes.Clone(prev[n].data)
	}
	return cloneTotal(t.value), out, nil
}

// SetTotal implements store.Store (store.Totals). It never blocks and
// ignores ctx.
func (s *Store) SetTotal(_ context.Context, id store.PoolID, prev int64, v store.Total, ttl time.Duration) (store.Total, bool, error) {
	now := s.clock()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.totalOf(id, now)
	if t.value.Version != prev {
		return cloneTotal(t.value), false, nil
	}
	t.value, t.expires = cloneTotal(v), now+ttl
	return cloneTotal(v), true, nil
}

func cloneTotal(t store.Total) store.Total {
	return store.Total{Version: t.Version, State: bytes.Clone(t.State)}
}
