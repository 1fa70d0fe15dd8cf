// Command centrifuge runs two centrifuge nodes that share one per-user cap of
// 2 connections, and connects centrifuge-go clients to both.
//
//	go run ./examples/centrifuge                       # both nodes in this process, memstore
//	go run ./examples/centrifuge -redis 127.0.0.1:6379 # the cap in Redis, as separate servers would share it
//
// centrifuge's own UserConnectionLimit would let alice hold 2 connections on
// each node; here her third connection, on either node, is refused with code
// 3504 (connection limit), and her client does not reconnect.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/centrifugal/centrifuge"
	centrifugego "github.com/centrifugal/centrifuge-go"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/centrifugecap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address; empty: one in-process store for both nodes")
	flag.Parse()
	if err := run(*redisAddr); err != nil {
		log.Fatal(err)
	}
}

func run(redisAddr string) error {
	shared := keycap.Store(memstore.New())
	if redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		var err error
		if shared, err = redisstore.New(rdb, redisstore.WithPrefix("example-centrifuge:")); err != nil {
			return err
		}
	}
	var urls []string
	for name := range 2 {
		node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone})
		if err != nil {
			return err
		}
		limiter, err := keycap.NewLimiter(shared) // one per node: each is a node of the store
		if err != nil {
			return err
		}
		defer limiter.Close()
		caps, err := conncap.New(limiter, conncap.WithDefaultCap(2), conncap.WithLiveness(centrifugecap.Live(node)))
		if err != nil {
			return err
		}
		defer caps.Close()
		limit := centrifugecap.New(caps, "chat")
		node.OnConnecting(limit.OnConnecting(func(ctx context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
			// A demo: the token is the user id. Verify a real token here.
			return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: e.Token}}, nil
		}))
		node.OnConnect(limit.OnConnect(nil))
		if err := node.Run(); err != nil {
			return err
		}
		defer func() { _ = node.Shutdown(context.Background()) }()
		srv := httptest.NewServer(centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
		defer srv.Close()
		urls = append(urls, "ws"+strings.TrimPrefix(srv.URL, "http"))
		fmt.Printf("node %c at %s\n", 'A'+name, urls[name])
	}
	fmt.Println()
	for i, node := range []int{0, 1, 0, 1} {
		result := make(chan string, 1)
		c := centrifugego.NewJsonClient(urls[node], centrifugego.Config{Token: "alice"})
		c.OnConnected(func(centrifugego.ConnectedEvent) { result <- "connected" })
		c.OnDisconnected(func(e centrifugego.DisconnectedEvent) {
			result <- fmt.Sprintf("refused: disconnect code %d (%s)", e.Code, e.Reason)
		})
		defer c.Close()
		if err := c.Connect(); err != nil {
			return err
		}
		select {
		case r := <-result:
			fmt.Printf("alice, connection %d to node %c: %s\n", i+1, 'A'+node, r)
		case <-time.After(5 * time.Second):
			return fmt.Errorf("connection %d: no answer", i+1)
		}
	}
	return nil
}
