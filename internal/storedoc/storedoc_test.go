package storedoc_test

import (
	"context"
	"math/bits"
	"strings"
	"testing"

	"github.com/keycap/keycap/internal/storedoc"
	"github.com/keycap/keycap/store"
)

func TestEveryFeatureListsItsStores(t *testing.T) {
	docs := storedoc.Documented(t)
	if got := strings.Join(docs[store.Marks], " "); got != "memstore nullstore pgstore redisstore" {
		t.Errorf("Marks lists %q", got)
	}
	if got := strings.Join(docs[store.Partitions], " "); got != "redisstore" {
		t.Errorf("Partitions lists %q", got)
	}
	if len(docs) != bits.OnesCount32(uint32(store.AllFeatures)) {
		t.Errorf("%d features documented, want every one of %s", len(docs), store.AllFeatures)
	}
}

// bare has no feature.
type bare struct{ store.Unsupported }

func (bare) Acquire(context.Context, store.PoolID, store.Owner, store.Demand) (store.Grant, error) {
	return store.Grant{Granted: true}, nil
}
func (bare) Release(context.Context, store.PoolID, store.Owner, store.Demand, bool) (bool, error) {
	return false, nil
}
func (bare) Renew(context.Context, []store.Renewal) error { return nil }

// inProcess declares one feature.
type inProcess struct{ bare }

func (inProcess) Features() store.Features { return store.InProcess }

// TestCheckFails: a store listed where it declares nothing, and one that
// declares a feature without being listed, are both caught.
func TestCheckFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store store.Store
	}{
		{"memstore", bare{}},     // listed under Marks and others, declares none
		{"mystore", inProcess{}}, // declares InProcess, listed nowhere
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
