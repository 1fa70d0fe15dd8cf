package centrifugecap_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	centrifugego "github.com/centrifugal/centrifuge-go"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/centrifugecap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/redisstore"
)

// startNode starts a centrifuge node whose connections count against a cap
// of 2 per user, in the shared Redis. The connection token is the user id (a
// demo: real applications verify a JWT here).
func startNode(t *testing.T, prefix string) (*httptest.Server, *conncap.Cap) {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone})
	if err != nil {
		t.Fatal(err)
	}
	store, err := redisstore.New(testenv.Redis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	caps, err := capsOn(t, store, conncap.WithDefaultCap(2), conncap.WithLiveness(centrifugecap.Live(node)))
	if err != nil {
		t.Fatal(err)
	}
	limit := centrifugecap.New(caps, "chat")
	node.OnConnecting(limit.OnConnecting(func(ctx context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: e.Token}}, nil
	}))
	node.OnConnect(limit.OnConnect(nil))
	if err := node.Run(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	t.Cleanup(func() {
		srv.Close()
		_ = caps.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
	return srv, caps
}

// client is a centrifuge-go client and what happened to it.
type client struct {
	c            *centrifugego.Client
	mu           sync.Mutex
	connected    int
	connecting   int
	disconnected []uint32
	events       chan string
}

func dial(t *testing.T, srv *httptest.Server, user string) *client {
	t.Helper()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/"
	cl := &client{events: make(chan string, 10)}
	cl.c = centrifugego.NewJsonClient(url, centrifugego.Config{Token: user, MinReconnectDelay: 100 * time.Millisecond})
	cl.c.OnConnected(func(centrifugego.ConnectedEvent) {
		cl.mu.Lock()
		cl.connected++
		cl.mu.Unlock()
		cl.events <- "connected"
	})
	cl.c.OnConnecting(func(centrifugego.ConnectingEvent) {
		cl.mu.Lock()
		cl.connecting++
		cl.mu.Unlock()
	})
	cl.c.OnDisconnected(func(e centrifugego.DisconnectedEvent) {
		cl.mu.Lock()
		cl.disconnected = append(cl.disconnected, e.Code)
		cl.mu.Unlock()
		cl.events <- "disconnected"
	})
	t.Cleanup(cl.c.Close)
	if err := cl.c.Connect(); err != nil {
		t.Fatal(err)
	}
	return cl
}

func (cl *client) wait(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-cl.events:
		if got != want {
			t.Fatalf("client %s, want %s (disconnect codes %v)", got, want, cl.disconnected)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("client never %s", want)
	}
}

// TestCapHoldsAcrossNodes: centrifuge-go clients against two centrifuge
// nodes sharing Redis, cap 2 per user: the third connection, on either node,
// is refused with code 3504 and does not reconnect; a departure frees a slot
// on the other node.
func TestCapHoldsAcrossNodes(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix(t, testenv.Redis(t))
	a, capsA := startNode(t, prefix)
	b, capsB := startNode(t, prefix)

	c1 := dial(t, a, "alice")
	c1.wait(t, "connected")
	c2 := dial(t, b, "alice")
	c2.wait(t, "connected")
	c3 := dial(t, a, "alice")
	c3.wait(t, "disconnected")
	c4 := dial(t, b, "alice")
	c4.wait(t, "disconnected")
	bob := dial(t, b, "bob")
	bob.wait(t, "connected")

	for name, c := range map[string]*client{"third": c3, "fourth": c4} {
		c.mu.Lock()
		codes := c.disconnected
		c.mu.Unlock()
		if len(codes) != 1 || codes[0] != centrifuge.DisconnectConnectionLimit.Code {
			t.Errorf("%s connection: disconnect codes %v, want [3504]", name, codes)
		}
	}
	// 3504 is terminal: the refused clients stay away.
	time.Sleep(2 * time.Second) // watching for reconnects: only time can show their absence
	for name, c := range map[string]*client{"third": c3, "fourth": c4} {
		c.mu.Lock()
		if c.connected != 0 || len(c.disconnected) != 1 {
			t.Errorf("%s connection reconnected: %d connects, disconnects %v", name, c.connected, c.disconnected)
		}
		c.mu.Unlock()
	}
	if n := capsA.Connections() + capsB.Connections(); n != 3 {
		t.Fatalf("%d connections counted, want 3 (alice's two, bob's one)", n)
	}

	// Alice leaves node A; her next connection fits, on node B.
	c1.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for capsA.Connections() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("node A still counts alice's closed connection")
		}
		time.Sleep(10 * time.Millisecond) // the server notices the close
	}
	// Node A forgets the connection before its release reaches Redis: until
	// it does, a new connection may still be refused (3504, for good), so
	// each try is a new client.
	for {
		c5 := dial(t, b, "alice")
		select {
		case got := <-c5.events:
			if got == "connected" {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("alice's next connection never connected nor was refused")
		}
		if time.Now().After(deadline) {
			c5.mu.Lock()
			codes := c5.disconnected
			c5.mu.Unlock()
			t.Fatalf("alice's next connection still refused 10s after she left node A (codes %v)", codes)
		}
		c5.c.Close()
		time.Sleep(20 * time.Millisecond) // the release on its way to Redis
	}
}

// capsOn returns connection caps on a Limiter of their own over store, both
// closed when tb ends.
func capsOn(tb testing.TB, store keycap.Store, opts ...conncap.Option) (*conncap.Cap, error) {
	tb.Helper()
	l, err := keycap.NewLimiter(store)
	if err != nil {
		return nil, err
	}
	caps, err := conncap.New(l, opts...)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	tb.Cleanup(func() {
		_ = caps.Close()
		_ = l.Close()
	})
	return caps, nil
}
