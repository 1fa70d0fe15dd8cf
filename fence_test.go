package keycap_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/nullstore"
	"github.com/keycap/keycap/store"
)

// token returns the one fencing token of ls, failing t when it has none.
func token(t *testing.T, ls *keycap.Lease, want keycap.Limit) uint64 {
	t.Helper()
	f := ls.Fences()
	if len(f) != 1 || f[0].Limit.Pool() != want.Pool() || f[0].Token == 0 {
		t.Fatalf("fences %+v, want one token of %s", f, want)
	}
	return f[0].Token
}

// TestFencesGrowWithEachGrant: each grant of a fenced limit carries a
// token above the last one's; Do's function finds the tokens in its
// context; an unfenced limit carries none.
func TestFencesGrowWithEachGrant(t *testing.T) {
	l, _ := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "fence", Max: 1, Fence: true}, "k")
	ls := acquire(t, l, lim)
	t1 := token(t, ls, lim)
	refused(t, l, lim, lim)
	ls.Release()
	ls = acquire(t, l, lim, limit(t, keycap.Spec{Name: "plain", Max: 1}, "k"))
	if t2 := token(t, ls, lim); t2 <= t1 {
		t.Fatalf("second grant's token %d, want above %d", t2, t1)
	}
	ls.Release()

	var seen []keycap.Fence
	if err := l.Do(context.Background(), func(ctx context.Context) error {
		seen = keycap.FencesFrom(ctx)
		return nil
	}, lim); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0].Token <= t1 {
		t.Fatalf("Do's context carries %+v, want the grant's token", seen)
	}
	if err := l.Do(context.Background(), func(ctx context.Context) error {
		if f := keycap.FencesFrom(ctx); f != nil {
			t.Errorf("an unfenced limit's context carries %+v", f)
		}
		return nil
	}, limit(t, keycap.Spec{Name: "plain", Max: 1}, "k")); err != nil {
		t.Fatal(err)
	}
}

// TestDoContextKeepsItsTokens: a context Do gave its function still reads
// that grant's token after Do returned and another grant was made (Do does
// not reuse a lease its function's context carries).
func TestDoContextKeepsItsTokens(t *testing.T) {
	l, _ := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "fence-kept", Max: 1, Fence: true}, "k")
	var kept context.Context
	var first uint64
	for i := range 3 {
		if err := l.Do(context.Background(), func(ctx context.Context) error {
			if i == 0 {
				kept, first = ctx, keycap.FencesFrom(ctx)[0].Token
			}
			return nil
		}, lim); err != nil {
			t.Fatal(err)
		}
	}
	if f := keycap.FencesFrom(kept); len(f) != 1 || f[0].Token != first {
		t.Fatalf("the first Do's context reads %+v after two more grants, want its token %d", f, first)
	}
}

// TestFencedWaiterClaimsItsToken: a waiter handed the slot claims it with a
// store call, which brings its token (the handoff alone would bring none).
func TestFencedWaiterClaimsItsToken(t *testing.T) {
	l, _ := newLimiter(t, memstore.New())
	lim := limit(t, keycap.Spec{Name: "fence-wait", Max: 1, Fence: true, Wait: 10 * time.Second}, "k")
	holder := acquire(t, l, lim)
	defer holder.Release() // a failure below frees the waiter too
	t1 := token(t, holder, lim)
	type result struct {
		ls  *keycap.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(context.Background(), lim)
		got <- result{ls, err}
	}()
	testkit.WaitUntil(t, 10*time.Second, "the waiter to wait", func() bool {
		r, err := l.Inspect(context.Background(), keycap.Inspection{Name: "fence-wait"})
		return err == nil && len(r.Pools) == 1 && len(r.Pools[0].Waiting) == 1
	})
	holder.Release()
	r := testkit.Recv(t, got, 10*time.Second, "the waiter's lease")
	if r.err != nil {
		t.Fatal(r.err)
	}
	ls := r.ls
	defer ls.Release()
	if t2 := token(t, ls, lim); t2 <= t1 {
		t.Fatalf("the waiter's token %d, want above the holder's %d", t2, t1)
	}
}

// TestFenceIsDeclared: a fenced limit on a store without tokens is refused
// with the feature it needs, and a shadow limit cannot ask for one.
func TestFenceIsDeclared(t *testing.T) {
	l, _ := newLimiter(t, nullstore.New())
	_, err := l.Acquire(context.Background(), keycap.Spec{Name: "fence", Max: 1, Fence: true}.For("k"))
	var ns *store.NotSupportedError
	if !errors.As(err, &ns) || ns.Feature != store.Fences {
		t.Fatalf("Acquire of a fenced limit on nullstore = %v, want a *NotSupportedError for fences", err)
	}
	err = keycap.Spec{Name: "fence", Max: 1, Fence: true, Shadow: true}.Validate()
	var ie *keycap.InvalidLimitError
	if !errors.As(err, &ie) || ie.Field != "Fence" {
		t.Fatalf("Validate of a fenced shadow = %v, want an error on Fence", err)
	}
	// WithShadowMode makes every limit a shadow: it then asks for no token.
	sl, _ := newLimiter(t, memstore.New(), keycap.WithShadowMode())
	ls := acquire(t, sl, keycap.Spec{Name: "fence", Max: 1, Fence: true}.For("k"))
	defer ls.Release()
	if f := ls.Fences(); f != nil {
		t.Fatalf("a shadow lease carries %+v", f)
	}
}
