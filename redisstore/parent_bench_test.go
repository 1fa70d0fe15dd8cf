package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/store"
)

// BenchmarkParentDecision measures the Redis server time of a parent's
// decision with n keys waiting, beside the same decisions on one plain
// pool: a pool of 20 (a parent of 20 shared by keys of max 1; a plain pool
// of max 20), held by 20 owners while n others wait with a ticket (on the
// parent, each in a key of its own; on the plain pool, in its one line). An
// op is one handoff and one queuing: a holder releases (the slot goes to
// the owner served next, announced on the pool's channel), then asks again
// with a ticket and is refused (so n owners wait again). The two sides run
// alternately, a tenth of the ops at a time. Reported: the server's µs per
// release and per refusal (INFO commandstats of the store's calls), and the
// parent's ÷ the plain pool's; with -v, the commands a parent's op runs.
// KEYCAP_PARENT_KEYS caps n.
func BenchmarkParentDecision(b *testing.B) {
	sizes := []int{10, 200, 2000, 20000}
	if v, err := strconv.Atoi(os.Getenv("KEYCAP_PARENT_KEYS")); err == nil {
		for len(sizes) > 1 && sizes[len(sizes)-1] > v {
			sizes = sizes[:len(sizes)-1]
		}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			c := testenv.Redis(b)
			prefix := testenv.Prefix(b, c)
			s := newStore(b, c, prefix)
			ctx := context.Background()
			type member struct {
				pool  store.PoolID
				owner store.Owner
			}
			type side struct {
				name    string
				d       store.Demand
				watch   store.PoolID
				holders []member
				byOwner map[store.Owner]member
				served  chan store.Owner
			}
			line := store.Ticket{TTL: time.Hour, Claim: time.Hour}
			parent := keycap.MustParent("decision", 20).Pool()
			plain := store.PoolOf(0, "decision", "plain")
			sides := []*side{
				{name: "parent", watch: parent, d: store.Demand{Max: 1, TTL: time.Hour, Line: line,
					Shared: &store.Shared{Weight: 1, Parent: store.Parent{Pool: parent, Max: 20, Share: 1}}}},
				{name: "plain", watch: plain, d: store.Demand{Max: 20, TTL: time.Hour, Line: line}},
			}
			for _, sd := range sides {
				sd.byOwner = map[store.Owner]member{}
				sd.served = make(chan store.Owner, 64)
				stop, err := s.Notify(ctx, sd.watch, func(g []store.Owner) {
					for _, o := range g {
						sd.served <- o
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				for i := range 20 + n {
					m := member{plain, store.NewOwner()}
					if sd.name == "parent" {
						m.pool = store.PoolOf(0, "decision", strconv.Itoa(i))
					}
					sd.byOwner[m.owner] = m
					g, err := s.Acquire(ctx, m.pool, m.owner, sd.d)
					if err != nil {
						b.Fatal(err)
					}
					if g.Granted {
						sd.holders = append(sd.holders, m)
					}
				}
				if len(sd.holders) != 20 {
					b.Fatalf("%s: %d holders, want 20", sd.name, len(sd.holders))
				}
			}
			usec := map[string]float64{}
			ops := map[string]int{}
			byCommand := map[string]float64{}
			calls := []string{"evalsha", "fcall"}
			op := func(sd *side, i int) {
				h := sd.holders[i%20]
				u0 := commandUsec(b, c, calls...)
				if _, err := s.Release(ctx, h.pool, h.owner, sd.d, false); err != nil {
					b.Fatal(err)
				}
				u1 := commandUsec(b, c, calls...)
				g, err := s.Acquire(ctx, h.pool, h.owner, sd.d)
				if err != nil {
					b.Fatal(err)
				}
				if g.Granted {
					b.Fatalf("%s: a holder that released was granted again while others wait", sd.name)
				}
				usec[sd.name+"-release"] += u1 - u0
				usec[sd.name+"-refusal"] += commandUsec(b, c, calls...) - u1
				ops[sd.name]++
				select {
				case o := <-sd.served:
					sd.holders[i%20] = sd.byOwner[o]
				case <-time.After(10 * time.Second):
					b.Fatalf("%s: no handoff announced in 10 s", sd.name)
				}
			}
			for _, sd := range sides { // load the scripts, warm the connection
				op(sd, 0)
			}
			clear(usec)
			clear(ops)
			b.ResetTimer()
			chunk := max(b.N/10, 1)
			for done := 0; done < b.N; done += chunk {
				for k, sd := range sides {
					if done/chunk%2 == 1 {
						sd = sides[1-k]
					}
					var before map[string]float64
					if sd.name == "parent" {
						before = commandTimes(b, c)
					}
					for i := done; i < min(done+chunk, b.N); i++ {
						op(sd, i)
					}
					if before != nil {
						for name, u := range commandTimes(b, c) {
							byCommand[name] += u - before[name]
						}
					}
				}
			}
			b.StopTimer()
			for _, sd := range sides {
				for _, ph := range []string{"release", "refusal"} {
					b.ReportMetric(usec[sd.name+"-"+ph]/float64(ops[sd.name]), sd.name+"-µs/"+ph)
				}
			}
			for _, ph := range []string{"release", "refusal"} {
				b.ReportMetric(usec["parent-"+ph]/usec["plain-"+ph], ph+"-ratio")
			}
			if testing.Verbose() {
				names := make([]string, 0, len(byCommand))
				for name := range byCommand {
					names = append(names, name)
				}
				slices.SortFunc(names, func(a, b string) int { return int(byCommand[b] - byCommand[a]) })
				var sb strings.Builder
				for _, name := range names {
					if strings.HasSuffix(name, " calls") || name == "info" {
						continue
					}
					fmt.Fprintf(&sb, " %s %.1f µs (%.1f calls);", name, byCommand[name]/float64(ops["parent"]), byCommand[name+" calls"]/float64(ops["parent"]))
				}
				b.Logf("µs per parent op (a release and a refusal), by command:%s", sb.String())
			}
		})
	}
}

// commandTimes returns INFO commandstats' usec and calls of every command
// (name, and name + " calls"; a script's usec includes the commands it
// runs, which count again by name).
func commandTimes(b *testing.B, c redis.UniversalClient) map[string]float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	times := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			u, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			if k == "calls" {
				k = name + " calls"
			} else {
				k = name
			}
			times[k] = u
		}
	}
	return times
}
