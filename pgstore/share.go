package pgstore

import (
	"context"

	"github.com/keycap/keycap/store"
)

// acquireShared takes a weighted slot or a parent's key's: one function
// call, wtake for a pool without a parent, ptake for a parent's key (whose
// pool is stored after the parent's 16 bytes, under the parent's lock). A
// refused demand with a ticket (d.Line) waits in the line.
func (s *Store) acquireShared(ctx context.Context, d demand) (store.Grant, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var tttl, claim int64
	if d.Line.TTL > 0 {
		tttl, claim = ms(d.Line.TTL), ms(d.Line.Claim)
	}
	w := d.Weight()
	var g store.Grant
	var err error
	if d.HasParent() {
		err = s.pool.QueryRow(ctx, s.sql["ptake"], d.Shared.Parent.Pool[:], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w,
			d.Shared.Parent.Max, max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min, tttl, claim).Scan(&g.Granted, &g.Ahead)
	} else {
		err = s.pool.QueryRow(ctx, s.sql["wtake"], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w, tttl, claim).Scan(&g.Granted, &g.Ahead)
	}
	if err != nil {
		return store.Grant{}, wrap("acquire", err)
	}
	return g, nil
}

// releaseShared frees a parent's key's lease: one call of pgive, which
// may keep the slot for the key (d.Shared.Parent.Keep) and reports whether it did.
func (s *Store) releaseShared(ctx context.Context, d demand, leave bool) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var kept bool
	if err := s.pool.QueryRow(ctx, s.sql["pgive"], d.Shared.Parent.Pool[:], d.Pool[:], d.Owner[:], leave,
		ms(d.Shared.Parent.Keep), max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min, d.Held.Seconds()*1000).Scan(&kept); err != nil {
		return false, wrap("release", err)
	}
	return kept, nil
}
