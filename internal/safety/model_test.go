package safety

import (
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const tms = time.Millisecond

var bounds = Bounds{TTL: 100 * tms, Early: 2 * tms, Late: 5 * tms}

// h builds a history of operations (call and return in ms).
type h []porcupine.Operation

func (x h) add(client int, op Op, call, ret int, res Result) h {
	op.Call, op.Return = time.Duration(call)*tms, time.Duration(ret)*tms
	r := int64(op.Return)
	if res.Unknown {
		op.Return, r = Never, int64(Never)
	}
	return append(x, porcupine.Operation{ClientId: client, Input: op, Call: int64(op.Call), Output: res, Return: r})
}

func lock(kind Kind, owner int) Op {
	return Op{Kind: kind, Owner: owner, Weight: 1, Max: 1, Fence: kind == Acquire}
}

func granted(token uint64) Result { return Result{Granted: true, Token: token} }

// TestModel: histories the model must accept, and those it must refuse —
// so the checker can fail.
func TestModel(t *testing.T) {
	refused := Result{}
	ok := Result{}
	for _, tc := range []struct {
		name  string
		h     h
		legal bool
	}{
		{"one holder, then another after release", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, lock(Acquire, 2), 2, 3, refused).
			add(0, lock(Release, 1), 4, 5, ok).
			add(1, lock(Acquire, 2), 6, 7, granted(11)), true},
		{"two holders of a lock at once", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, lock(Acquire, 2), 2, 3, granted(11)), false},
		{"overlapping calls may order either way", h{}.
			add(0, lock(Acquire, 1), 0, 10, granted(10)).
			add(1, lock(Acquire, 2), 1, 11, refused), true},
		{"a grant once the holder's TTL has passed", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, lock(Acquire, 2), 110, 111, granted(11)).
			add(0, lock(Renew, 1), 112, 113, Result{Lost: true}), true},
		{"a grant before the holder's TTL can have passed", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, lock(Acquire, 2), 50, 51, granted(11)), false},
		{"a refusal long after the holder's lease expired", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, lock(Acquire, 2), 200, 201, refused), false},
		{"a renewal that keeps the lease", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(0, lock(Renew, 1), 60, 61, ok).
			add(1, lock(Acquire, 2), 140, 141, refused), true},
		{"a renewal of a lease that had expired", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(0, lock(Renew, 1), 200, 201, ok), false},
		{"a token not above the last", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(0, lock(Release, 1), 2, 3, ok).
			add(1, lock(Acquire, 2), 4, 5, granted(10)), false},
		{"an unknown acquire may have taken the slot", h{}.
			add(0, lock(Acquire, 1), 0, 1, Result{Unknown: true}).
			add(1, lock(Acquire, 2), 2, 3, refused), true},
		{"an unknown release may have freed it", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(0, lock(Release, 1), 2, 3, Result{Unknown: true}).
			add(1, lock(Acquire, 2), 4, 5, granted(11)), true},
		{"a parent over its total", h{}.
			add(0, Op{Kind: Acquire, Group: 2, Key: 0, Owner: 1, Weight: 2, Max: 2, Parent: 3}, 0, 1, granted(0)).
			add(1, Op{Kind: Acquire, Group: 2, Key: 1, Owner: 2, Weight: 2, Max: 2, Parent: 3}, 2, 3, granted(0)), false},
		{"a parent's keys within its total", h{}.
			add(0, Op{Kind: Acquire, Group: 2, Key: 0, Owner: 1, Weight: 2, Max: 2, Parent: 3}, 0, 1, granted(0)).
			add(1, Op{Kind: Acquire, Group: 2, Key: 1, Owner: 2, Weight: 2, Max: 2, Parent: 3}, 2, 3, refused).
			add(1, Op{Kind: Acquire, Group: 2, Key: 1, Owner: 2, Weight: 1, Max: 2, Parent: 3}, 4, 5, granted(0)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(1, tc.h, bounds, t.TempDir(), 10*time.Second)
			var v *Violation
			switch {
			case tc.legal && err != nil:
				t.Fatalf("a legal history refused: %v", err)
			case !tc.legal && !errors.As(err, &v):
				t.Fatalf("an illegal history accepted (%v)", err)
			case !tc.legal && (len(v.Around) == 0 || len(v.Around) > len(tc.h)):
				t.Fatalf("%d operations shown around the failure, of %d", len(v.Around), len(tc.h))
			}
		})
	}
}

// TestOveradmitted: holders certainly granted beyond a cap at once are
// counted, with how long; holders one after another are not.
func TestOveradmitted(t *testing.T) {
	crash := Op{Kind: Crash, Group: -1}
	after := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(0, lock(Release, 1), 20, 21, Result{}).
		add(1, lock(Acquire, 2), 22, 23, granted(11))
	if o := Overadmitted(after, bounds); o != (Overadmission{}) {
		t.Fatalf("one holder after another: %+v, want none", o)
	}
	// A crash loses holder 1's lease; holder 2 is granted 30 ms later and
	// holder 1 releases at 60 ms: 1 slot over for 30 ms.
	over := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(2, crash, 5, 6, Result{}).
		add(1, lock(Acquire, 2), 30, 31, granted(11)).
		add(0, lock(Release, 1), 61, 62, Result{})
	o := Overadmitted(over, bounds)
	if o.Slots != 1 || o.Longest != 30*tms || o.Total != 30*tms {
		t.Fatalf("a holder beside a crash's: %+v, want 1 slot for 30ms", o)
	}
	if err := Check(1, over, bounds, "", 10*time.Second); err != nil {
		t.Fatalf("the model refuses a crash's history: %v", err)
	}
}
