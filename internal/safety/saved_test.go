package safety

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestSaveLoad: a saved history loads as it was, unknown outcomes
// included, and checks the same — a legal one passes, an illegal one fails.
func TestSaveLoad(t *testing.T) {
	legal := h{}.
		add(0, kid(Acquire, 0, 1, 1), 0, 1, granted(0)).
		add(1, kwait(0, 2, 2), 4, 5, behind(0)).
		add(2, lock(Acquire, 3), 6, 7, Result{Unknown: true}).
		add(2, lock(Release, 3), 8, 9, Result{})
	illegal := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(1, lock(Acquire, 2), 2, 3, granted(11))
	for _, tc := range []struct {
		name  string
		h     h
		legal bool
	}{{"legal", legal, true}, {"illegal", illegal, false}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "h.json")
			if err := Save(path, 42, bounds, tc.h); err != nil {
				t.Fatal(err)
			}
			s, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if s.Seed != 42 || s.Bounds != bounds || !reflect.DeepEqual(s.History, []porcupine.Operation(tc.h)) {
				t.Fatalf("loaded seed %d, bounds %+v, history\n%v\nwant 42, %+v,\n%v", s.Seed, s.Bounds, s.History, bounds, tc.h)
			}
			var v *Violation
			switch err := Check(s.Seed, s.History, s.Bounds, "", 10*time.Second); {
			case tc.legal && err != nil:
				t.Fatalf("the loaded legal history: %v", err)
			case !tc.legal && !errors.As(err, &v):
				t.Fatalf("the loaded illegal history: %v, want a violation", err)
			}
		})
	}
}

// TestCheckGivesUpOnMemory: past MemoryLimit, Check gives up on a history
// as unfinished, never as a violation.
func TestCheckGivesUpOnMemory(t *testing.T) {
	legal := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(0, lock(Release, 1), 2, 3, Result{})
	limit := MemoryLimit
	t.Cleanup(func() { MemoryLimit = limit })
	MemoryLimit = 1e-9 // below any process's
	var v *Violation
	if err := Check(1, legal, bounds, "", 10*time.Second); err == nil || errors.As(err, &v) || !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("Check past the memory limit: %v, want it given up", err)
	}
	MemoryLimit = limit
	if err := Check(1, legal, bounds, "", 10*time.Second); err != nil {
		t.Fatalf("Check within the memory limit: %v", err)
	}
}
