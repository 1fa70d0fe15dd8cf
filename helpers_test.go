package keycap_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }

// faultStore wraps a real store and can make it fail, block or lose leases,
// and counts the calls that reach it.
type faultStore struct {
	store.Store
	fail     atomic.Bool   // every call fails with errDown
	block    atomic.Bool   // Acquire blocks until its context ends
	lostPool atomic.Value  // store.PoolID whose renewals report Lost
	failPool atomic.Value  // store.PoolID whose Acquire fails with errDown
	acquires atomic.Int64  // Acquire calls
	renews   atomic.Int64  // Renew calls
	renewed  atomic.Int64  // leases in all Renew batches
	batches  chan int      // sizes of Renew batches, if not nil
	entered  chan struct{} // closed... signalled when a blocking Acquire starts
}

var errDown = errors.New("store is down (injected)")

func newFaultStore() *faultStore {
	return &faultStore{Store: memstore.New(), entered: make(chan struct{}, 100)}
}

// Features declares none: the store is plain, and not in the process, so
// that the decision budget applies to its calls (block).
func (f *faultStore) Features() store.Features { return 0 }

func (f *faultStore) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	f.acquires.Add(1)
	if f.block.Load() {
		f.entered <- struct{}{}
		<-ctx.Done()
		return store.Grant{}, ctx.Err()
	}
	if fp, _ := f.failPool.Load().(store.PoolID); f.fail.Load() || fp == pool {
		return store.Grant{}, errDown
	}
	return f.Store.Acquire(ctx, pool, owner, d)
}

func (f *faultStore) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	if f.fail.Load() {
		return false, errDown
	}
	return f.Store.Release(ctx, pool, owner, d, leave)
}

func (f *faultStore) Renew(ctx context.Context, batch []store.Renewal) error {
	f.renews.Add(1)
	f.renewed.Add(int64(len(batch)))
	if f.batches != nil {
		f.batches <- len(batch)
	}
	if f.fail.Load() {
		return errDown
	}
	if err := f.Store.Renew(ctx, batch); err != nil {
		return err
	}
	if lp, ok := f.lostPool.Load().(store.PoolID); ok {
		for i := range batch {
			if batch[i].Pool == lp {
				batch[i].Lost = true
			}
		}
	}
	return nil
}

// plainStore declares no feature: of the store it wraps, it serves plain
// slots only (Acquire, Release, Renew).
type plainStore struct{ store.Store }

func (plainStore) Features() store.Features { return 0 }

// last returns the last event of kind k.
func last(r *keycaptest.Recorder, k keycap.EventKind) (keycap.Event, bool) {
	ev := r.Events()
	for i := len(ev) - 1; i >= 0; i-- {
		if ev[i].Kind == k {
			return ev[i], true
		}
	}
	return keycap.Event{}, false
}

func newLimiter(t *testing.T, s keycap.Store, opts ...keycap.Option) (*keycap.Limiter, *keycaptest.Recorder) {
	t.Helper()
	rec := &keycaptest.Recorder{}
	l, err := keycap.NewLimiter(s, append([]keycap.Option{keycap.WithObserver(rec)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, rec
}

// limit returns s's limit of key, failing t if s is invalid.
func limit(t *testing.T, s keycap.Spec, key string) keycap.Limit {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s.For(key)
}

func acquire(t *testing.T, l *keycap.Limiter, limits ...keycap.Limit) *keycap.Lease {
	t.Helper()
	ls, err := l.Acquire(context.Background(), limits...)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return ls
}

func refused(t *testing.T, l *keycap.Limiter, want keycap.Limit, limits ...keycap.Limit) *keycap.LimitError {
	t.Helper()
	_, err := l.Acquire(context.Background(), limits...)
	var le *keycap.LimitError
	if !errors.Is(err, keycap.ErrLimitExceeded) || !errors.As(err, &le) {
		t.Fatalf("Acquire = %v, want a *LimitError", err)
	}
	if le.Limit.Pool() != want.Pool() {
		t.Fatalf("refused by %s key %q, want %s key %q", le.Limit, le.Limit.Key(), want, want.Key())
	}
	return le
}
