package pusherserver_test

import (
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/pushercap"
	"github.com/keycap/keycap/redisstore"
)

// TestPusherJS runs real pusher-js clients (npm) against this Go
// Pusher-protocol server with a pushercap gate, with a cap of 2 per user kept in Redis: the third
// connection of a user gets the error and stays disconnected for 10 s, the
// other two keep working, and a forged presence authorization is never
// counted.
func TestPusherJS(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	store, err := redisstore.New(rdb, redisstore.WithPrefix(testenv.Prefix(t, rdb)))
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	defer limiter.Close()
	caps, err := conncap.New(limiter, conncap.WithDefaultCap(2))
	if err != nil {
		t.Fatal(err)
	}
	defer caps.Close()
	app := pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}
	gate, err := pushercap.New(caps, []pushercap.App{{ID: app.ID, Key: app.Key, Secret: app.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	srv := pusherserver.New(gate, app)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	host, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	p, _ := strconv.Atoi(port)

	node := testenv.RunNode(t, "cap.mjs", map[string]any{
		"host": host, "port": p, "key": app.Key, "secret": app.Secret, "observeMs": 10_000,
	})
	if m := node.Next(t, 90*time.Second); string(m["step"]) != `"broadcast"` {
		t.Fatalf("unexpected line %v", m)
	}
	// During those 10 s the refused client stayed away: no reconnect.
	if up := srv.Upgrades(); up != 4 {
		t.Fatalf("%d WebSocket connections in all, want 4 (a, b, c once, forged): the refused client reconnected", up)
	}
	if n := caps.Connections(); n != 2 {
		t.Fatalf("%d connections counted, want 2: the forged one must not count", n)
	}
	srv.Broadcast("presence-room", "hello", `{"msg":"still here"}`)
	testenv.CheckCapResult(t, node.Result(t, 30*time.Second))
	if srv.Refusals() != 1 {
		t.Errorf("%d refusals, want 1", srv.Refusals())
	}
}
