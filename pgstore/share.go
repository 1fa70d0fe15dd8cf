package pgstore

import (
	"context"

	"github.com/keycap/keycap"
)

// AcquireDemand implements keycap.Sharer: one function call, wtake for a
// pool without a parent, ptake for a parent's key (whose pool is stored
// after the parent's 16 bytes, under the parent's lock).
func (s *Store) AcquireDemand(ctx context.Context, d keycap.Demand, t *keycap.Ticket) (bool, int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var tttl, claim int64
	if t != nil {
		tttl, claim = ms(t.TTL), ms(t.Claim)
	}
	w := max(d.Weight, 1)
	var granted bool
	var ahead int
	var err error
	if d.HasParent() {
		err = s.pool.QueryRow(ctx, s.sql["ptake"], d.Parent[:], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w,
			d.ParentMax, max(d.Share, 1), d.Min, tttl, claim).Scan(&granted, &ahead)
	} else {
		err = s.pool.QueryRow(ctx, s.sql["wtake"], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w, tttl, claim).Scan(&granted, &ahead)
	}
	if err != nil {
		return false, 0, wrap("acquire", err)
	}
	return granted, ahead, nil
}

// ReleaseDemand implements keycap.Sharer: one function call.
func (s *Store) ReleaseDemand(ctx context.Context, d keycap.Demand, dequeue bool) (bool, error) {
	if !d.HasParent() {
		return false, s.release(ctx, "release", d.Pool, d.Owner, dequeue)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var kept bool
	if err := s.pool.QueryRow(ctx, s.sql["pgive"], d.Parent[:], d.Pool[:], d.Owner[:], dequeue,
		ms(d.Keep), max(d.Share, 1), d.Min).Scan(&kept); err != nil {
		return false, wrap("release", err)
	}
	return kept, nil
}
