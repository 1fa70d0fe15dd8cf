package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/pgstore"
	"github.com/keycap/keycap/store"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pages reads every page of tag.
func pages(t *testing.T, s *pgstore.Store, tag store.Tag, limit int) []store.PoolState {
	t.Helper()
	var out []store.PoolState
	q := store.PageQuery{Tag: tag, Limit: limit}
	for range 1000 {
		page, err := s.InspectPools(testCtx(t), q)
		if err != nil {
			t.Fatalf("InspectPools: %v", err)
		}
		out = append(out, page.Pools...)
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
	t.Fatal("paging did not end after 1000 pages")
	return nil
}

func owners(hs []store.Holder) []store.Owner {
	var out []store.Owner
	for _, h := range hs {
		out = append(out, h.Owner)
	}
	return out
}

func waiters(ws []store.Waiter) []store.Owner {
	var out []store.Owner
	for _, w := range ws {
		out = append(out, w.Owner)
	}
	return out
}

func sorted(os []store.Owner) []store.Owner {
	os = slices.Clone(os)
	slices.SortFunc(os, func(a, b store.Owner) int { return slices.Compare(a[:], b[:]) })
	return os
}

// TestInspectParentsAndKeys: a parent's key (stored after the parent's 16
// bytes) is listed under its own pool when its name's tag is asked, with its
// leases and tickets; the parent's pool, when the parent's tag is asked,
// with every key's, its tickets in line order across the keys.
func TestInspectParentsAndKeys(t *testing.T) {
	t.Parallel()
	_, schema := migrated(t)
	s := newStore(t, schema)
	parent := keycap.MustParent("inspect-parent", 3).Pool()
	kid := func(key string) store.PoolID { return store.PoolOf(0, "inspect-kid", key) }
	// demand returns a new owner's demand of key's pool.
	demand := func(key string) (store.PoolID, store.Owner, store.Demand) {
		return kid(key), store.NewOwner(), store.Demand{Max: 3, TTL: time.Minute, Shared: &store.Shared{Weight: 1,
			Parent: store.Parent{Pool: parent, Max: 3, Share: 1}}}
	}
	held := map[store.PoolID][]store.Owner{}
	for _, key := range []string{"a", "a", "b"} {
		p, o, d := demand(key)
		if g, err := s.Acquire(testCtx(t), p, o, d); err != nil || !g.Granted {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
		held[p] = append(held[p], o)
	}
	var line []store.Owner // the parent is full: these wait
	lined := map[store.PoolID][]store.Owner{}
	for _, key := range []string{"b", "c", "b"} {
		p, o, d := demand(key)
		d.Line = store.Ticket{TTL: time.Minute, Claim: time.Minute}
		if g, err := s.Acquire(testCtx(t), p, o, d); err != nil || g.Granted {
			t.Fatalf("Acquire with a ticket: %+v, %v; want queued", g, err)
		}
		line = append(line, o)
		lined[p] = append(lined[p], o)
	}
	// A plain pool of the kids' name beside them.
	plain, po := kid("plain"), store.NewOwner()
	if g, err := s.Acquire(testCtx(t), plain, po, store.Demand{Max: 1, TTL: time.Minute}); err != nil || !g.Granted {
		t.Fatalf("Acquire: %+v, %v", g, err)
	}
	held[plain] = []store.Owner{po}

	for _, size := range []int{1, 100} {
		got := pages(t, s, kid("").Tag(), size)
		ids := make([]store.PoolID, 0, len(got))
		for _, p := range got {
			ids = append(ids, p.Pool)
			if !slices.Equal(sorted(owners(p.Holders)), sorted(held[p.Pool])) {
				t.Fatalf("page size %d: pool %s holds %v, want %v", size, p.Pool, owners(p.Holders), held[p.Pool])
			}
			if !slices.Equal(waiters(p.Waiting), lined[p.Pool]) {
				t.Fatalf("page size %d: pool %s's line %v, want %v", size, p.Pool, waiters(p.Waiting), lined[p.Pool])
			}
		}
		want := []store.PoolID{kid("a"), kid("b"), kid("c"), plain}
		slices.SortFunc(want, func(a, b store.PoolID) int { return slices.Compare(a[:], b[:]) })
		if !slices.Equal(ids, want) {
			t.Fatalf("page size %d: pools %v, want %v in order", size, ids, want)
		}
	}

	got := pages(t, s, parent.Tag(), 0)
	if len(got) != 1 || got[0].Pool != parent {
		t.Fatalf("the parent's tag shows %+v, want the parent's pool alone", got)
	}
	var all []store.Owner
	for _, p := range []store.PoolID{kid("a"), kid("b")} {
		all = append(all, held[p]...)
	}
	if !slices.Equal(sorted(owners(got[0].Holders)), sorted(all)) || got[0].Held() != 3 {
		t.Fatalf("the parent holds %v (%d slots), want every key's %v", owners(got[0].Holders), got[0].Held(), all)
	}
	if !slices.Equal(waiters(got[0].Waiting), line) {
		t.Fatalf("the parent's line %v, want %v in arrival order", waiters(got[0].Waiting), line)
	}
}

// TestInspectSkipsWhatExpired: a pool whose leases all expired is not
// listed, a pool with tickets alone is, and a ticket or lease that expired
// is left out.
func TestInspectSkipsWhatExpired(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	s := newStore(t, schema)
	ctx := testCtx(t)
	id := func(key string) store.PoolID { return store.PoolOf(0, "inspect-expired", key) }
	lapsed, waiting := id("lapsed"), id("waiting")
	live, dead, gone := store.NewOwner(), store.NewOwner(), store.NewOwner()
	// Rows written as a crashed holder would leave them: past their expiry.
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.keycap_lease (pool, owner, expires_at) VALUES
		($1, $2, now() - interval '1 second'), ($3, $2, now() - interval '1 second')`, lapsed[:], gone[:], waiting[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.keycap_ticket (pool, owner, arrival, expires_at, claim_ms, max_) VALUES
		($1, $2, 1, now() + interval '1 minute', 1000, 1), ($1, $3, 2, now() - interval '1 second', 1000, 1)`,
		waiting[:], live[:], dead[:]); err != nil {
		t.Fatal(err)
	}
	got := pages(t, s, lapsed.Tag(), 0)
	if len(got) != 1 || got[0].Pool != waiting || len(got[0].Holders) != 0 || !slices.Equal(waiters(got[0].Waiting), []store.Owner{live}) {
		t.Fatalf("pools %+v, want the waiting pool alone, with its live ticket", got)
	}
}

// TestInspectCursorsAreChecked: a cursor that is not a pool ID of the tag
// asked is refused, and a page size above MaxPage is cut to it.
func TestInspectCursorsAreChecked(t *testing.T) {
	t.Parallel()
	_, schema := migrated(t)
	s := newStore(t, schema)
	tag := store.TagOf(byte(keycap.FamilyApp), "inspect-cursor")
	for _, c := range []string{"not a cursor", "00", store.PoolOf(0, "another-name", "k").String(), store.PoolOf(0, "inspect-cursor", "k").String() + "00"} {
		if _, err := s.InspectPools(testCtx(t), store.PageQuery{Tag: tag, Cursor: c}); err == nil {
			t.Errorf("InspectPools took the cursor %q", c)
		}
		if _, err := s.InspectPauses(testCtx(t), store.PageQuery{Tag: tag, Cursor: c}); err == nil {
			t.Errorf("InspectPauses took the cursor %q", c)
		}
	}
	if _, err := s.InspectPools(testCtx(t), store.PageQuery{Tag: tag, Cursor: store.PoolOf(0, "inspect-cursor", "k").String()}); err != nil {
		t.Errorf("a cursor of the tag: %v", err)
	}
	var ids []store.PoolID
	for i := range pgstore.MaxPage + 5 {
		p := store.PoolOf(byte(keycap.FamilyPause), "inspect-cursor", fmt.Sprint(i))
		if _, err := s.Pause(testCtx(t), p, time.Minute); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p)
	}
	slices.SortFunc(ids, func(a, b store.PoolID) int { return slices.Compare(a[:], b[:]) })
	q := store.PageQuery{Tag: ids[0].Tag(), Limit: 1 << 30}
	page, err := s.InspectPauses(testCtx(t), q)
	if err != nil || len(page.Pauses) != pgstore.MaxPage || page.Next != ids[pgstore.MaxPage-1].String() {
		t.Fatalf("a page of %d pauses (next %q), %v; want MaxPage and a cursor", len(page.Pauses), page.Next, err)
	}
	q.Cursor = page.Next
	page, err = s.InspectPauses(testCtx(t), q)
	if err != nil || len(page.Pauses) != 5 || page.Next != "" || page.Pauses[0].ID != ids[pgstore.MaxPage] {
		t.Fatalf("the last page: %d pauses (next %q), %v; want the 5 left", len(page.Pauses), page.Next, err)
	}
}

// TestInspectPlansUseIndexes: on tables of 20,000 rows of other names, and
// with no statistics (never analysed), every scan of a page's plan is an
// index scan; none reads a table whole. The plans are read with
// auto_explain, which needs a superuser: skipped without one.
func TestInspectPlansUseIndexes(t *testing.T) {
	t.Parallel()
	pool, schema := migrated(t)
	ctx := testCtx(t)
	cfg, err := pgx.ParseConfig(pgenv.URL())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		plans = append(plans, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
		t.Skipf("no auto_explain to read the plans with: %v", err)
	}
	for _, set := range []string{"auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
		"auto_explain.log_level = notice", "client_min_messages = notice"} {
		if _, err := conn.Exec(ctx, "SET "+set); err != nil {
			t.Fatal(err)
		}
	}
	other := store.TagOf(byte(keycap.FamilyApp), "inspect-plan-other")
	asked := store.TagOf(byte(keycap.FamilyApp), "inspect-plan")
	for _, q := range []string{
		`INSERT INTO ` + schema + `.keycap_lease (pool, owner, expires_at)
			SELECT $1 || substring(sha256(int4send(i)) FROM 1 FOR 12), '\x0000000000000000000000000000000a'::bytea, now() + interval '1 hour'
			FROM generate_series(1, 20000) AS i`,
		`INSERT INTO ` + schema + `.keycap_lease (pool, owner, expires_at)
			SELECT $1 || substring(sha256(int4send(i)) FROM 1 FOR 12) || $2 || substring(sha256(int4send(-i)) FROM 1 FOR 12),
				'\x0000000000000000000000000000000a'::bytea, now() + interval '1 hour'
			FROM generate_series(1, 20000) AS i`,
		`INSERT INTO ` + schema + `.keycap_ticket (pool, owner, arrival, expires_at, claim_ms, max_)
			SELECT $1 || substring(sha256(int4send(i)) FROM 1 FOR 12), '\x0000000000000000000000000000000a'::bytea, i, now() + interval '1 hour', 1000, 1
			FROM generate_series(1, 20000) AS i`,
		`INSERT INTO ` + schema + `.keycap_pause (id, until)
			SELECT $1 || substring(sha256(int4send(i)) FROM 1 FOR 12), now() + interval '1 hour' FROM generate_series(1, 20000) AS i`,
	} {
		args := []any{other[:]}
		if strings.Contains(q, "$2") {
			args = append(args, other[:])
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t, schema)
	for i := range 30 {
		d := store.Demand{Max: 1, TTL: time.Minute}
		if g, err := s.Acquire(ctx, store.PoolOf(0, "inspect-plan", fmt.Sprint(i)), store.NewOwner(), d); err != nil || !g.Granted {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
	}
	after := store.PoolOf(0, "inspect-plan", "0")
	// More calls than the plan cache's five custom plans: the generic plan
	// is checked too.
	for range 7 {
		for _, q := range []string{
			"SELECT count(*) FROM " + schema + ".keycap_inspect($1, NULL, 10)",
			"SELECT count(*) FROM " + schema + ".keycap_inspect($1, $2, 10)",
			"SELECT count(*) FROM " + schema + ".keycap_inspect_pauses($1, $2, 10)",
		} {
			args := []any{asked[:]}
			if strings.Contains(q, "$2") {
				args = append(args, after[:])
			}
			var n int
			if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	inner := 0
	for _, p := range plans {
		if !strings.Contains(p, "WITH RECURSIVE") && !strings.Contains(p, "keycap_pause") {
			continue // the outer SELECT's Function Scan
		}
		inner++
		for _, bad := range []string{"Seq Scan", "Bitmap", "JIT"} {
			if strings.Contains(p, bad) {
				t.Fatalf("a page's plan has a %s:\n%s", bad, p)
			}
		}
		if !strings.Contains(p, "Index Scan") {
			t.Fatalf("a page's plan without an index scan:\n%s", p)
		}
	}
	if inner != 21 {
		t.Fatalf("%d plans of the functions' queries read, want 21", inner)
	}
}

// TestOverridesUnderConcurrentChanges: sets and deletes of the same pools
// from several connections never deadlock, and every change leaves a new
// version behind it.
func TestOverridesUnderConcurrentChanges(t *testing.T) {
	t.Parallel()
	_, schema := migrated(t)
	s := newStore(t, schema)
	v0, _, err := s.Overrides(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprint((w + i) % 3)
				o := store.Override{Family: uint8(keycap.FamilyApp), Name: "concurrent", Key: key, Max: i, Pool: store.PoolOf(0, "concurrent", key)}
				var err error
				if i%3 == 2 {
					err = s.DeleteOverride(testCtx(t), o.Pool)
				} else {
					err = s.SetOverride(testCtx(t), o)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v, list, err := s.Overrides(testCtx(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Each change moves the version on by at least one (to the clock in
	// microseconds when that is ahead: a failover never reuses a version).
	sets := uint64(workers * (rounds - rounds/3))
	if v < v0+sets {
		t.Fatalf("version %d after %d sets from %d: want at least %d", v, sets, v0, v0+sets)
	}
	if len(list) > 3 {
		t.Fatalf("%d overrides of 3 pools", len(list))
	}
	if v2, list, err := s.Overrides(testCtx(t), v); err != nil || v2 != v || list != nil {
		t.Fatalf("unchanged: %d, %v, %v", v2, list, err)
	}
}
