package caddykeycap_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
)

// inflight is an upstream that counts the requests in flight per X-User
// and remembers the most at once.
type inflight struct {
	hold time.Duration // how long each request works
	mu   sync.Mutex
	now  map[string]int
	most map[string]int
}

func newInflight(hold time.Duration) *inflight {
	return &inflight{hold: hold, now: map[string]int{}, most: map[string]int{}}
}

func (u *inflight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-User")
	u.mu.Lock()
	u.now[key]++
	u.most[key] = max(u.most[key], u.now[key])
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.now[key]--
		u.mu.Unlock()
	}()
	if u.hold > 0 {
		time.Sleep(u.hold) // the request's work, not synchronisation
	}
	_, _ = io.WriteString(w, "ok")
}

// loadSize is the size of TestThreeCaddiesOneRedis: 100,000 requests from
// 1,000 clients (about 50 s under -race on two cores), or 20,000 with
// -short.
func loadSize() (clients, requests int) {
	if testing.Short() {
		return 1000, 20_000
	}
	return 1000, 100_000
}

// Three Caddy processes on one Redis cap each user at 3 requests in flight
// in all: under 1,000 clients the upstream sees exactly 3 at most for every
// user — the cap reached, never passed — and every request is answered 200
// or 429.
func TestThreeCaddiesOneRedis(t *testing.T) {
	t.Parallel()
	client := testenv.Redis(t)
	prefix := testenv.Prefix(t, client)
	const users, cap = 50, 3
	clients, requests := loadSize()

	up := newInflight(10 * time.Millisecond)
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	var addrs []string
	for range 3 {
		addr := testenv.FreeAddr(t)
		addrs = append(addrs, addr)
		startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%s {
	keycap {
		limit api {
			key {header.X-User}
			max %d
			fail_mode closed
		}
		store redis {env.TEST_REDIS_ADDR} {
			prefix %s
			budget 5s
		}
	}
	reverse_proxy %s
}
`, addr, cap, prefix, upstream.Listener.Addr()), "TEST_REDIS_ADDR="+testenv.RedisAddr())
	}

	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var next atomic.Int64
	var codes sync.Map // status → *atomic.Int64
	count := func(code int) {
		v, _ := codes.LoadOrStore(code, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			user := "u" + strconv.Itoa(c%users)
			base := "http://" + addrs[c%len(addrs)] + "/"
			for next.Add(1) <= int64(requests) && ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
				req.Header.Set("X-User", user)
				res, err := hc.Do(req)
				if err != nil {
					count(-1)
					t.Errorf("client %d: %v", c, err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				count(res.StatusCode)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var summary []string
	codes.Range(func(k, v any) bool {
		code, n := k.(int), v.(*atomic.Int64).Load()
		summary = append(summary, fmt.Sprintf("%d×%d", n, code))
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("%d requests answered %d, want only 200 and 429", n, code)
		}
		return true
	})
	t.Logf("%d requests from %d clients on 3 Caddies in %v (%.0f req/s): %s",
		requests, clients, elapsed.Round(time.Millisecond), float64(requests)/elapsed.Seconds(), strings.Join(summary, ", "))
	if v, ok := codes.Load(http.StatusOK); !ok || v.(*atomic.Int64).Load() == 0 {
		t.Error("no request was served")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.most) != users {
		t.Errorf("the upstream saw %d users, want %d", len(up.most), users)
	}
	for user, most := range up.most {
		if most != cap {
			t.Errorf("user %s: at most %d in flight at the upstream, want exactly %d (the cap)", user, most, cap)
		}
	}
}

// Each kind of Redis store a Caddyfile can name holds the cap: a slow
// request takes the key's only slot, the next is refused.
func TestRedisStoreKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		store func(t *testing.T) string // the store line and block; skips without the service
	}{
		{"redis", func(t *testing.T) string {
			return fmt.Sprintf("store redis %s {\n\t\t\tprefix %s\n\t\t}", testenv.RedisAddr(), testenv.Prefix(t, testenv.Redis(t)))
		}},
		{"cluster", func(t *testing.T) string {
			c := testenv.RedisCluster(t)
			return fmt.Sprintf("store cluster %s {\n\t\t\tprefix %s\n\t\t}", strings.Join(testenv.ClusterSeeds(), " "), testenv.Prefix(t, c))
		}},
		{"sentinel", func(t *testing.T) string {
			c := testenv.RedisSentinel(t)
			master := os.Getenv("KEYCAP_REDIS_SENTINEL_MASTER")
			if master == "" {
				master = "keycap-test"
			}
			return fmt.Sprintf("store sentinel {\n\t\t\taddrs %s\n\t\t\tmaster %s\n\t\t\tprefix %s\n\t\t}",
				os.Getenv("KEYCAP_REDIS_SENTINEL"), master, testenv.Prefix(t, c))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := tc.store(t)
			started, release := make(chan struct{}, 1), make(chan struct{})
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					started <- struct{}{}
					select { // or the proxy went away: a failed test's cleanup never waits on it
					case <-release:
					case <-r.Context().Done():
					}
				}
				_, _ = io.WriteString(w, "ok")
			}))
			t.Cleanup(upstream.Close)
			addr := testenv.FreeAddr(t)
			startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
}
http://%s {
	keycap {
		limit one {
			max 1
			fail_mode closed
		}
		%s
	}
	reverse_proxy %s
}
`, addr, store, upstream.Listener.Addr()))
			done := make(chan int, 1)
			go func() { done <- get(t, "http://"+addr+"/slow", "").StatusCode }()
			waitFor(t, started, "the slow request at the upstream")
			if res := get(t, "http://"+addr+"/", ""); res.StatusCode != http.StatusTooManyRequests {
				t.Errorf("second request: %d, want 429", res.StatusCode)
			}
			close(release)
			if code := waitFor(t, done, "the slow request"); code != http.StatusOK {
				t.Errorf("slow request: %d, want 200", code)
			}
		})
	}
}
