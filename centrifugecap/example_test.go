package centrifugecap_test

import (
	"context"
	"log"
	"net/http"

	"github.com/centrifugal/centrifuge"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/centrifugecap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/redisstore"
)

// userFromToken stands for your application's check of a client's token
// (a JWT, a session, ...).
func userFromToken(token string) (string, bool) { return token, token != "" }

// At most 3 connections per user across every centrifuge node. A fourth,
// on any node, is refused with DisconnectConnectionLimit (3504), after
// which clients do not reconnect.
func Example() {
	node, err := centrifuge.New(centrifuge.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// One Limiter per node, all on one shared store: Redis, for the cap to
	// hold across nodes (memstore.New() for a single node).
	var store *redisstore.Store // redisstore.New(redisClient), as in redisstore's example
	limiter, err := keycap.NewLimiter(store)
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	// Live lets the heartbeat drop a connection whose disconnect was missed.
	caps, err := conncap.New(limiter, conncap.WithDefaultCap(3), conncap.WithLiveness(centrifugecap.Live(node)))
	if err != nil {
		log.Fatal(err)
	}
	defer caps.Close() // withdraws this node's connections at once

	limit := centrifugecap.New(caps, "chat")
	// The cap applies once your handler has said who the user is.
	node.OnConnecting(limit.OnConnecting(func(ctx context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		user, ok := userFromToken(e.Token)
		if !ok {
			return centrifuge.ConnectReply{}, centrifuge.DisconnectInvalidToken
		}
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: user}}, nil
	}))
	node.OnConnect(limit.OnConnect(nil)) // frees the slot when the client disconnects
	if err := node.Run(); err != nil {
		log.Fatal(err)
	}

	http.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	log.Print(http.ListenAndServe(":8000", nil))
}

// centrifuge keeps one disconnect handler per client: a connect handler
// that sets its own must call Leave in it, or the slot stays taken until
// the next heartbeat.
func ExampleLimiter_Leave() {
	var node *centrifuge.Node        // as in Example
	var limit *centrifugecap.Limiter // centrifugecap.New(caps, "chat")

	node.OnConnect(limit.OnConnect(func(client *centrifuge.Client) {
		client.OnDisconnect(func(e centrifuge.DisconnectEvent) {
			limit.Leave(client)
			log.Printf("user %s left: %s", client.UserID(), e.Reason)
		})
	}))
}
