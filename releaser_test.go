package keycap_test

import (
	"context"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/store"
)

// silentReleaser is a store that breaks AsyncRelease's word: it never
// answers a release.
type silentReleaser struct{ *memstore.Store }

func (s silentReleaser) Features() store.Features { return s.Store.Features() | store.AsyncRelease }

func (silentReleaser) ReleaseAsync(store.PoolID, store.Owner, store.Demand, time.Duration, func(error)) {
}

// TestCloseBoundedWhenAReleaseIsNeverAnswered: Close waits for the releases
// in flight no longer than their budget and a second, even if the store
// never answers them.
func TestCloseBoundedWhenAReleaseIsNeverAnswered(t *testing.T) {
	t.Parallel()
	const budget = 50 * time.Millisecond
	l, err := keycap.NewLimiter(silentReleaser{memstore.New()}, keycap.WithDecisionBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(context.Background(), keycap.Spec{Name: "silent", Max: 1}.For("k"))
	if err != nil {
		t.Fatal(err)
	}
	ls.Release()
	done := make(chan struct{})
	start := time.Now()
	go func() { _ = l.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10s after a release its store never answered")
	}
	if took := time.Since(start); took > budget+3*time.Second {
		t.Errorf("Close took %s, past the budget of %s and its grace", took, budget)
	}
}
