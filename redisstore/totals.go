package redisstore

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

var (
	//go:embed report_total.lua
	reportTotalLua    string
	reportTotalScript = redis.NewScript(reportTotalLua)

	//go:embed set_total.lua
	setTotalLua    string
	setTotalScript = redis.NewScript(setTotalLua)
)

// totalKey returns the Redis key of the adaptive total id; with a period,
// the key of that period's reports. Both share id's hash tag, and so a
// parent's slot (a parent's pool is the total's id).
func (s *Store) totalKey(id store.PoolID, period ...int64) string {
	k := s.prefix + "keycap:total:{" + id.String() + "}"
	if len(period) > 0 {
		k += ":" + strconv.FormatInt(period[0], 10)
	}
	return k
}

// ReportTotal implements store.Store (store.Totals): one EVALSHA.
func (s *Store) ReportTotal(ctx context.Context, id store.PoolID, node store.NodeID, period int64, report []byte, ttl time.Duration) (store.Total, [][]byte, error) {
	keys := []string{s.totalKey(id), s.totalKey(id, period), s.totalKey(id, period-1)}
	v, err := reportTotalScript.Run(ctx, s.client, keys, node[:], report, ms(ttl)).Slice()
	if err != nil {
		s.failed(err)
		return store.Total{}, nil, fmt.Errorf("redisstore: report total: %w", err)
	}
	if len(v) != 3 {
		return store.Total{}, nil, fmt.Errorf("redisstore: report total: %d values, want 3", len(v))
	}
	t, err := totalOf(v[0], v[1])
	if err != nil {
		return store.Total{}, nil, err
	}
	flat, _ := v[2].([]any)
	type kv struct{ node, report string }
	pairs := make([]kv, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		n, _ := flat[i].(string)
		r, _ := flat[i+1].(string)
		pairs = append(pairs, kv{n, r})
	}
	slices.SortFunc(pairs, func(a, b kv) int { return bytes.Compare([]byte(a.node), []byte(b.node)) })
	out := make([][]byte, len(pairs))
	for i, p := range pairs {
		out[i] = []byte(p.report)
	}
	return t, out, nil
}

// SetTotal implements store.Store (store.Totals): one EVALSHA.
func (s *Store) SetTotal(ctx context.Context, id store.PoolID, prev int64, t store.Total, ttl time.Duration) (store.Total, bool, error) {
	v, err := setTotalScript.Run(ctx, s.client, []string{s.totalKey(id)},
		strconv.FormatInt(prev, 10), strconv.FormatInt(t.Version, 10), t.State, ms(ttl)).Slice()
	if err != nil {
		s.failed(err)
		return store.Total{}, false, fmt.Errorf("redisstore: set total: %w", err)
	}
	if len(v) != 3 {
		return store.Total{}, false, fmt.Errorf("redisstore: set total: %d values, want 3", len(v))
	}
	set, _ := v[0].(int64)
	got, err := totalOf(v[1], v[2])
	return got, set == 1 && err == nil, err
}

// totalOf reads a total's version and state as a script returns them (nil:
// none).
func totalOf(version, state any) (store.Total, error) {
	v, _ := version.(string)
	if v == "" {
		return store.Total{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return store.Total{}, fmt.Errorf("redisstore: a total's version %q: %w", v, err)
	}
	st, _ := state.(string)
	return store.Total{Version: n, State: []byte(st)}, nil
}
