// Package nullstore is a keycap store that turns limits off: every slot is
// granted, nothing is stored, and nothing is paused or paced — for an
// environment (a developer's machine, a load test, an emergency switch)
// where the limits must not apply, as the PHP seed's null store does. The
// Limiter still sends its events, so tests and metrics keep working: a
// request through httplimit on nullstore reports SlotAcquired and
// SlotReleased as it would on any store.
//
//	store := keycap.Store(memstore.New())
//	if os.Getenv("KEYCAP_DISABLED") == "1" {
//		store = nullstore.New()
//	}
//	limiter, err := keycap.NewLimiter(store)
//
// It implements every optional capability (Marker, Pauser, Pacer, Syncer),
// so that every front door accepts it, and never blocks.
package nullstore

import (
	"context"
	"time"

	"github.com/keycap/keycap"
)

// Store grants everything and keeps nothing. The zero value is ready.
type Store struct{}

// New returns a store that turns limits off.
func New() *Store { return &Store{} }

var (
	_ keycap.Store       = (*Store)(nil)
	_ keycap.Marker      = (*Store)(nil)
	_ keycap.Pauser      = (*Store)(nil)
	_ keycap.Pacer       = (*Store)(nil)
	_ keycap.Syncer      = (*Store)(nil)
	_ keycap.NonBlocking = (*Store)(nil)
	_ keycap.Sharer      = (*Store)(nil)
)

// Acquire grants every slot.
func (*Store) Acquire(context.Context, keycap.PoolID, keycap.Owner, int, time.Duration) (bool, error) {
	return true, nil
}

// Release does nothing.
func (*Store) Release(context.Context, keycap.PoolID, keycap.Owner) error { return nil }

// Renew renews every lease.
func (*Store) Renew(_ context.Context, batch []keycap.Renewal) error {
	for i := range batch {
		batch[i].Lost, batch[i].Err = false, nil
	}
	return nil
}

// Mark reports every mark as started now: a job's deadline never passes.
func (*Store) Mark(context.Context, keycap.PoolID, time.Duration) (time.Duration, bool, error) {
	return 0, true, nil
}

// Pause records nothing: no API is ever paused.
func (*Store) Pause(context.Context, keycap.PoolID, time.Duration) (time.Duration, error) {
	return 0, nil
}

// Paused reports nothing paused.
func (*Store) Paused(context.Context, keycap.PoolID) (time.Duration, error) { return 0, nil }

// Pace lets every event through.
func (*Store) Pace(context.Context, keycap.PoolID, keycap.Rate) (time.Duration, error) { return 0, nil }

// Sync keeps nothing and finds no ghost.
func (*Store) Sync(_ context.Context, _ keycap.NodeID, _ time.Duration, batch []keycap.SyncPool) error {
	for i := range batch {
		batch[i].Removed, batch[i].Err = 0, nil
	}
	return nil
}

// NonBlocking implements keycap.NonBlocking.
func (*Store) NonBlocking() {}

// AcquireDemand grants every demand, whatever its weight and parent.
func (*Store) AcquireDemand(context.Context, keycap.Demand, *keycap.Ticket) (bool, int, error) {
	return true, 0, nil
}

// ReleaseDemand does nothing.
func (*Store) ReleaseDemand(context.Context, keycap.Demand, bool) (bool, error) { return false, nil }
