package redisstore_test

import (
	"bufio"
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
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
)

func TestMain(m *testing.M) {
	switch testkit.HelperRole() {
	case "handoff-waiter":
		handoffWaiter()
		return
	case "fair-worker":
		fairWorker()
		return
	case "busy":
		busyLoad()
		return
	case "outbound-worker":
		outboundWorker()
		return
	}
	testkit.VerifyNoLeaks(m)
}

// handoffWaiter is process B of the handoff measurement: it waits for the
// slot, prints when it got it, and gives it back, until stdin closes.
func handoffWaiter() {
	c := redis.NewClient(testenv.RedisOptions())
	s, err := redisstore.New(c, redisstore.WithPrefix(os.Getenv("KEYCAP_HANDOFF_PREFIX")))
	if err != nil {
		panic(err)
	}
	var store keycap.Store = s
	if os.Getenv("KEYCAP_HANDOFF_POLL") == "1" {
		store = struct{ keycap.Store }{s} // no line: the waiter polls, as before lines
	}
	l, err := keycap.NewLimiter(store)
	if err != nil {
		panic(err)
	}
	lim := keycap.Spec{Name: "handoff", Max: 1, Wait: time.Minute}.For("k")
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() { // one line per round
		ls, err := l.Acquire(context.Background(), lim)
		if err != nil {
			fmt.Println("error", err)
			continue
		}
		fmt.Println("got", time.Now().UnixNano())
		ls.Release()
	}
}

// handoffRounds measures, rounds times, how long a waiter in another
// process takes to hold the slot after this process releases it.
// With poll, neither process uses the line (the store is hidden behind the
// bare Store interface): the waiter polls, as every waiter did before lines.
func handoffRounds(t testing.TB, rounds int, poll bool) []time.Duration {
	c := testenv.Redis(t)
	prefix := testenv.Prefix(t, c)
	s := newStore(t, c, prefix)
	var store keycap.Store = s
	env := []string{"KEYCAP_HANDOFF_PREFIX=" + prefix}
	if poll {
		store = struct{ keycap.Store }{s}
		env = append(env, "KEYCAP_HANDOFF_POLL=1")
	}
	l, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lim := keycap.Spec{Name: "handoff", Max: 1, Wait: time.Minute}.For("k")
	line, _ := s.LineKeys(lim.Pool())
	h := testkit.StartHelper(t, "handoff-waiter", "ready", env...)
	var lat []time.Duration
	for range rounds {
		ls, err := l.Acquire(context.Background(), lim)
		if err != nil {
			t.Fatal(err)
		}
		h.Send("go")
		// The waiter's ticket is in the line: it waits. (Polling, it has
		// no ticket: it has been refused once the pool holds none of its.)
		deadline := time.Now().Add(10 * time.Second)
		for !poll && c.Exists(context.Background(), line).Val() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the other process never queued")
			}
			time.Sleep(200 * time.Microsecond)
		}
		if poll {
			time.Sleep(20 * time.Millisecond) // its first try has been refused
		}
		t0 := time.Now().UnixNano()
		ls.Release()
		got, ok := h.WaitLine("got ", 10*time.Second)
		if !ok {
			t.Fatal("the other process never got the slot")
		}
		t1, err := strconv.ParseInt(strings.TrimPrefix(got, "got "), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Duration(t1-t0))
	}
	slices.Sort(lat)
	return lat
}

func pct(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// linePoll is how often a waiter in a line polls when no notification
// comes (keycap's, unexported): a second.
const linePoll = time.Second

// A slot released in one process reaches the waiter in another by the
// store's notification, not by its poll.
func TestHandoffAcrossProcessesIsNotified(t *testing.T) {
	lat := handoffRounds(t, 40, false)
	t.Logf("release on A → held on B: p50 %s, p99 %s, max %s", pct(lat, 0.5), pct(lat, 0.99), lat[len(lat)-1])
	if p := pct(lat, 0.9); p > linePoll/4 {
		t.Fatalf("p90 %s: the waiter polled instead of being woken", p)
	}
}

// BenchmarkHandoffAcrossProcesses: release on process A → the waiter on
// process B holds the slot, loopback Redis.
// "poll" is the same without lines: the waiter polls every 100 ms ± 50 %.
func BenchmarkHandoffAcrossProcesses(b *testing.B) {
	for _, mode := range []string{"line", "poll"} {
		b.Run(mode, func(b *testing.B) {
			lat := handoffRounds(b, max(b.N, 100), mode == "poll")
			b.ReportMetric(float64(pct(lat, 0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(pct(lat, 0.99).Microseconds()), "p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
