// Package centrifugecap caps the connections each user holds across every
// node of a github.com/centrifugal/centrifuge cluster. centrifuge's own
// Config.UserConnectionLimit counts one node only: with a limit of 1 and ten
// nodes, a user can hold ten connections. Here the count is conncap's, one
// store key per user checked and changed atomically, so the cap holds across
// nodes exactly.
//
//	caps, _ := conncap.New(limiter, conncap.WithDefaultCap(3), conncap.WithLiveness(centrifugecap.Live(node)))
//	limit := centrifugecap.New(caps, "chat")
//	node.OnConnecting(limit.OnConnecting(myConnecting))  // myConnecting may be nil
//	node.OnConnect(limit.OnConnect(myConnect))           // myConnect may be nil
//
// A connection over the cap is refused with centrifuge.DisconnectConnectionLimit
// (code 3504), a terminal code: clients do not reconnect in a loop. When the
// store cannot answer and the Cap fails closed, the connection is refused
// with centrifuge.DisconnectServerError, after which clients retry later.
// Anonymous connections (no user) are never counted.
package centrifugecap

import (
	"context"
	"errors"

	"github.com/centrifugal/centrifuge"

	"github.com/keycap/keycap/conncap"
)

// Limiter applies a conncap.Cap to a centrifuge node's connections.
type Limiter struct {
	caps *conncap.Cap
	app  string
}

// New returns a Limiter counting connections against caps under app (its
// cap: conncap.WithAppCap, else the default).
func New(caps *conncap.Cap, app string) *Limiter { return &Limiter{caps: caps, app: app} }

// OnConnecting wraps a node's connecting handler (nil for none): once next
// has authenticated the connection (ConnectReply.Credentials, or credentials
// set on the context by HTTP middleware), its user's connection is admitted
// or refused.
func (l *Limiter) OnConnecting(next centrifuge.ConnectingHandler) centrifuge.ConnectingHandler {
	return func(ctx context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		var reply centrifuge.ConnectReply
		if next != nil {
			var err error
			if reply, err = next(ctx, e); err != nil {
				return reply, err
			}
		}
		user := ""
		if reply.Credentials != nil {
			user = reply.Credentials.UserID
		} else if cred, ok := centrifuge.GetCredentials(ctx); ok {
			user = cred.UserID
		}
		if user == "" {
			return reply, nil // anonymous: not counted
		}
		err := l.caps.Admit(ctx, l.app, user, e.ClientID)
		switch {
		case err == nil:
			return reply, nil
		case errors.Is(err, conncap.ErrOverCap):
			return centrifuge.ConnectReply{}, centrifuge.DisconnectConnectionLimit
		default:
			return centrifuge.ConnectReply{}, centrifuge.DisconnectServerError
		}
	}
}

// OnConnect wraps a node's connect handler (nil for none) so that a client's
// slot is freed when it disconnects. centrifuge keeps one disconnect handler
// per client: if next sets its own with client.OnDisconnect, it must call
// Leave in it, or the slot is only freed by the next heartbeat (with
// conncap.WithLiveness and Live).
func (l *Limiter) OnConnect(next centrifuge.ConnectHandler) centrifuge.ConnectHandler {
	return func(client *centrifuge.Client) {
		client.OnDisconnect(func(centrifuge.DisconnectEvent) { l.Leave(client) })
		if next != nil {
			next(client)
		}
	}
}

// Leave frees client's slot.
func (l *Limiter) Leave(client *centrifuge.Client) { l.caps.Leave(l.app, client.ID()) }

// Live returns a liveness check for conncap.WithLiveness: a connection is
// live while node's hub holds it.
func Live(node *centrifuge.Node) func(app, user, conn string) bool {
	return func(_, user, conn string) bool {
		_, ok := node.Hub().UserConnections(user)[conn]
		return ok
	}
}
