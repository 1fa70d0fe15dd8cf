package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/internal/testenv"
)

// TestScriptsKeepKeysAlive checks how the scripts keep their keys alive, on
// Redis 7 (PEXPIRE … GT) and as on Redis 6.2 (PTTL, then PEXPIRE: the same
// scripts with redis.REDIS_VERSION_NUM hidden, which only Redis 7 sets): a
// new key gets the lease's ttl, a longer ttl extends it, a shorter one leaves
// it, and a key that lost its expiry (PERSIST) gets it back from a renewal
// or a node's sync.
func TestScriptsKeepKeysAlive(t *testing.T) {
	c := testenv.Redis(t)
	ctx := context.Background()
	for _, redis7 := range []bool{true, false} {
		name := map[bool]string{true: "redis7", false: "redis6.2"}[redis7]
		t.Run(name, func(t *testing.T) {
			script := func(src string) *redis.Script {
				if !redis7 {
					src = strings.ReplaceAll(src, "redis.REDIS_VERSION_NUM", "nil")
				}
				return redis.NewScript(src)
			}
			acquire, queue := script(lineLua+linePrologue+acquireLua), script(lineLua+linePrologue+queueLua)
			renew, sync := script(renewLua), script(syncLua)
			p := testenv.Prefix(t, c) + name + ":"
			slots, line, meta := p+"{t}s", p+"{t}l", p+"{t}m"
			keys := []string{slots, line, meta}
			run := func(s *redis.Script, keys []string, args ...any) {
				t.Helper()
				if err := s.Run(ctx, c, keys, args...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// ttl reads key's ttl and checks it is within (want-2s, want].
			ttl := func(key string, want time.Duration) {
				t.Helper()
				got, err := c.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if got > want || got <= want-2*time.Second {
					t.Fatalf("%s: ttl %v, want %v", key, got, want)
				}
			}
			run(acquire, keys, "a", 10, 60_000, p+"w")
			ttl(slots, time.Minute)
			run(acquire, keys, "b", 10, 5_000, p+"w") // shorter: kept
			ttl(slots, time.Minute)
			run(acquire, keys, "c", 10, 120_000, p+"w", 2) // longer: extended
			ttl(slots, 2*time.Minute)
			run(renew, []string{slots}, "a", 300_000)
			ttl(slots, 5*time.Minute)
			if err := c.Persist(ctx, slots).Err(); err != nil {
				t.Fatal(err)
			}
			run(renew, []string{slots}, "a", 60_000) // the expiry is back
			ttl(slots, time.Minute)
			run(acquire, keys, "a", 10, 90_000, p+"w") // held: renewed
			ttl(slots, 90*time.Second)
			if n, err := c.ZCard(ctx, slots).Result(); err != nil || n != 4 {
				t.Fatalf("slots hold %d members (%v), want 4: a, b, c and c#1", n, err)
			}
			run(queue, keys, "d", 4, 60_000, 30_000, 10_000, p+"w") // full: a ticket
			ttl(line, 40*time.Second)
			ttl(meta, 40*time.Second)
			if err := c.Persist(ctx, slots).Err(); err != nil {
				t.Fatal(err)
			}
			run(sync, []string{slots}, "zzzzzzzz", 90_000, 1, "zzzzzzzz1")
			ttl(slots, 90*time.Second)

			// share.lua: a parent's leases, meta and accounts live as long
			// as its longest lease; its set of keys waiting, its queue and
			// a key's line as long as their longest ticket (and its claim).
			share := script(shareSource)
			sp := p + "share:"
			skeys := []string{sp + "{p}l", sp + "{p}m", sp + "{p}w", sp + "{p}q", sp + "{p}qmin", sp + "{p}a", sp + "{p}i"}
			lines := sp + "{p}line:"
			kidA, kidB := strings.Repeat("a", 32), strings.Repeat("b", 32)
			take := func(kid, owner string, ttlMs, tttlMs int) {
				t.Helper()
				run(share, skeys, "take", lines, sp+"wake", kid, owner+strings.Repeat("-", 16-len(owner)), 1, 1, ttlMs, 1, 1, 0, tttlMs, 1_500)
			}
			take(kidA, "a", 60_000, 0)
			ttl(skeys[0], time.Minute)
			ttl(skeys[1], time.Minute)
			ttl(skeys[5], time.Minute)
			take(kidA, "a", 5_000, 0) // held, renewed shorter: the keys keep their expiry
			ttl(skeys[0], time.Minute)
			take(kidB, "b", 60_000, 30_000) // the parent is full: a ticket
			for _, k := range []string{skeys[2], skeys[3], lines + kidB, lines + kidB + ":t"} {
				ttl(k, 31500*time.Millisecond)
			}
			take(kidB, "b", 60_000, 90_000) // a longer ticket: extended
			for _, k := range []string{skeys[2], skeys[3], lines + kidB, lines + kidB + ":t"} {
				ttl(k, 91500*time.Millisecond)
			}
		})
	}
}

// TestSyncFindsEveryGhost checks sync.lua's ways of finding a node's ghosts
// in a pool that holds more than its live members: a ghost scored below the
// renewed members, one scored as high or higher (taken in the same
// millisecond, or a clock set back), beside another node's live member,
// which stays, and its expired one, which goes.
func TestSyncFindsEveryGhost(t *testing.T) {
	c := testenv.Redis(t)
	ctx := context.Background()
	key := testenv.Prefix(t, c) + "{s}"
	node, other := "NODE0001", "OTHER001"
	live, low, high := node+"live0001", node+"ghostlow", node+"ghosthii"
	otherLive, otherGone := other+"live0001", other+"gone0001"
	now := time.Now().UnixMilli()
	day := int64(24 * time.Hour / time.Millisecond)
	if err := c.ZAdd(ctx, key,
		redis.Z{Score: float64(now + 1000), Member: live},
		redis.Z{Score: float64(now + 1000), Member: low},
		redis.Z{Score: float64(now + 2*day), Member: high},
		redis.Z{Score: float64(now + day), Member: otherLive},
		redis.Z{Score: float64(now - 1000), Member: otherGone},
	).Err(); err != nil {
		t.Fatal(err)
	}
	removed, err := redis.NewScript(syncLua).Run(ctx, c, []string{key}, node, 60_000, 1, live).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != 2 {
		t.Fatalf("removed %v, want [2]: both ghosts", removed)
	}
	got, err := c.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != live+","+otherLive {
		t.Fatalf("pool holds %v, want the live member and the other node's", got)
	}
	if s, _ := c.ZScore(ctx, key, live).Result(); int64(s) < now+59_000 {
		t.Fatalf("live member scored %v, not renewed to a minute from now", int64(s)-now)
	}
}

// TestShareForgetsIdleKeys: share.lua keeps the account of a key that
// holds nothing and waits for nothing while it is ahead of the parent's
// time, and drops it once it has been idle for forget (10 s), two per
// take: one-off keys leave nothing behind.
func TestShareForgetsIdleKeys(t *testing.T) {
	c := testenv.Redis(t)
	ctx := context.Background()
	share := redis.NewScript(shareSource)
	sp := testenv.Prefix(t, c) + "share:"
	keys := []string{sp + "{p}l", sp + "{p}m", sp + "{p}w", sp + "{p}q", sp + "{p}qmin", sp + "{p}a", sp + "{p}i"}
	lines := sp + "{p}line:"
	run := func(args ...any) {
		t.Helper()
		if err := share.Run(ctx, c, keys, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	kid := func(i int) string { return fmt.Sprintf("%032x", i) }
	owner := func(i int) string { return fmt.Sprintf("%016d", i) }
	run("take", lines, sp+"wake", kid(999), owner(999), 1, 1, 3_600_000, 10, 1, 0, 0, 1_500) // keeps the parent busy
	const n = 10
	for i := range n {
		run("take", lines, sp+"wake", kid(i), owner(i), 1, 1, 60_000, 10, 1, 0, 0, 1_500)
		run("give", lines, sp+"wake", kid(i), owner(i), 1, 0, 0, 1, 0, "5.000") // used 5 ms: ahead of the parent
	}
	accounts := func() int {
		t.Helper()
		got := 0
		for i := range n {
			if ok, err := c.HExists(ctx, keys[5], "v"+kid(i)).Result(); err != nil {
				t.Fatal(err)
			} else if ok {
				got++
			}
		}
		return got
	}
	if got := accounts(); got != n {
		t.Fatalf("%d of %d keys keep an account after their release, want all: they are ahead of the parent", got, n)
	}
	run("take", lines, sp+"wake", kid(998), owner(998), 1, 1, 60_000, 10, 1, 0, 0, 1_500)
	if got := accounts(); got != n {
		t.Fatalf("%d of %d accounts left after a call, want all: none has been idle 10 s", got, n)
	}
	for i := range n { // as if each had been idle for a minute
		if err := c.ZAdd(ctx, keys[6], redis.Z{Score: 0, Member: kid(i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n / 2 { // two per call
		run("take", lines, sp+"wake", kid(900+i), owner(900+i), 1, 1, 60_000, 10, 1, 0, 0, 1_500)
	}
	if got := accounts(); got != 0 {
		t.Fatalf("%d accounts left after %d calls, want none: each call forgets two idle keys", got, n/2)
	}
}
