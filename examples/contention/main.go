// Command contention shows keycap's leased slots on the in-process store:
// several clients per key contend for a few slots, and it prints who got a
// slot, who was refused and who waited.
//
//	go run ./examples/contention
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
)

func main() {
	var (
		keys    = flag.Int("keys", 3, "number of keys (users)")
		clients = flag.Int("clients", 5, "clients per key")
		max     = flag.Int("max", 2, "slots per key")
		wait    = flag.Duration("wait", 150*time.Millisecond, "how long the patient clients wait for a slot")
	)
	flag.Parse()
	if err := run(*keys, *clients, *max, *wait); err != nil {
		log.Fatal(err)
	}
}

type tally struct {
	inside, peak             atomic.Int32
	granted, waited, refused atomic.Int32
}

func run(keys, clients, max int, wait time.Duration) error {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		return err
	}
	defer limiter.Close()

	names := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
	if keys > len(names) {
		return fmt.Errorf("at most %d keys", len(names))
	}
	fmt.Printf("%d keys × %d clients, %d slots per key; odd-numbered clients wait up to %s, the others give up at once\n\n",
		keys, clients, max, wait)

	start := time.Now()
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("[%4dms] ", time.Since(start).Milliseconds())
		fmt.Printf(format+"\n", args...)
	}

	tallies := make([]*tally, keys)
	var wg sync.WaitGroup
	for k := range keys {
		tallies[k] = &tally{}
		for c := range clients {
			patient := c%2 == 0 // clients #1, #3, #5...
			spec := keycap.Spec{Name: "demo", Max: max, TTL: 5 * time.Second}
			if patient {
				spec.Wait = wait
			}
			if err := spec.Validate(); err != nil {
				return err
			}
			limit := spec.For(names[k])
			who := fmt.Sprintf("%s#%d", names[k], c+1)
			t := tallies[k]
			wg.Go(func() {
				// Stagger arrivals a little, as real clients do.
				time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
				began := time.Now()
				lease, err := limiter.Acquire(context.Background(), limit)
				var le *keycap.LimitError
				switch {
				case errors.As(err, &le):
					t.refused.Add(1)
					if le.Waited > 0 {
						say("%-8s refused after waiting %s", who, le.Waited.Round(time.Millisecond))
					} else {
						say("%-8s refused: %s already holds %d of %d slots", who, names[k], max, max)
					}
					return
				case err != nil:
					say("%-8s error: %v", who, err)
					return
				}
				n := t.inside.Add(1)
				for p := t.peak.Load(); n > p && !t.peak.CompareAndSwap(p, n); p = t.peak.Load() {
				}
				t.granted.Add(1)
				if w := time.Since(began); w > 5*time.Millisecond {
					t.waited.Add(1)
					say("%-8s got a slot after waiting %s (%d/%d in use)", who, w.Round(time.Millisecond), n, max)
				} else {
					say("%-8s got a slot at once (%d/%d in use)", who, n, max)
				}
				time.Sleep(time.Duration(80+rand.IntN(120)) * time.Millisecond) // the work
				t.inside.Add(-1)
				lease.Release()
			})
		}
	}
	wg.Wait()

	fmt.Println()
	fmt.Printf("%-6s  %7s  %12s  %7s  %s\n", "key", "granted", "after a wait", "refused", "most at once")
	order := make([]int, keys)
	for i := range order {
		order[i] = i
	}
	sort.Ints(order)
	over := false
	for _, k := range order {
		t := tallies[k]
		fmt.Printf("%-6s  %7d  %12d  %7d  %d of %d\n", names[k], t.granted.Load(), t.waited.Load(), t.refused.Load(), t.peak.Load(), max)
		over = over || int(t.peak.Load()) > max
	}
	if over {
		fmt.Println("\na key went over its cap: this is a bug")
		os.Exit(1)
	}
	return nil
}
