package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/keycaptest"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
)

// instance is one application server: its own Redis client, Limiter and
// middleware, as a separate process would have.
type instance struct {
	srv *httptest.Server
	rec *keycaptest.Recorder
}

func newInstance(t *testing.T, client redis.UniversalClient, prefix string, register func(*httplimit.Limiters), h http.Handler, routes ...string) *instance {
	t.Helper()
	store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	rec := &keycaptest.Recorder{}
	// A generous decision budget: the outages here are a killed Redis, which
	// fails fast; a machine loaded by parallel tests must not trip the
	// budget while Redis is up.
	l, err := keycap.NewLimiter(store, keycap.WithObserver(rec), keycap.WithDecisionBudget(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ls, err := httplimit.New(l)
	if err != nil {
		t.Fatal(err)
	}
	register(ls)
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.Handle("/"+r, ls.Must(r)(h))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &instance{srv: srv, rec: rec}
}

func client(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}, Timeout: 30 * time.Second}
}

// TestLoadAcrossTwoServers: 200 concurrent clients on 20 keys with max 3,
// against two server instances sharing Redis. The handler counts its own
// concurrency per key: never above 3; every refusal is a 429 with
// Retry-After, every accepted request a 200.
func TestLoadAcrossTwoServers(t *testing.T) {
	t.Parallel()
	const clients, keys, max, perClient = 200, 20, 3, 15
	prefix := testenv.Prefix(t, testenv.Redis(t))
	conc := testkit.NewConcurrency()
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-User")
		conc.Enter(key)
		time.Sleep(3 * time.Millisecond) // the work
		conc.Leave(key)
		_, _ = io.WriteString(w, "ok")
	})
	register := func(ls *httplimit.Limiters) {
		_ = ls.For("api", func(r *http.Request) httplimit.Rule {
			return httplimit.Max(max).By("user:" + r.Header.Get("X-User"))
		})
	}
	servers := []*instance{
		newInstance(t, testenv.Redis(t), prefix, register, work, "api"),
		newInstance(t, testenv.Redis(t), prefix, register, work, "api"),
	}
	hc := client(clients)
	var ok, refused, bad atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				srv := servers[(c+i)%2]
				r, _ := http.NewRequest(http.MethodGet, srv.srv.URL+"/api", nil)
				r.Header.Set("X-User", fmt.Sprint(c%keys))
				resp, err := hc.Do(r)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusOK:
					ok.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "1":
					refused.Add(1)
				default:
					bad.Add(1)
					t.Errorf("status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d requests: %d served, %d refused", clients*perClient, ok.Load(), refused.Load())
	if ok.Load()+refused.Load() != clients*perClient {
		t.Fatalf("%d answers of %d", ok.Load()+refused.Load(), clients*perClient)
	}
	reachedCap := 0
	for key, p := range conc.Peaks() {
		if p > max {
			t.Errorf("key %s: %d requests in flight at once, max %d", key, p, max)
		}
		if p == max {
			reachedCap++
		}
	}
	if refused.Load() == 0 || reachedCap == 0 {
		t.Fatalf("the caps were never reached (%d refusals, %d keys at the cap): the test proved nothing", refused.Load(), reachedCap)
	}
	for i, s := range servers {
		if a, r := s.rec.Count(keycap.SlotAcquired, ""), s.rec.Count(keycap.SlotReleased, ""); a != r {
			t.Errorf("server %d: %d acquired, %d released", i, a, r)
		}
	}
}

// TestRedisOutageMidLoad kills a real redis-server under load, then starts it
// again: fail-open routes keep answering 200, fail-closed routes answer 503,
// both recover without a restart, and each server reports the outage once.
func TestRedisOutageMidLoad(t *testing.T) {
	t.Parallel()
	rp := testenv.StartRedis(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	})
	register := func(ls *httplimit.Limiters) {
		_ = ls.For("open", func(r *http.Request) httplimit.Rule { return httplimit.Max(100) })
		_ = ls.For("closed", func(r *http.Request) httplimit.Rule {
			return httplimit.Limit(keycap.Spec{Max: 100, FailMode: keycap.FailClosed})
		})
	}
	newClient := func() *redis.Client {
		c := redis.NewClient(rp.Options())
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	servers := []*instance{
		newInstance(t, newClient(), "outage:", register, ok, "open", "closed"),
		newInstance(t, newClient(), "outage:", register, ok, "open", "closed"),
	}

	type tally struct{ ok, unavailable, other atomic.Int64 }
	// 0 before the outage, 1 during, 2 after; -1 while it starts or ends,
	// when answers prove nothing.
	var phase atomic.Int32
	var counts [3][2]tally // phase × route (0 open, 1 closed)
	hc := client(32)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				route := (w + i) % 2
				name := [2]string{"open", "closed"}[route]
				srv := servers[i%2]
				p := phase.Load()
				resp, err := hc.Get(srv.srv.URL + "/" + name)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if p < 0 || p != phase.Load() {
					continue // the phase changed while the request ran: it proves nothing
				}
				c := &counts[p][route]
				switch resp.StatusCode {
				case http.StatusOK:
					c.ok.Add(1)
				case http.StatusServiceUnavailable:
					if resp.Header.Get("Retry-After") == "" {
						t.Error("503 without Retry-After")
					}
					c.unavailable.Add(1)
				default:
					c.other.Add(1)
					t.Errorf("phase %d, %s: status %d", p, name, resp.StatusCode)
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	enough := func(p int) func() bool {
		return func() bool {
			return counts[p][0].ok.Load()+counts[p][0].unavailable.Load() >= 50 &&
				counts[p][1].ok.Load()+counts[p][1].unavailable.Load() >= 50
		}
	}
	waitFor("load before the outage", enough(0))
	phase.Store(-1)
	rp.Kill()
	phase.Store(1)
	waitFor("load during the outage", enough(1))
	phase.Store(-1)
	rp.Start()
	// Recovery is the first request that reaches Redis again; count from then.
	waitFor("recovery", func() bool {
		return servers[0].rec.Count(keycap.StoreRecovered, "") > 0 && servers[1].rec.Count(keycap.StoreRecovered, "") > 0
	})
	phase.Store(2)
	waitFor("load after the outage", enough(2))
	stop()
	wg.Wait()

	for p, name := range []string{"before", "during", "after"} {
		open, closed := &counts[p][0], &counts[p][1]
		t.Logf("%s the outage: open %d ok %d 503; closed %d ok %d 503", name,
			open.ok.Load(), open.unavailable.Load(), closed.ok.Load(), closed.unavailable.Load())
		if open.unavailable.Load() != 0 || open.other.Load() != 0 {
			t.Errorf("%s: the fail-open route answered something else than 200", name)
		}
		switch {
		case p == 1 && (closed.ok.Load() != 0 || closed.unavailable.Load() == 0):
			t.Errorf("during: fail-closed answered %d 200s and %d 503s, want only 503s", closed.ok.Load(), closed.unavailable.Load())
		case p != 1 && closed.unavailable.Load() != 0:
			t.Errorf("%s: fail-closed answered 503 while Redis was up", name)
		}
	}
	for i, s := range servers {
		if f, r := s.rec.Count(keycap.StoreFailed, ""), s.rec.Count(keycap.StoreRecovered, ""); f != 1 || r != 1 {
			t.Errorf("server %d: %d failures and %d recoveries reported, want one of each", i, f, r)
		}
	}
}

// TestWaitersServedInArrivalOrderAcrossServers: requests that may wait
// (.Wait) for one user's single slot arrive in turn at two servers sharing
// Redis; each is served in the order it arrived, whichever server it is on
// and whichever server frees the slot.
func TestWaitersServedInArrivalOrderAcrossServers(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	gate := testkit.NewGate()
	defer gate.Open()
	var mu sync.Mutex
	var order []string
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			gate.Wait(30 * time.Second)
		}
		mu.Lock()
		order = append(order, r.Header.Get("X-Nth"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	register := func(ls *httplimit.Limiters) {
		_ = ls.For("api", func(r *http.Request) httplimit.Rule {
			return httplimit.Limit(keycap.Spec{Max: 1, Wait: 20 * time.Second}).By("user:42")
		})
	}
	servers := []*instance{
		newInstance(t, testenv.Redis(t), prefix, register, work, "api"),
		newInstance(t, testenv.Redis(t), prefix, register, work, "api"),
	}
	c := testenv.Redis(t)
	s := newStore(t, c, prefix)
	line, _ := s.LineKeys(store.PoolOf(0, "api", "user:42"))
	hc := client(16)
	get := func(srv *instance, nth string, hold bool, done chan<- error) {
		r, _ := http.NewRequest(http.MethodGet, srv.srv.URL+"/api", nil)
		r.Header.Set("X-Nth", nth)
		if hold {
			r.Header.Set("X-Hold", "1")
		}
		resp, err := hc.Do(r)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("request %s: status %d", nth, resp.StatusCode)
			}
		}
		done <- err
	}
	done := make(chan error, 8)
	go get(servers[0], "holder", true, done)
	testkit.WaitUntil(t, 10*time.Second, "the holder to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 0 && servers[0].rec.Count(keycap.SlotAcquired, "api") == 1
	})
	const waiters = 6
	for i := range waiters {
		go get(servers[i%2], fmt.Sprint(i), false, done)
		testkit.WaitUntil(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i), func() bool {
			return c.ZCard(context.Background(), line).Val() == int64(i+1)
		})
	}
	gate.Open()
	for range waiters + 1 {
		if err := testkit.Recv(t, done, 20*time.Second, "a request"); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"holder", "0", "1", "2", "3", "4", "5"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("served in order %v, want %v", order, want)
	}
}
