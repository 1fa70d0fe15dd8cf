package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/keycap/keycap/store"
)

// ticket returns the ttl and the claim window of d's ticket in ms; 0, 0
// for none.
func (d demand) ticket() (ttl, claim int64) {
	if d.Line.TTL > 0 {
		return ms(d.Line.TTL), ms(d.Line.Claim)
	}
	return 0, 0
}

// acquireShared takes a weighted slot or a parent's key's: one function
// call, wtake for a pool without a parent, ptake for a parent's key (whose
// pool is stored after the parent's 16 bytes, under the parent's lock). A
// refused demand with a ticket (d.Line) waits in the line.
func (s *Store) acquireShared(ctx context.Context, d demand) (store.Grant, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tttl, claim := d.ticket()
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

// acquireFenced is Acquire with a fencing token (store.Fences): the call
// that the demand makes without one (acquire, queue, wtake or ptake), and
// nextval of the fence sequence in the same statement. Its transaction
// holds the lock that the function took — the pool's, or its parent's —
// until the statement ends, so the tokens of a pool grow in the order of
// its grants. The sequence is logged: tokens keep growing across a restart
// or a crash of the database, which empties the (unlogged) leases.
func (s *Store) acquireFenced(ctx context.Context, d demand) (store.Grant, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tttl, claim := d.ticket()
	var row pgx.Row
	switch w := d.Weight(); {
	case d.HasParent():
		row = s.pool.QueryRow(ctx, s.sql["ptake_fenced"], d.Shared.Parent.Pool[:], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w,
			d.Shared.Parent.Max, max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min, tttl, claim)
	case !d.Plain():
		row = s.pool.QueryRow(ctx, s.sql["wtake_fenced"], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), w, tttl, claim)
	case tttl > 0:
		row = s.pool.QueryRow(ctx, s.sql["queue_fenced"], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL), tttl, claim)
	default:
		row = s.pool.QueryRow(ctx, s.sql["acquire_fenced"], d.Pool[:], d.Owner[:], d.Max, ms(d.TTL))
	}
	var g store.Grant
	var token int64
	if err := row.Scan(&g.Granted, &g.Ahead, &token); err != nil {
		return store.Grant{}, wrap("acquire", err)
	}
	g.Token = uint64(token)
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
