package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

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
	held := 0
	keys, err = rc.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if rc.Type(ctx, k).Val() == "zset" {
			held += int(rc.ZCard(ctx, k).Val())
		}
	}
	if held != 0 {
		t.Fatalf("after the process exited, %d leases are still in Redis (%d keys)", held, len(keys))
	}
}
