package testenv

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips counts the round trips a go-redis client makes: one per command
// and one per pipeline sent to a node. On a cluster client it counts at the
// nodes, so a pipeline that spans three masters counts three.
//
// The handshake go-redis makes on each new connection (HELLO, CLIENT
// SETINFO) is counted apart, in Setup: it is paid once per connection, not
// per operation.
type RoundTrips struct{ n, setup atomic.Int64 }

// CountRoundTrips installs a counter on c.
func CountRoundTrips(c redis.UniversalClient) *RoundTrips {
	r := &RoundTrips{}
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(r) })
		_ = cc.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(r)
			return nil
		})
		return r
	}
	c.AddHook(r)
	return r
}

// Load returns the round trips counted so far, handshakes excluded.
func (r *RoundTrips) Load() int64 { return r.n.Load() }

// Setup returns the round trips spent on connection handshakes.
func (r *RoundTrips) Setup() int64 { return r.setup.Load() }

func isSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

// DialHook implements redis.Hook.
func (r *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isSetup(cmd) {
			r.setup.Add(1)
		} else {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && isSetup(cmds[0]) {
			r.setup.Add(1)
		} else {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
