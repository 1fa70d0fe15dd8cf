package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testenv"
)

// TestShutdownCutShortReleasesEverySlot: a stop that shutdown_timeout cuts
// short (40 requests in flight, an upstream that never answers) still
// releases every slot before the process exits: nothing is left in Redis to
// count against those users on the other gateways until the leases' TTL.
func TestShutdownCutShortReleasesEverySlot(t *testing.T) {
	t.Parallel()
	const requests = 40
	entered, finish := make(chan struct{}, requests), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-finish:
		case <-time.After(30 * time.Second):
		}
	}))
	defer up.Close()
	defer close(finish) // before Close: no handler left blocked
	rc := testenv.Redis(t)
	prefix := testenv.Prefix(t, rc)
	g := startGateway(t, fmt.Sprintf(`upstream: %s
shutdown_timeout: 500ms
store: {type: redis, url: "redis://%s", prefix: "%s"}
routes:
  - name: api
    path: /
    release: on_upstream_done
    max_hold: 20s
    limits: [{max: 5, key: "header:X-User", ttl: 60s}]
`, up.URL, testenv.RedisAddr(), prefix))
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range requests {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, g.proxy+"/slow", nil)
			req.Header.Set("X-User", fmt.Sprintf("user-%d", i))
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	for i := range requests {
		select {
		case <-entered:
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d requests reached the upstream", i, requests)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("before the stop: %d keys under the prefix (%v), want the requests' pools", len(keys), err)
	}
	g.signal(t, syscall.SIGTERM)
	g.waitLog(t, "keycap: shutdown cut requests short")
	if err := g.wait(15 * time.Second); err == nil {
		t.Fatal("keycap exited 0 after cutting requests short")
	}
	if held := leasesUnder(t, ctx, rc, prefix); held != 0 {
		t.Fatalf("after the process exited, %d leases are still in Redis", held)
	}
}

// TestShutdownReleasesConnections: a stop closes the WebSockets (1001) and
// each leaves its cap in the store before the process exits.
func TestShutdownReleasesConnections(t *testing.T) {
	t.Parallel()
	pusher := httptest.NewServer(pusherserver.New(nil, testApp))
	defer pusher.Close()
	rc := testenv.Redis(t)
	prefix := testenv.Prefix(t, rc)
	g := startGateway(t, fmt.Sprintf(`upstream: %s
shutdown_timeout: 500ms
store: {type: redis, url: "redis://%s", prefix: "%s"}
pusher:
  upstream: %s
  default_cap: 3
  ttl: 60s
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, pusher.URL, testenv.RedisAddr(), prefix, pusher.URL))
	ws := "ws" + strings.TrimPrefix(g.proxy, "http") + "/app/app-key"
	for i := range 10 {
		c, _, err := dialPusher(t, ws, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev := c.joinPresence(t, fmt.Sprintf("user-%d", i)); ev.Event != "pusher_internal:subscription_succeeded" {
			t.Fatalf("user-%d joins: %+v", i, ev)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n := leasesUnder(t, ctx, rc, prefix); n != 10 {
		t.Fatalf("before the stop: %d members in Redis, want 10", n)
	}
	g.signal(t, syscall.SIGTERM)
	_ = g.wait(15 * time.Second)
	if n := leasesUnder(t, ctx, rc, prefix); n != 0 {
		t.Fatalf("after the process exited, %d members are still in Redis", n)
	}
}

// leasesUnder counts the leases and members in the sorted sets under prefix.
func leasesUnder(t *testing.T, ctx context.Context, rc *redis.Client, prefix string) int {
	t.Helper()
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		if rc.Type(ctx, k).Val() == "zset" {
			n += int(rc.ZCard(ctx, k).Val())
		}
	}
	return n
}
