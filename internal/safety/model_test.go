package safety

import (
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const tms = time.Millisecond

var bounds = Bounds{TTL: 100 * tms, Early: 2 * tms, Late: 5 * tms, Ticket: 40 * tms, Claim: 20 * tms, Keep: 20 * tms}

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

// wait is an acquire of the lock with a ticket; leave, a release that
// leaves the line.
func wait(owner int) Op {
	op := lock(Acquire, owner)
	op.Fence, op.Line = false, true
	return op
}

func leave(owner int) Op {
	op := lock(Release, owner)
	op.Line = true
	return op
}

// kid is an operation on key's pool in a parent of 3 whose keys have a max
// of 2; kwait, its acquire with a ticket.
func kid(kind Kind, key, owner, weight int) Op {
	return Op{Kind: kind, Group: 2, Key: key, Owner: owner, Weight: weight, Max: 2, Parent: 3}
}

func kwait(key, owner, weight int) Op {
	op := kid(Acquire, key, owner, weight)
	op.Line = true
	return op
}

// kk is an operation on key's pool in a parent of 2 that keeps a slot its
// key frees (Bounds.Keep, 20 ms), whose keys have a max of 2 and shares
// of 4 (key 0) and 1 (key 1), as the workload's; kkwait, its acquire with
// a ticket.
func kk(kind Kind, key, owner, weight int) Op {
	return Op{Kind: kind, Group: 3, Key: key, Owner: owner, Weight: weight, Max: 2, Parent: 2, Share: []int{4, 1}[key], Keep: true}
}

func kkwait(key, owner, weight int) Op {
	op := kk(Acquire, key, owner, weight)
	op.Line = true
	return op
}

// fs is an operation on key's pool in a parent of 4 whose two keys have
// maxes of 6 (key 0) and 4 (key 1) and shares of 4 and 1; fswait, its
// acquire with a ticket.
func fs(kind Kind, key, owner, weight int) Op {
	return Op{Kind: kind, Group: 4, Key: key, Owner: owner, Weight: weight, Max: []int{6, 4}[key], Parent: 4, Share: []int{4, 1}[key]}
}

func fswait(key, owner, weight int) Op {
	op := fs(Acquire, key, owner, weight)
	op.Line = true
	return op
}

// behind is a refusal with n tickets ahead.
func behind(n int) Result { return Result{Ahead: n} }

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
		// A waiter's call places its key again, passing the head tickets
		// that have expired (a head its key's max held back, whose caller
		// is gone), so the ticket behind it has none ahead: as any call
		// of the parent may pass a dead head (fillParent), never a live
		// one.
		{"a waiter's call passes its key's dead head", h{}.
			add(0, kid(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kid(Acquire, 1, 4, 2), 2, 3, granted(0)).
			add(1, kwait(0, 2, 2), 4, 5, behind(0)).
			add(2, kwait(0, 3, 1), 6, 7, behind(1)).
			add(2, kwait(0, 3, 1), 60, 61, behind(0)), true},
		{"a waiter's call passes its key's live head", h{}.
			add(0, kid(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kid(Acquire, 1, 4, 2), 2, 3, granted(0)).
			add(1, kwait(0, 2, 2), 4, 5, behind(0)).
			add(2, kwait(0, 3, 1), 6, 7, behind(1)).
			add(2, kwait(0, 3, 1), 20, 21, behind(0)), false},
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
		// Kept slots (WithKeep): 20 ms for the key's next callers.
		{"slots kept for their key go to its next callers", h{}.
			add(0, kk(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kkwait(1, 2, 1), 2, 3, behind(0)).
			add(0, kk(Release, 0, 1, 2), 4, 5, Result{Kept: true}).
			add(1, kkwait(1, 2, 1), 6, 7, behind(0)).
			add(0, kk(Acquire, 0, 3, 1), 8, 9, granted(0)).
			add(0, kk(Acquire, 0, 4, 1), 10, 11, granted(0)), true},
		{"kept slots pass on to the line once their time is up", h{}.
			add(0, kk(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kkwait(1, 2, 1), 2, 3, behind(0)).
			add(0, kk(Release, 0, 1, 2), 4, 5, Result{Kept: true}).
			add(1, kkwait(1, 2, 1), 40, 41, granted(0)), true},
		{"kept slots given to another key before their time is up", h{}.
			add(0, kk(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kkwait(1, 2, 1), 2, 3, behind(0)).
			add(0, kk(Release, 0, 1, 2), 4, 5, Result{Kept: true}).
			add(1, kkwait(1, 2, 1), 6, 7, granted(0)), false},
		{"a slot kept while no other key waits", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Release, 0, 1, 1), 2, 3, Result{Kept: true}), false},
		// Seed 253511448802 of TestHistoriesMemstore, reduced: the key's
		// only ticket has expired, unmet, when its holder's release keeps
		// (key 0, holding nothing then, comes before key 1, holding 1).
		{"a slot kept while its key's only ticket has expired", h{}.
			add(0, kk(Acquire, 0, 2, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 1, 1, 1), 2, 3, granted(0)).
			add(1, kkwait(0, 3, 2), 4, 5, behind(0)).
			add(2, kkwait(1, 4, 1), 6, 7, behind(0)).
			add(2, kkwait(1, 4, 1), 30, 31, behind(0)).
			add(0, kk(Release, 0, 2, 1), 60, 61, Result{Kept: true}).
			add(0, kk(Acquire, 0, 5, 1), 62, 63, granted(0)), true},
		{"a slot kept while its key's ticket is live", h{}.
			add(0, kk(Acquire, 0, 2, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 1, 1, 1), 2, 3, granted(0)).
			add(1, kkwait(0, 3, 2), 4, 5, behind(0)).
			add(2, kkwait(1, 4, 1), 6, 7, behind(0)).
			add(1, kkwait(0, 3, 2), 28, 29, behind(0)).
			add(2, kkwait(1, 4, 1), 30, 31, behind(0)).
			add(0, kk(Release, 0, 2, 1), 60, 61, Result{Kept: true}), false},
		{"a slot kept while the other key's only ticket has expired", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 1, 3, 1), 2, 3, granted(0)).
			add(1, kkwait(1, 2, 1), 4, 5, behind(0)).
			add(0, kk(Release, 0, 1, 1), 60, 61, Result{Kept: true}), false},
		{"a slot kept while the other key's ticket is live", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 1, 3, 1), 2, 3, granted(0)).
			add(1, kkwait(1, 2, 1), 4, 5, behind(0)).
			add(1, kkwait(1, 2, 1), 30, 31, behind(0)).
			add(0, kk(Release, 0, 1, 1), 60, 61, Result{Kept: true}), true},
		// Kept when the key would come first: key 0, holding nothing
		// then, before key 1 holding 1; not when key 0 holds 1 of its
		// share of 4 and key 1 nothing.
		{"a slot not kept while its key would come first", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 1, 3, 1), 2, 3, granted(0)).
			add(1, kkwait(1, 2, 1), 4, 5, behind(0)).
			add(0, kk(Release, 0, 1, 1), 6, 7, ok), false},
		{"a slot kept while the other key holds fewer for its share", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 0, 3, 1), 2, 3, granted(0)).
			add(1, kkwait(1, 2, 1), 4, 5, behind(0)).
			add(0, kk(Release, 0, 1, 1), 6, 7, Result{Kept: true}), false},
		{"a slot not kept while the other key holds fewer for its share", h{}.
			add(0, kk(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kk(Acquire, 0, 3, 1), 2, 3, granted(0)).
			add(1, kkwait(1, 2, 1), 4, 5, behind(0)).
			add(0, kk(Release, 0, 1, 1), 6, 7, ok).
			add(1, kkwait(1, 2, 1), 8, 9, granted(0)), true},
		{"a kept slot refused to its key's next caller", h{}.
			add(0, kk(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kkwait(1, 2, 1), 2, 3, behind(0)).
			add(0, kk(Release, 0, 1, 2), 4, 5, Result{Kept: true}).
			add(0, kk(Acquire, 0, 3, 1), 6, 7, refused), false},
		// Lines: a ticket lasts 40 ms, a slot handed to it 20 ms.
		{"a freed slot goes to the head of the line", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 4, 5, behind(1)).
			add(0, lock(Release, 1), 6, 7, ok).
			add(2, wait(3), 8, 9, behind(0)).
			add(1, wait(2), 10, 11, granted(0)), true},
		{"the second in line served before the head", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 4, 5, behind(1)).
			add(0, lock(Release, 1), 6, 7, ok).
			add(2, wait(3), 8, 9, granted(0)), false},
		{"a place in the line misreported", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 4, 5, behind(0)), false},
		{"a caller without a ticket granted over a live one", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(1, wait(2), 90, 91, behind(0)).
			add(2, lock(Acquire, 3), 110, 111, granted(11)), false},
		{"a caller without a ticket refused while one waits", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(1, wait(2), 90, 91, behind(0)).
			add(2, lock(Acquire, 3), 110, 111, refused).
			add(1, wait(2), 112, 113, granted(0)), true},
		{"a caller granted once the line's ticket expired", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, lock(Acquire, 3), 110, 111, granted(11)), true},
		{"an expired ticket keeps its place when its owner comes back", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 44, 45, behind(1)).
			add(1, wait(2), 60, 61, behind(0)), true},
		{"a waiter at the head served once the slot lapses", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(1, wait(2), 40, 41, behind(0)).
			add(1, wait(2), 80, 81, behind(0)).
			add(1, wait(2), 110, 111, granted(0)), true},
		{"a waiter at the head refused with the slot free", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(1, wait(2), 40, 41, behind(0)).
			add(1, wait(2), 80, 81, behind(0)).
			add(1, wait(2), 110, 111, behind(0)), false},
		{"a line longer than the tickets in it", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 44, 45, behind(1)).
			add(1, wait(2), 60, 61, behind(2)), false},
		{"a waiter that left is not served", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(2, wait(3), 4, 5, behind(1)).
			add(1, leave(2), 6, 7, ok).
			add(0, lock(Release, 1), 8, 9, ok).
			add(2, wait(3), 10, 11, granted(0)), true},
		{"a handed slot lapses after its claim", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(0, lock(Release, 1), 6, 7, ok).
			add(2, lock(Acquire, 3), 40, 41, granted(11)), true},
		// A parent of 3, keys of max 2: the parent's full, then a key's
		// line waits.
		{"a parent's freed slots go to a waiting key's head", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(1, 3, 1), 4, 5, behind(0)).
			add(0, kid(Release, 0, 1, 2), 6, 7, ok).
			add(2, kwait(1, 3, 1), 8, 9, granted(0)), true},
		{"a parent's head refused with its slots free", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(1, 3, 1), 4, 5, behind(0)).
			add(0, kid(Release, 0, 1, 2), 6, 7, ok).
			add(2, kwait(1, 3, 1), 8, 9, behind(0)), false},
		{"a key's head served over the parent's total", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(2, 3, 1), 4, 5, behind(0)).
			add(2, kwait(2, 3, 1), 8, 9, granted(0)), false},
		{"the second in a key's line served before its head", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(2, 3, 1), 4, 5, behind(0)).
			add(3, kwait(2, 4, 1), 6, 7, behind(1)).
			add(1, kid(Release, 1, 2, 1), 8, 9, ok).
			add(3, kwait(2, 4, 1), 10, 11, granted(0)), false},
		{"a key's newcomer refused with room while another key's head waits for more", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(2, 3, 2), 4, 5, behind(0)).
			add(1, kid(Release, 1, 2, 1), 6, 7, ok).
			add(1, kid(Acquire, 1, 4, 1), 8, 9, refused), true},
		{"a key's newcomer granted with room while another key's head waits for more", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, kwait(2, 3, 2), 4, 5, behind(0)).
			add(1, kid(Release, 1, 2, 1), 6, 7, ok).
			add(1, kid(Acquire, 1, 4, 1), 8, 9, granted(0)), true},
		{"a key's newcomer refused with room and nobody waiting", h{}.
			add(0, kid(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, kid(Acquire, 1, 2, 1), 2, 3, refused), false},
		{"a key's newcomer refused with room while its own head waits for more", h{}.
			add(0, kid(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kid(Acquire, 0, 5, 1), 2, 3, granted(0)).
			add(1, kid(Acquire, 2, 2, 1), 4, 5, granted(0)).
			add(2, kwait(1, 3, 2), 6, 7, behind(0)).
			add(0, kid(Release, 0, 1, 1), 8, 9, ok).
			add(3, kid(Acquire, 1, 4, 1), 10, 11, refused), true},
		{"a key's newcomer granted over its own line", h{}.
			add(0, kid(Acquire, 0, 1, 1), 0, 1, granted(0)).
			add(0, kid(Acquire, 0, 5, 1), 2, 3, granted(0)).
			add(1, kid(Acquire, 2, 2, 1), 4, 5, granted(0)).
			add(2, kwait(1, 3, 2), 6, 7, behind(0)).
			add(0, kid(Release, 0, 1, 1), 8, 9, ok).
			add(3, kid(Acquire, 1, 4, 1), 10, 11, granted(0)), false},
		// Key 0 holds 2 slots for its share of 4, key 1 one for its 1:
		// key 0 comes first, though it holds more.
		{"a parent's freed slot goes to the key that holds fewer for its share", h{}.
			add(0, fs(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, fs(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(1, fs(Acquire, 1, 5, 1), 4, 5, granted(0)).
			add(2, fswait(0, 3, 1), 6, 7, behind(0)).
			add(3, fswait(1, 4, 1), 8, 9, behind(0)).
			add(1, fs(Release, 1, 5, 1), 10, 11, ok).
			add(3, fswait(1, 4, 1), 12, 13, behind(0)).
			add(2, fswait(0, 3, 1), 14, 15, granted(0)), true},
		{"a parent's freed slot goes to the key that holds more for its share", h{}.
			add(0, fs(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, fs(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(1, fs(Acquire, 1, 5, 1), 4, 5, granted(0)).
			add(2, fswait(0, 3, 1), 6, 7, behind(0)).
			add(3, fswait(1, 4, 1), 8, 9, behind(0)).
			add(1, fs(Release, 1, 5, 1), 10, 11, ok).
			add(3, fswait(1, 4, 1), 12, 13, granted(0)), false},
		{"a key's newcomer refused with room while a key that holds fewer for its share waits", h{}.
			add(0, fs(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, fs(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, fswait(0, 3, 2), 4, 5, behind(0)).
			add(1, fs(Acquire, 1, 4, 1), 6, 7, refused), true},
		{"a key's newcomer granted with room while a key that holds fewer for its share waits", h{}.
			add(0, fs(Acquire, 0, 1, 2), 0, 1, granted(0)).
			add(1, fs(Acquire, 1, 2, 1), 2, 3, granted(0)).
			add(2, fswait(0, 3, 2), 4, 5, behind(0)).
			add(1, fs(Acquire, 1, 4, 1), 6, 7, granted(0)), false},
		{"a key's newcomer granted with room while a key that holds more for its share waits", h{}.
			add(0, fs(Acquire, 0, 1, 3), 0, 1, granted(0)).
			add(2, fswait(0, 3, 2), 2, 3, behind(0)).
			add(1, fs(Acquire, 1, 4, 1), 4, 5, granted(0)), true},
		{"a handed slot taken within its claim", h{}.
			add(0, lock(Acquire, 1), 0, 1, granted(10)).
			add(1, wait(2), 2, 3, behind(0)).
			add(0, lock(Release, 1), 6, 7, ok).
			add(2, lock(Acquire, 3), 20, 21, granted(11)), false},
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

// TestModelSweeps: a store that sweeps (pgstore) may drop a key's expired
// ticket from the middle of its line; one that does not (memstore, Redis)
// may not; neither may drop a live one.
func TestModelSweeps(t *testing.T) {
	expired := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(1, wait(2), 2, 3, behind(0)).
		add(2, wait(3), 4, 5, behind(1)).
		add(1, wait(2), 30, 31, behind(0)).
		add(3, wait(4), 32, 33, behind(2)).
		add(1, wait(2), 60, 61, behind(0)).
		add(2, wait(3), 80, 81, behind(2))
	live := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(1, wait(2), 2, 3, behind(0)).
		add(2, wait(3), 4, 5, behind(1)).
		add(2, wait(3), 20, 21, behind(0))
	sweeps := bounds
	sweeps.Sweeps = true
	for _, tc := range []struct {
		name  string
		h     h
		b     Bounds
		legal bool
	}{
		{"an expired ticket swept from the middle, by a store that sweeps", expired, sweeps, true},
		{"an expired ticket swept from the middle, by a store that does not", expired, bounds, false},
		{"a live ticket swept, by a store that sweeps", live, sweeps, false},
		{"a live ticket swept, by a store that does not", live, bounds, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(1, tc.h, tc.b, t.TempDir(), 10*time.Second)
			var v *Violation
			switch {
			case tc.legal && err != nil:
				t.Fatalf("a legal history refused: %v", err)
			case !tc.legal && !errors.As(err, &v):
				t.Fatalf("an illegal history accepted (%v)", err)
			}
		})
	}
}

// TestModelServesLater: seed 155309611401 of TestHistoriesRedis, as
// recorded (the lock, µs kept). o1's release freed the slot, and o5's
// acquire handed it to o3 at the head; o3 did not claim it within 60 ms,
// and the release's second call, still within its interval, dropped that
// lapsed lease and handed the slot to o5. o3 then waited again at the
// head, and o10 after o3 had been served in turn. A model whose release
// serves the line only where it frees the slot refuses the history;
// redisstore's release frees, then hands on (Bounds.ServesLater).
func TestModelServesLater(t *testing.T) {
	at := func(x h, client int, op Op, call, ret float64, res Result) h {
		op.Call, op.Return = time.Duration(call*1000)*time.Microsecond, time.Duration(ret*1000)*time.Microsecond
		return append(x, porcupine.Operation{ClientId: client, Input: op, Call: int64(op.Call), Output: res, Return: int64(op.Return)})
	}
	acquire := func(owner int) Op { op := lock(Acquire, owner); op.Fence = false; return op }
	hist := at(h{}, 0, wait(2), 1163.7, 1164.0, granted(0))
	hist = at(hist, 0, lock(Release, 2), 1164.8, 1164.9, Result{})
	hist = at(hist, 0, acquire(1), 1233.7, 1233.9, granted(0))
	hist = at(hist, 1, wait(3), 1238.6, 1238.8, behind(0))
	hist = at(hist, 0, lock(Release, 1), 1257.3, 1378.6, Result{})
	hist = at(hist, 1, wait(5), 1259.6, 1326.1, behind(0))
	hist = at(hist, 1, wait(3), 1365.3, 1437.6, behind(0))
	hist = at(hist, 3, wait(10), 1401.8, 1402.0, behind(0))
	hist = at(hist, 3, wait(10), 1402.5, 1402.6, behind(0))
	hist = at(hist, 1, acquire(4), 1451.9, 1613.7, Result{})
	hist = at(hist, 1, wait(5), 1651.5, 1729.0, granted(0))
	run := Bounds{TTL: 300 * tms, Early: 3 * tms, Late: 20 * tms, Ticket: 150 * tms, Claim: 60 * tms, Keep: 60 * tms}
	var v *Violation
	if err := Check(155309611401, hist, run, "", 10*time.Second); !errors.As(err, &v) {
		t.Fatalf("a release that serves where it frees: the history accepted (%v)", err)
	}
	run.ServesLater = true
	if err := Check(155309611401, hist, run, "", 10*time.Second); err != nil {
		t.Fatalf("a release that serves later: the history refused: %v", err)
	}
}

// slotsOver fails t unless the model accepts hist and its sweep counts want
// slots over a cap at most.
func slotsOver(t *testing.T, name string, hist h, want int) {
	t.Helper()
	if err := Check(1, hist, bounds, "", 10*time.Second); err != nil {
		t.Fatalf("%s: the model refuses it: %v", name, err)
	}
	if o := Overadmitted(hist, bounds); o.Slots != want {
		t.Fatalf("%s: want %d slots over, got %s", name, want, o.Explain(hist, bounds))
	}
}

// TestOveradmitted: holders certainly granted beyond a cap at once are
// counted, with how long; holders one after another are not.
func TestOveradmitted(t *testing.T) {
	ok := Result{}
	crash := Op{Kind: Crash, Group: -1}
	after := h{}.
		add(0, lock(Acquire, 1), 0, 1, granted(10)).
		add(0, lock(Release, 1), 20, 21, Result{}).
		add(1, lock(Acquire, 2), 22, 23, granted(11))
	if o := Overadmitted(after, bounds); o.Slots != 0 || o.Total != 0 || o.Witness != nil {
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
	if len(o.Witness) != 2 || o.Witness[0] != over[0] || o.Witness[1] != over[2] {
		t.Fatalf("witness %v, want both grants:\n%s", o.Witness, o.Explain(over, bounds))
	}
	if err := Check(1, over, bounds, "", 10*time.Second); err != nil {
		t.Fatalf("the model refuses a crash's history: %v", err)
	}
	// A slot handed to a ticket is extended, with its weight, by its
	// owner's grant of two: 2 + 1 of 3, not 2 + 2.
	pool := func(kind Kind, owner, weight int) Op {
		return Op{Kind: kind, Owner: owner, Weight: weight, Max: 3}
	}
	waiting := pool(Acquire, 2, 1)
	waiting.Line = true
	handed := h{}.
		add(0, pool(Acquire, 1, 2), 0, 1, granted(0)).
		add(1, pool(Acquire, 3, 1), 2, 3, granted(0)).
		add(2, waiting, 4, 5, behind(0)).
		add(1, pool(Release, 3, 1), 6, 7, ok).
		add(2, pool(Acquire, 2, 2), 8, 9, granted(0))
	slotsOver(t, "a handed slot extended", handed, 0)
	// A release of unknown outcome may have left its lease, which the
	// owner's grant of two then extends with its weight of one: 1 + 1 of 2
	// (seed 440481970073 of TestHistoriesPostgresFaults, which counted 2).
	two := func(kind Kind, owner, weight int) Op {
		return Op{Kind: kind, Owner: owner, Weight: weight, Max: 2}
	}
	left := h{}.
		add(0, two(Acquire, 11, 1), 0, 1, granted(0)).
		add(1, two(Acquire, 5, 1), 10, 11, granted(0)).
		add(1, two(Release, 5, 0), 12, 13, Result{Unknown: true}).
		add(1, two(Acquire, 5, 2), 14, 15, granted(0))
	slotsOver(t, "a lease an unknown release left, extended", left, 0)
	// So may a lease past its earliest expiry but not its latest.
	late := h{}.
		add(0, two(Acquire, 11, 1), 0, 1, granted(0)).
		add(1, two(Acquire, 5, 1), 10, 11, granted(0)).
		add(0, two(Renew, 11, 0), 50, 51, ok).
		add(1, two(Acquire, 5, 2), 10+100-1, 10+100, granted(0))
	slotsOver(t, "a lease near its expiry, extended", late, 0)
	// A grant again whose call outlived the lease (its client stopped):
	// the lease may have lapsed, another holder taken both slots and
	// released them, and the grant come after (seed 595857276463 of
	// TestHistoriesRedisProcesses, which counted 1 slot over for 205 ms).
	outlived := h{}.
		add(0, two(Acquire, 6, 1), 0, 1, granted(0)).
		add(0, two(Acquire, 6, 1), 50, 200, granted(0)).
		add(1, two(Acquire, 9, 2), 100, 101, granted(0)).
		add(1, two(Release, 9, 0), 150, 151, ok)
	slotsOver(t, "a grant that outlived its lease", outlived, 0)
	// A ticket long expired (and its claim window past) brings nothing:
	// its owner's later grant of two counts two: 2 + 1 + 2 of 3 after a
	// crash.
	old := h{}.
		add(0, pool(Acquire, 1, 2), 0, 1, granted(0)).
		add(1, pool(Acquire, 3, 1), 2, 3, granted(0)).
		add(2, waiting, 4, 5, behind(0)).
		add(3, crash, 10, 11, Result{}).
		add(2, pool(Acquire, 2, 2), 80, 81, granted(0))
	slotsOver(t, "beside an old ticket", old, 2)
}
