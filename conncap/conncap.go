// Package conncap caps the connections each user holds across a whole
// cluster, exactly: every node admits a connection only if the user holds
// fewer than the cap, counted and changed atomically in one store key per
// user, so that two nodes can never race a user one over the cap.
//
// It knows nothing of protocols: pushercap applies it to the Pusher protocol,
// centrifugecap to centrifuge, and the keycap gateway to proxied WebSockets.
//
//	limiter, err := keycap.NewLimiter(store) // redisstore for a cluster
//	caps, err := conncap.New(limiter, conncap.WithDefaultCap(5))
//	defer caps.Close()
//	if err := caps.Admit(ctx, appID, userID, socketID); err != nil {
//		// over the cap (errors.Is(err, conncap.ErrOverCap)) or, failing
//		// closed, the store is down: refuse the connection
//	}
//	defer caps.Leave(appID, socketID)
//
// # How it heals
//
// Each connection is a member lease of the node (frontdoor.AcquireMember)
// in its user's pool. The Limiter's heartbeat (every 30 s by default,
// keycap.WithHeartbeat) makes this node's part of every pool it touches
// exactly its live connections: it renews them (the store forgets a lease
// 90 s after its last renewal, WithSpec's TTL), adds back any the store lost, and
// drops this node's ghosts — connections whose release never reached the
// store. So a lost release costs a slot for at most one heartbeat, and a node
// that dies frees its connections within the TTL with nobody's help. The
// heartbeat costs one round trip per store node, for all the node's users
// together: it grows with the users on the node, never with a scan of the
// store.
//
// User ids may be any bytes: the store sees only a hash of the app and the
// user, so ids can neither collide nor inject anything into keys, and all of
// a user's data lives in one Redis Cluster slot. Connection pools are of the
// family keycap.FamilyConn: no other front door's limit can count in them.
//
// Events (admissions are SlotAcquired, refusals LimitExceeded, departures
// SlotReleased, ghosts GhostsDropped, all of FamilyConn with the app as the
// limit's name and the user as its key) go to the Limiter's observer.
package conncap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/frontdoor"
	"github.com/keycap/keycap/store"
)

// Defaults of a Cap.
const (
	DefaultCap = 5
	DefaultTTL = 90 * time.Second
)

// Cap admits connections under per-user caps, and keeps this node's count
// true in the store. It is safe for concurrent use.
type Cap struct {
	l          *keycap.Limiter
	defaultCap int
	appCaps    map[string]int
	spec       keycap.Spec // every app's: TTL, fail mode, budget, shadow
	live       func(app, user, conn string) bool

	mu    sync.Mutex
	conns map[connKey]*conn

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

type connKey struct{ app, conn string }

type conn struct {
	user  string
	lease *keycap.Lease // nil while its admission is under way
	since time.Time
}

// An Option configures a Cap.
type Option struct{ apply func(*config) }

type config struct {
	defaultCap int
	appCaps    map[string]int
	badApp     string
	badCap     int
	spec       keycap.Spec
	live       func(app, user, conn string) bool
}

// WithDefaultCap sets the cap of apps without their own (WithAppCap): the
// most connections one user may hold at once. 0 disables capping. Default
// DefaultCap.
func WithDefaultCap(n int) Option { return Option{func(c *config) { c.defaultCap = n }} }

// WithAppCap sets the cap of one app. 0 disables capping for it.
func WithAppCap(app string, n int) Option {
	return Option{func(c *config) {
		if n < 0 && c.badApp == "" {
			c.badApp, c.badCap = app, n
		}
		c.appCaps[app] = n
	}}
}

// WithSpec sets the limit every app's connections take per user, as a
// keycap.Spec, with what connections decide for themselves:
//   - Name, Max, Family: leave them zero; the name is the app's, the max
//     its cap (WithDefaultCap, WithAppCap), the family keycap.FamilyConn.
//   - TTL: how long the store keeps a connection that is not renewed: how
//     long a dead node's connections keep counting. 0: DefaultTTL. It must
//     exceed the Limiter's heartbeat.
//   - FailMode: what Admit does when the store cannot answer.
//     keycap.FailClosed (and FailDefault: the default for connections)
//     refuses the connection; keycap.FailOpen admits it uncounted, and the
//     first heartbeat after the store recovers counts it.
//   - Budget, Shadow: as for any limit.
//   - Wait, Weight, Parent, Share, Minimum: leave them zero; a connection
//     takes one slot of its user's pool, at once or not at all.
func WithSpec(s keycap.Spec) Option { return Option{func(c *config) { c.spec = s }} }

// WithLiveness lets the Cap ask the server, every heartbeat, which
// connections are still open: a connection held for longer than one
// heartbeat and that live reports closed is dropped as if it had left. It is
// a safety net for servers whose close hooks can be missed (centrifugecap.Live
// uses a centrifuge node's hub); Leave still frees slots at once.
func WithLiveness(live func(app, user, conn string) bool) Option {
	return Option{func(c *config) { c.live = live }}
}

// New returns a Cap whose connections are member leases of limiter's node.
// The Limiter's store must keep members (store.Members: memstore,
// redisstore, pgstore, nullstore). Close withdraws the node's connections.
func New(limiter *keycap.Limiter, opts ...Option) (*Cap, error) {
	if limiter == nil {
		return nil, errors.New("conncap: New: limiter is nil")
	}
	if err := frontdoor.Need(limiter, store.Members); err != nil {
		return nil, fmt.Errorf("conncap: %w", err)
	}
	c := config{defaultCap: DefaultCap, appCaps: map[string]int{}}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&c)
		}
	}
	invalid := func(field, value, reason string) error {
		return &keycap.InvalidLimitError{Field: field, Value: value, Reason: reason}
	}
	sp := c.spec
	if sp.TTL == 0 {
		sp.TTL = DefaultTTL
	}
	if sp.FailMode == keycap.FailDefault {
		sp.FailMode = keycap.FailClosed
	}
	beat := frontdoor.HeartbeatInterval(limiter)
	switch {
	case sp.Name != "":
		return nil, invalid("Name", strconv.Quote(sp.Name), "is the app's: leave it empty")
	case sp.Max != 0:
		return nil, invalid("Max", strconv.Itoa(sp.Max), "is the app's cap (WithDefaultCap, WithAppCap): leave it zero")
	case sp.Family != keycap.FamilyApp:
		return nil, invalid("Family", sp.Family.String(), "is the connections' family: leave it zero")
	case sp.Weight > 1 || sp.Parent != nil || sp.Share != 0 || sp.Minimum != 0:
		return nil, invalid("Weight", strconv.Itoa(sp.Weight), "a connection takes one slot of its user's pool, with no parent: leave Weight, Parent, Share and Minimum zero")
	case sp.Wait != 0:
		return nil, invalid("Wait", sp.Wait.String(), "a connection is admitted or refused at once: leave it zero")
	case c.defaultCap < 0:
		return nil, invalid("default cap", strconv.Itoa(c.defaultCap), "must be at least 0")
	case c.badApp != "":
		return nil, invalid("cap of app "+strconv.Quote(c.badApp), strconv.Itoa(c.badCap), "must be at least 0")
	case sp.TTL <= beat:
		return nil, invalid("TTL", sp.TTL.String(), "must exceed the Limiter's heartbeat of "+beat.String())
	}
	sp.Family = keycap.FamilyConn
	check := sp
	check.Name, check.Max = "conncap", max(c.defaultCap, 1)
	if err := check.Validate(); err != nil {
		return nil, err
	}
	cp := &Cap{
		l: limiter, defaultCap: c.defaultCap, appCaps: c.appCaps, spec: sp, live: c.live,
		conns: map[connKey]*conn{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	if cp.live != nil {
		go cp.liveness()
	} else {
		close(cp.done)
	}
	return cp, nil
}

// Node returns this node's name (the Limiter's).
func (c *Cap) Node() string { return frontdoor.Node(c.l) }

// CapOf returns app's cap: 0 means uncapped.
func (c *Cap) CapOf(app string) int {
	if n, ok := c.appCaps[app]; ok {
		return n
	}
	return c.defaultCap
}

// ErrOverCap matches an *OverCapError.
var ErrOverCap = errors.New("conncap: too many connections for this user")

// OverCapError refuses a connection: its user already holds Cap connections.
// It matches ErrOverCap and keycap.ErrLimitExceeded.
type OverCapError struct {
	App, User string
	Cap       int
}

func (e *OverCapError) Error() string {
	return fmt.Sprintf("conncap: user already holds %d connections to app %q, the cap", e.Cap, e.App)
}

// Is makes errors.Is(err, ErrOverCap) and errors.Is(err,
// keycap.ErrLimitExceeded) true.
func (e *OverCapError) Is(target error) bool {
	return target == ErrOverCap || target == keycap.ErrLimitExceeded
}

// Admit counts the connection connID of user against app's cap, or refuses it with
// an *OverCapError. Admitting a connection already admitted (for the same
// user) does nothing and succeeds. An uncapped app (cap 0) admits everything
// without a store call. When the store cannot answer within the decision
// budget, Admit fails closed with an error matching
// keycap.ErrStoreUnavailable, or, with a spec of keycap.FailOpen, admits
// the connection uncounted; either way the outage is reported once. After
// Close it returns keycap.ErrClosed.
func (c *Cap) Admit(ctx context.Context, app, user, connID string) error {
	if c.closed.Load() {
		return keycap.ErrClosed
	}
	limit := c.CapOf(app)
	if limit == 0 {
		return nil
	}
	key := connKey{app, connID}
	c.mu.Lock()
	if e, ok := c.conns[key]; ok {
		c.mu.Unlock()
		if e.user != user {
			return fmt.Errorf("conncap: connection %q of app %q is already admitted for another user", connID, app)
		}
		return nil
	}
	e := &conn{user: user, since: time.Now()}
	c.conns[key] = e
	c.mu.Unlock()

	sp := c.spec
	sp.Name, sp.Max = app, limit
	var err error
	e.lease, err = frontdoor.AcquireMember(ctx, c.l, app+"\x00"+connID, sp.For(user))
	if err != nil {
		c.mu.Lock()
		if c.conns[key] == e {
			delete(c.conns, key)
		}
		c.mu.Unlock()
		var le *keycap.LimitError
		if errors.As(err, &le) {
			return &OverCapError{App: app, User: user, Cap: limit}
		}
		return err
	}
	c.mu.Lock()
	left := c.conns[key] != e // Leave, or Close, came while it was admitted
	c.mu.Unlock()
	if left {
		e.lease.Release()
	}
	return nil
}

// Leave releases the connection connID of app. Leaving a connection that was never
// admitted does nothing. If the release does not reach the store, the next
// heartbeat drops the ghost it leaves.
func (c *Cap) Leave(app, connID string) {
	key := connKey{app, connID}
	c.mu.Lock()
	e := c.conns[key]
	delete(c.conns, key)
	c.mu.Unlock()
	if e != nil && e.lease != nil {
		e.lease.Release()
	}
}

// Connections returns how many connections this node holds.
func (c *Cap) Connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// Heartbeat drops the connections that WithLiveness reports closed, then
// renews this node's connections and drops its ghosts now (the Limiter's
// heartbeat does it every interval). Tests and shutdown code may call it.
func (c *Cap) Heartbeat(ctx context.Context) error {
	c.dropDead()
	return frontdoor.Heartbeat(ctx, c.l)
}

// dropDead forgets the connections that the liveness check reports closed.
func (c *Cap) dropDead() {
	if c.live == nil {
		return
	}
	type held struct {
		key connKey
		e   *conn
	}
	old := time.Now().Add(-frontdoor.HeartbeatInterval(c.l))
	var check []held
	c.mu.Lock()
	for k, e := range c.conns {
		if e.since.Before(old) && e.lease != nil {
			check = append(check, held{k, e})
		}
	}
	c.mu.Unlock()
	for _, h := range check {
		if !c.live(h.key.app, h.e.user, h.key.conn) {
			c.mu.Lock()
			gone := c.conns[h.key] == h.e
			if gone {
				delete(c.conns, h.key)
			}
			c.mu.Unlock()
			if gone {
				h.e.lease.Release()
			}
		}
	}
}

// liveness runs the liveness check every heartbeat.
func (c *Cap) liveness() {
	defer close(c.done)
	t := time.NewTicker(frontdoor.HeartbeatInterval(c.l))
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.dropDead()
		}
	}
}

// Close withdraws every connection this node holds from the store, in one
// batch, so that their slots are free at once: call it when the node stops
// serving. Admit returns keycap.ErrClosed afterwards. It does not close the
// Limiter.
func (c *Cap) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.stop)
	<-c.done
	c.mu.Lock()
	clear(c.conns)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return frontdoor.Withdraw(ctx, c.l)
}
