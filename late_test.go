package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// lateStore grants its first acquire of a pool, then answers only after
// the caller's deadline: a store that took the slot but whose answer came
// too late. It has no lines and blocks (its calls get the budget).
type lateStore struct {
	store.Store
	late chan struct{} // closed once an acquire was answered late
}

func (s *lateStore) Features() store.Features { return 0 }

func (s *lateStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	g, err := s.Store.Acquire(ctx, pool, owner, d)
	select {
	case <-s.late:
		return g, err
	default:
	}
	<-ctx.Done() // granted, but the answer comes after the budget
	close(s.late)
	return store.Grant{}, ctx.Err()
}

// TestSlotGrantedLateIsFreed: a slot the store granted after the budget ran
// out is given back, whether the limit fails open or closed and whether
// its caller waits (a store without lines: it polls), so that the key is
// not held for a TTL by nobody.
func TestSlotGrantedLateIsFreed(t *testing.T) {
	for _, mode := range []keycap.FailMode{keycap.FailOpen, keycap.FailClosed} {
		for _, wait := range []time.Duration{0, time.Second} {
			t.Run(fmt.Sprintf("%s/wait=%s", mode, wait), func(t *testing.T) {
				st := &lateStore{Store: memstore.New(), late: make(chan struct{})}
				l, _ := newLimiter(t, st)
				spec := keycap.Spec{Name: "late", Max: 1, TTL: time.Hour, Wait: wait, Budget: 20 * time.Millisecond, FailMode: mode}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				lease, err := l.Acquire(ctx, spec.For("k"))
				switch mode {
				case keycap.FailOpen:
					if err != nil || lease.Guarded() {
						t.Fatalf("Acquire = %v (guarded %v), want an unguarded lease", err, lease.Guarded())
					}
				case keycap.FailClosed:
					if !errors.Is(err, keycap.ErrStoreUnavailable) {
						t.Fatalf("Acquire = %v, want ErrStoreUnavailable", err)
					}
				}
				lease.Release()
				other := keycap.Spec{Name: "late", Max: 1, TTL: time.Hour}
				testkit.WaitUntil(t, 5*time.Second, "the slot granted late to be freed", func() bool {
					ls, err := l.Acquire(ctx, other.For("k"))
					ls.Release()
					return err == nil && ls.Guarded()
				})
			})
		}
	}
}
