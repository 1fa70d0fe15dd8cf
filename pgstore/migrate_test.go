package pgstore

import (
	"bytes"
	"context"
	"os"
	"testing"
	"text/template"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv/pgenv"
	"github.com/keycap/keycap/store"
)

// TestMigrateFromVersion3: a database that version 3 installed, holding
// leases (a parent's key's among them) and a pause, is brought to this
// version by Migrate, its state kept and inspected, and keeps overrides.
// testdata/migration-v3.sql.tmpl is version 3's migration, as released.
func TestMigrateFromVersion3(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool := pgenv.Pool(t)
	schema := pgenv.Schema(t, pool)
	src, err := os.ReadFile("testdata/migration-v3.sql.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	var v3 bytes.Buffer
	if err := template.Must(template.New("v3").Parse(string(src))).Execute(&v3, names{schema, DefaultPrefix}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, v3.String()); err != nil {
		t.Fatalf("version 3's migration: %v", err)
	}
	version := func() int {
		var v int
		if err := pool.QueryRow(ctx, "SELECT max(version) FROM "+schema+".keycap_migration").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := version(); v != 3 {
		t.Fatalf("testdata installs version %d, want 3", v)
	}

	// State written by version 3's functions.
	n := names{schema, DefaultPrefix}
	plain, po := store.PoolOf(0, "upgrade", "plain"), store.NewOwner()
	parent, kid, ko := keycap.MustParent("upgrade-parent", 5).Pool(), store.PoolOf(0, "upgrade", "kid"), store.NewOwner()
	pause := store.PoolOf(byte(keycap.FamilyPause), "upgrade", "api")
	// A parent of one, held by one key while another waits with a ticket:
	// after the upgrade the waiting key is in the parent's queue (version
	// 6), and the holder's release hands it the slot.
	full, hk, ho := keycap.MustParent("upgrade-full", 1).Pool(), store.PoolOf(0, "upgrade-full", "holder"), store.NewOwner()
	wk, wo := store.PoolOf(0, "upgrade-full", "waiter"), store.NewOwner()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT " + n.F("acquire") + "($1, $2, 5, 60000)", []any{plain[:], po[:]}},
		{"SELECT granted FROM " + n.F("ptake") + "($1, $2, $3, 5, 60000, 1, 5, 1, 0, 0, 0)", []any{parent[:], kid[:], ko[:]}},
		{"SELECT " + n.F("pause") + "($1, 60000)", []any{pause[:]}},
		{"SELECT granted FROM " + n.F("ptake") + "($1, $2, $3, 1, 60000, 1, 1, 1, 0, 0, 0)", []any{full[:], hk[:], ho[:]}},
		{"SELECT granted FROM " + n.F("ptake") + "($1, $2, $3, 1, 60000, 1, 1, 1, 0, 60000, 60000)", []any{full[:], wk[:], wo[:]}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}

	for range 2 { // the upgrade, then a migration with nothing to do
		if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
			t.Fatalf("Migrate from version 3: %v", err)
		}
		if v := version(); v != Version {
			t.Fatalf("version %d after Migrate, want %d", v, Version)
		}
	}
	s, err := New(pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	page, err := s.InspectPools(ctx, store.PageQuery{Tag: plain.Tag()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[store.PoolID]store.Owner{}
	for _, p := range page.Pools {
		if len(p.Holders) != 1 {
			t.Fatalf("pool %s: %+v, want one holder", p.Pool, p.Holders)
		}
		got[p.Pool] = p.Holders[0].Owner
	}
	if len(got) != 2 || got[plain] != po || got[kid] != ko {
		t.Fatalf("inspected %v, want the plain pool's and the parent's key's leases of version 3", got)
	}
	pp, err := s.InspectPauses(ctx, store.PageQuery{Tag: pause.Tag()})
	if err != nil || len(pp.Pauses) != 1 || pp.Pauses[0].ID != pause {
		t.Fatalf("pauses %+v, %v; want version 3's", pp.Pauses, err)
	}
	if v, list, err := s.Overrides(ctx, 0); err != nil || v != 0 || len(list) != 0 {
		t.Fatalf("overrides after the upgrade: %d, %v, %v; want version 0 and none", v, list, err)
	}
	o := store.Override{Family: uint8(keycap.FamilyApp), Name: "upgrade", Key: "plain", Max: 1, Pool: plain}
	if err := s.SetOverride(ctx, o); err != nil {
		t.Fatal(err)
	}
	if v, list, err := s.Overrides(ctx, 0); err != nil || v == 0 || len(list) != 1 || list[0] != o {
		t.Fatalf("overrides: %d, %+v, %v; want a new version and %+v", v, list, err, o)
	}
	if _, err := pool.Exec(ctx, "SELECT "+n.F("pgive")+"($1, $2, $3, false, 0, 1, 0, 0)", full[:], hk[:], ho[:]); err != nil {
		t.Fatal(err)
	}
	var handed bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+n.T("lease")+" WHERE pool = $1 AND owner = $2)",
		append(full[:], wk[:]...), wo[:]).Scan(&handed); err != nil || !handed {
		t.Fatalf("the key that waited before the upgrade was not handed the freed slot (%v)", err)
	}
	var idx int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname IN ('keycap_lease_kid', 'keycap_ticket_kid')`,
		schema).Scan(&idx); err != nil || idx != 2 {
		t.Fatalf("%d of the keys' indexes, %v; want 2", idx, err)
	}
}
