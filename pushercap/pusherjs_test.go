package pushercap_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/pushertest"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/pushercap"
	"github.com/keycap/keycap/redisstore"
)

// clientState is what cap.mjs reports of one pusher-js client.
type clientState struct {
	States     []string          `json:"states"`
	Errors     []json.RawMessage `json:"errors"`
	Subscribed bool              `json:"subscribed"`
	Events     []json.RawMessage `json:"events"`
	Connecting int               `json:"connecting"`
}

func (c clientState) String() string {
	errs := make([]string, len(c.Errors))
	for i, e := range c.Errors {
		errs[i] = string(e)
	}
	return fmt.Sprintf("states %v errors %v subscribed %v events %d connecting %d", c.States, errs, c.Subscribed, len(c.Events), c.Connecting)
}

func (c clientState) got4301() bool {
	for _, e := range c.Errors {
		var v struct{ Code int }
		if json.Unmarshal(e, &v) == nil && v.Code == 4301 {
			return true
		}
	}
	return false
}

// TestPusherJS runs real pusher-js clients (npm) against a Go Pusher-protocol
// endpoint using the gate, with a cap of 2 per user kept in Redis: the third
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
	caps, err := conncap.New(store, conncap.WithDefaultCap(2))
	if err != nil {
		t.Fatal(err)
	}
	defer caps.Close()
	app := pushertest.App{ID: "1", Key: "app-key", Secret: "app-secret"}
	gate, err := pushercap.New(caps, []pushercap.App{{ID: app.ID, Key: app.Key, Secret: app.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	srv := pushertest.New(gate, app)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	host, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	p, _ := strconv.Atoi(port)

	node := pushertest.RunNode(t, "cap.mjs", map[string]any{
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
	var res struct {
		Result struct {
			A, B, C, Forged                     clientState
			CState, ForgedState, AState, BState string
		}
	}
	raw, _ := json.Marshal(node.Next(t, 30*time.Second))
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	r := res.Result
	for name, c := range map[string]clientState{"a": r.A, "b": r.B} {
		if !c.Subscribed || len(c.Events) == 0 || c.got4301() {
			t.Errorf("client %s should have kept working: %s", name, c)
		}
	}
	if r.AState != "connected" || r.BState != "connected" {
		t.Errorf("a and b: %s, %s; want connected", r.AState, r.BState)
	}
	// pusher-js starts its first connection in its constructor, before the
	// script listens: any "connecting" seen is a reconnect.
	if !r.C.got4301() || r.C.Subscribed || r.C.Connecting != 0 || r.CState == "connected" {
		t.Errorf("client c: state %s, %s; want the 4301 error, no subscription, no reconnect", r.CState, r.C)
	}
	if r.Forged.got4301() || r.Forged.Subscribed || r.ForgedState != "connected" {
		t.Errorf("forged client: state %s, %s; want it untouched by the cap and refused by the server", r.ForgedState, r.Forged)
	}
	if srv.Refusals() != 1 {
		t.Errorf("%d refusals, want 1", srv.Refusals())
	}
}
