// Package nullstore is a keycap store that turns limits off: every slot is
// granted, nothing is stored, and nothing is paused or paced — for an
// environment (a developer's machine, a load test, an emergency switch)
// where the limits must not apply, as the PHP seed's null store does. The
// Limiter still sends its events, so tests and metrics keep working: a
// request through httplimit on nullstore reports SlotAcquired and
// SlotReleased as it would on any store.
//
//	var st keycap.Store = memstore.New()
//	if os.Getenv("KEYCAP_DISABLED") == "1" {
//		st = nullstore.New()
//	}
//	limiter, err := keycap.NewLimiter(st)
//
// It declares shares, members, marks, pauses and paces, so that every front
// door accepts it, and never blocks. It keeps no lines, inspections or
// overrides: a Limiter asked for those on it says so (keycap.ErrNotSupported).
package nullstore

import (
	"context"
	"time"

	"github.com/keycap/keycap/store"
)

// Store grants everything and keeps nothing. The zero value is ready.
type Store struct {
	store.Unsupported // no lines, notifications, inspection or overrides: nothing waits, nothing is kept
}

// New returns a store that turns limits off.
func New() *Store { return &Store{} }

var _ store.Store = (*Store)(nil)

// Features implements store.Store: shares (every weight and parent is
// granted), members, marks, pauses and paces (all answered at once), in
// this process. It keeps no lines: a caller is never refused, so nobody
// waits.
func (*Store) Features() store.Features {
	return store.Shares | store.Members | store.Marks | store.Pauses | store.Paces | store.InProcess
}

// Acquire grants every slot, whatever its weight and parent; a ticket, a
// pinned slot or a fencing token, which it does not declare, is not
// supported (a token from a store that keeps nothing would fence nothing).
func (s *Store) Acquire(_ context.Context, _ store.PoolID, _ store.Owner, d store.Demand) (store.Grant, error) {
	if d.Line.TTL > 0 || d.Pinned || d.Fence { // a Limiter never asks: the store declares none
		return store.Grant{}, store.Need(s, store.Lines|store.Pinned|store.Fences)
	}
	return store.Grant{Granted: true}, nil
}

// Release does nothing.
func (*Store) Release(context.Context, store.PoolID, store.Owner, store.Demand, bool) (bool, error) {
	return false, nil
}

// Renew renews every lease.
func (*Store) Renew(_ context.Context, batch []store.Renewal) error {
	for i := range batch {
		batch[i].Lost, batch[i].Err = false, nil
	}
	return nil
}

// Mark reports every mark as started now: a job's deadline never passes.
func (*Store) Mark(context.Context, store.PoolID, time.Duration) (time.Duration, bool, error) {
	return 0, true, nil
}

// Pause records nothing: no API is ever paused.
func (*Store) Pause(context.Context, store.PoolID, time.Duration) (time.Duration, error) {
	return 0, nil
}

// Paused reports nothing paused.
func (*Store) Paused(context.Context, store.PoolID) (time.Duration, error) { return 0, nil }

// Pace lets every event through.
func (*Store) Pace(context.Context, store.PoolID, store.Rate) (time.Duration, error) { return 0, nil }

// Sync keeps nothing and finds no ghost.
func (*Store) Sync(_ context.Context, _ store.NodeID, _ time.Duration, batch []store.SyncPool) error {
	for i := range batch {
		batch[i].Removed, batch[i].Err = 0, nil
	}
	return nil
}
