package pgstore

import (
	"context"
	"time"

	"github.com/keycap/keycap/store"
)

// ReportTotal implements store.Store (store.Totals): one function call.
func (s *Store) ReportTotal(ctx context.Context, id store.PoolID, node store.NodeID, period int64, report []byte, ttl time.Duration) (store.Total, [][]byte, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, s.sql["report_total"], id[:], node[:], period, report, ms(ttl))
	if err != nil {
		return store.Total{}, nil, wrap("report total", err)
	}
	defer rows.Close()
	var t store.Total
	var out [][]byte
	for rows.Next() {
		var version *int64
		var state, r []byte
		if err := rows.Scan(&version, &state, &r); err != nil {
			return store.Total{}, nil, wrap("report total", err)
		}
		if version != nil {
			t = store.Total{Version: *version, State: state}
		}
		if r != nil {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return store.Total{}, nil, wrap("report total", err)
	}
	return t, out, nil
}

// SetTotal implements store.Store (store.Totals): one function call.
func (s *Store) SetTotal(ctx context.Context, id store.PoolID, prev int64, t store.Total, ttl time.Duration) (store.Total, bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var set bool
	var got store.Total
	if err := s.pool.QueryRow(ctx, s.sql["set_total"], id[:], prev, t.Version, t.State, ms(ttl)).Scan(&set, &got.Version, &got.State); err != nil {
		return store.Total{}, false, wrap("set total", err)
	}
	if got.Version == 0 {
		got.State = nil
	}
	return got, set, nil
}
