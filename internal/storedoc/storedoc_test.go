package storedoc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/storedoc"
)

func TestEveryInterfaceListsItsStores(t *testing.T) {
	docs := storedoc.Documented(t)
	if got := strings.Join(docs["Marker"], " "); got != "memstore nullstore pgstore redisstore" {
		t.Errorf("Marker lists %q", got)
	}
	if got := strings.Join(docs["Partitioner"], " "); got != "redisstore" {
		t.Errorf("Partitioner lists %q", got)
	}
}

// bare implements Store alone.
type bare struct{}

func (bare) Acquire(context.Context, keycap.PoolID, keycap.Owner, int, time.Duration) (bool, error) {
	return true, nil
}
func (bare) Release(context.Context, keycap.PoolID, keycap.Owner) error { return nil }
func (bare) Renew(context.Context, []keycap.Renewal) error              { return nil }

// TestCheckFails: a store listed where it implements nothing, and one that
// implements an interface without being listed, are both caught.
func TestCheckFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store keycap.Store
	}{
		{"memstore", bare{}}, // listed under Marker and others, implements none
		{"mystore", struct {
			bare
			keycap.NonBlocking
		}{}}, // implements NonBlocking, listed nowhere
	} {
		ft := &fakeT{TB: t}
		storedoc.Check(ft, tc.name, tc.store)
		if len(ft.errors) == 0 {
			t.Errorf("%s: Check found nothing wrong", tc.name)
		}
	}
}

type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Errorf(format string, a ...any) { f.errors = append(f.errors, format) }
func (f *fakeT) Failed() bool                   { return len(f.errors) > 0 }
