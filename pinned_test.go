package keycap_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/memstore"
)

// TestDoPinnedReportsAsALease runs Do through each of its outcomes twice:
// on memstore, where its slot is pinned and no Lease is made, and on the
// same store with its Pinner hidden, where Do takes a Lease. Both must
// return the same errors, send the same events in the same order, run fn
// the same way and leave the pool free.
func TestDoPinnedReportsAsALease(t *testing.T) {
	type outcome struct {
		err    string
		events []string
		ran    bool
	}
	scenarios := []struct {
		name string
		run  func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) outcome
	}{
		{"granted", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return errors.New("fn's") }, lim)
			o.err = fmt.Sprint(err)
			return o
		}},
		{"refused", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			ls := acquire(t, l, lim)
			defer ls.Release()
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim)
			var le *keycap.LimitError
			if !errors.As(err, &le) || le.Limit.Pool() != lim.Pool() {
				t.Errorf("Do on a full pool = %v, want its *LimitError", err)
			}
			o.err = fmt.Sprint(err)
			return o
		}},
		{"max-0-by-override", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			if err := l.SetOverride(context.Background(), keycap.Override{Name: lim.Name(), Key: lim.Key(), Max: 0}); err != nil {
				t.Fatal(err)
			}
			err := l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim)
			o.err = fmt.Sprint(err)
			if err := l.ResetOverride(context.Background(), lim.Family(), lim.Name(), lim.Key()); err != nil {
				t.Fatal(err)
			}
			return o
		}},
		{"ended-context", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			o.err = fmt.Sprint(l.Do(ctx, func(context.Context) error { o.ran = true; return nil }, lim))
			return o
		}},
		{"fn-panics", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			defer func() { o.err = fmt.Sprint(recover()) }()
			_ = l.Do(context.Background(), func(context.Context) error { o.ran = true; panic("fn") }, lim)
			return o
		}},
		{"observer-panics", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			defer func() { o.err = fmt.Sprint(recover()) }()
			panicky := limit(t, lim.Name(), lim.Key(), 1, keycap.WithTTL(time.Hour)) // the observer panics on its SlotAcquired
			_ = l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, panicky)
			return o
		}},
		{"closed", func(t *testing.T, l *keycap.Limiter, lim keycap.Limit) (o outcome) {
			_ = l.Close()
			o.err = fmt.Sprint(l.Do(context.Background(), func(context.Context) error { o.ran = true; return nil }, lim))
			return o
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var got [2]outcome
			for i, pinned := range []bool{true, false} {
				var s keycap.Store = memstore.New()
				if !pinned {
					s = renewed{Store: memstore.New()}
				}
				rec := &keycaptest.Recorder{}
				obs := keycap.ObserverFunc(func(e keycap.Event) {
					rec.Observe(e)
					if e.Kind == keycap.SlotAcquired && e.Limit.TTL() == time.Hour {
						panic("observer")
					}
				})
				l, err := keycap.NewLimiter(s, keycap.WithObserver(obs), keycap.WithOverrides(time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				lim := limit(t, "pin", "k", 1)
				got[i] = sc.run(t, l, lim)
				for _, e := range rec.Events() {
					if e.Kind == keycap.SlotReleased && e.Held <= 0 {
						t.Errorf("pinned %v: %v held %v", pinned, e.Kind, e.Held)
					}
					got[i].events = append(got[i].events, fmt.Sprintf("%v %s/%s waited %v", e.Kind, e.Limit.Name(), e.Limit.Key(), e.Waited))
				}
				if sc.name != "closed" {
					// The pool is free again: taken by another Limiter on the store.
					l2, _ := newLimiter(t, s)
					acquire(t, l2, lim).Release()
				}
			}
			if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
				t.Errorf("pinned Do:  %+v\nleased Do: %+v", got[0], got[1])
			}
		})
	}
}
