package pgstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keycap/keycap/store"
)

// MaxPage is the most entries a page of InspectPools or InspectPauses
// holds, whatever the query asks: a bound on one call's work.
const MaxPage = 1000

// pageSize returns q's page size, at most MaxPage.
func pageSize(q store.PageQuery) int { return min(q.PageSize(), MaxPage) }

// InspectPools implements store.Store (store.Inspection): one function call per page,
// which walks the tag's pools in the lease and ticket tables' primary keys
// (and a parent's keys in their own indexes), one index probe per table and
// pool, and reads the rows of the page's pools only: a page's cost follows
// its pools, never the table's size. Its cursor is the hex ID of the page's
// last pool. A parent's pool lists every key's leases and tickets, and each
// key its own under its pool, as memstore does.
func (s *Store) InspectPools(ctx context.Context, q store.PageQuery) (store.PoolPage, error) {
	after, err := cursor(q)
	if err != nil {
		return store.PoolPage{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, s.sql["inspect"], q.Tag[:], after, pageSize(q))
	if err != nil {
		return store.PoolPage{}, wrap("inspect", err)
	}
	var page store.PoolPage
	var (
		pool, owner []byte
		kind        int16
		weight      int32
		left        int64
	)
	_, err = pgx.ForEachRow(rows, []any{&pool, &kind, &owner, &weight, &left}, func() error {
		if len(pool) != len(store.PoolID{}) || (kind != 2 && len(owner) != len(store.Owner{})) {
			return fmt.Errorf("a row of pool %x, owner %x", pool, owner)
		}
		id := store.PoolID(pool)
		if kind == 2 {
			page.Next = id.String()
			return nil
		}
		if n := len(page.Pools); n == 0 || page.Pools[n-1].Pool != id {
			page.Pools = append(page.Pools, store.PoolState{Pool: id})
		}
		st := &page.Pools[len(page.Pools)-1]
		d := time.Duration(left) * time.Microsecond
		if kind == 0 {
			st.Holders = append(st.Holders, store.Holder{Owner: store.Owner(owner), Weight: int(weight), Expires: d})
		} else {
			st.Waiting = append(st.Waiting, store.Waiter{Owner: store.Owner(owner), Expires: d})
		}
		return nil
	})
	if err != nil {
		return store.PoolPage{}, wrap("inspect", err)
	}
	return page, nil
}

// InspectPauses implements store.Store (store.Inspection): one function call per page,
// reading the pause and rate tables in their primary keys' range for the
// tag. A pace is listed while its theoretical arrival time is ahead of the
// database's clock, with how far ahead it is.
func (s *Store) InspectPauses(ctx context.Context, q store.PageQuery) (store.PausePage, error) {
	after, err := cursor(q)
	if err != nil {
		return store.PausePage{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n := pageSize(q)
	rows, err := s.pool.Query(ctx, s.sql["inspect_pauses"], q.Tag[:], after, n)
	if err != nil {
		return store.PausePage{}, wrap("inspect pauses", err)
	}
	var page store.PausePage
	var (
		id   []byte
		pace bool
		left int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &pace, &left}, func() error {
		if len(id) != len(store.PoolID{}) {
			return fmt.Errorf("a row of ID %x", id)
		}
		page.Pauses = append(page.Pauses, store.PauseState{ID: store.PoolID(id), Pace: pace, Left: time.Duration(left) * time.Microsecond})
		return nil
	})
	if err != nil {
		return store.PausePage{}, wrap("inspect pauses", err)
	}
	if len(page.Pauses) > n {
		page.Pauses = page.Pauses[:n]
		page.Next = page.Pauses[n-1].ID.String()
	}
	return page, nil
}

// cursor decodes q's cursor, the hex ID of the last entry of the previous
// page: nil for the first page, an error for anything that is not the ID
// of a pool of q's tag.
func cursor(q store.PageQuery) ([]byte, error) {
	if q.Cursor == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(q.Cursor)
	if err != nil || len(b) != len(store.PoolID{}) || store.PoolID(b).Tag() != q.Tag {
		return nil, fmt.Errorf("pgstore: bad page cursor %q for tag %s", q.Cursor, q.Tag)
	}
	return b, nil
}

// SetOverride implements store.Store (store.Overrides): one function call, which stores
// the override, drops the expired ones and bumps the version, in one
// transaction.
func (s *Store) SetOverride(ctx context.Context, o store.Override) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var ttl int64
	if o.TTL > 0 {
		ttl = max(int64((o.TTL+time.Microsecond-1)/time.Microsecond), 1)
	}
	if _, err := s.pool.Exec(ctx, s.sql["set_override"], o.Pool[:], int16(o.Family), []byte(o.Name), []byte(o.Key),
		o.Max, o.Share, ttl); err != nil {
		return wrap("set override", err)
	}
	return nil
}

// DeleteOverride implements store.Store (store.Overrides): one function call, which
// bumps the version if it removed an override.
func (s *Store) DeleteOverride(ctx context.Context, pool store.PoolID) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.sql["delete_override"], pool[:]); err != nil {
		return wrap("delete override", err)
	}
	return nil
}

// Overrides implements store.Store (store.Overrides): one function call, which reads
// the version's row alone when it is still since, and else the overrides
// too, in the same snapshot. An override's TTL is its time left by the
// database's clock.
func (s *Store) Overrides(ctx context.Context, since uint64) (uint64, []store.Override, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, s.sql["overrides"], int64(since))
	if err != nil {
		return 0, nil, wrap("overrides", err)
	}
	var (
		version         int64
		pool, name, key []byte
		family          int16
		maxSlots, share int32
		left            int64
		list            []store.Override
		gotVersion      bool
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &pool, &family, &name, &key, &maxSlots, &share, &left}, func() error {
		if pool == nil {
			gotVersion = true
			return nil
		}
		if len(pool) != len(store.PoolID{}) {
			return fmt.Errorf("an override of pool %x", pool)
		}
		list = append(list, store.Override{
			Family: uint8(family), Name: string(name), Key: string(key),
			Max: int(maxSlots), Share: int(share), TTL: time.Duration(left) * time.Microsecond,
			Pool: store.PoolID(pool),
		})
		return nil
	})
	if err == nil && !gotVersion {
		err = fmt.Errorf("no version row")
	}
	if err != nil {
		return 0, nil, wrap("overrides", err)
	}
	if uint64(version) == since {
		return since, nil, nil
	}
	return uint64(version), list, nil
}
