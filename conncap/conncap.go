// Package conncap caps the connections each user holds across a whole
// cluster, exactly: every node admits a connection only if the user holds
// fewer than the cap, counted and changed atomically in one store key per
// user, so that two nodes can never race a user one over the cap.
//
// It knows nothing of protocols: pushercap applies it to the Pusher protocol,
// centrifugecap to centrifuge, and the keycap gateway to proxied WebSockets.
//
//	caps, err := conncap.New(store, conncap.WithDefaultCap(5))
//	defer caps.Close()
//	if err := caps.Admit(ctx, appID, userID, socketID); err != nil {
//		// over the cap (errors.Is(err, conncap.ErrOverCap)) or, failing
//		// closed, the store is down: refuse the connection
//	}
//	defer caps.Leave(socketID)
//
// # How it heals
//
// Each connection is a lease in its user's pool, owned by its node. A
// heartbeat (every 30 s by default) makes this node's part of every pool it
// touches exactly its live connections: it renews them (the store forgets a
// lease 90 s after its last renewal), adds back any the store lost, and drops
// this node's ghosts — connections whose release never reached the store. So
// a lost release costs a slot for at most one heartbeat, and a node that dies
// frees its connections within the TTL with nobody's help. The heartbeat costs
// one round trip per store node, for all the node's users together: it grows
// with the users on the node, never with a scan of the store.
//
// User ids may be any bytes: the store sees only a hash of the app and the
// user, so ids can neither collide nor inject anything into keys, and all of
// a user's data lives in one Redis Cluster slot.
package conncap

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap"
)

// Defaults of a Cap.
const (
	DefaultCap       = 5
	DefaultHeartbeat = 30 * time.Second
	DefaultTTL       = 90 * time.Second
)

// Cap admits connections under per-user caps, and keeps this node's count
// true in the store. It is safe for concurrent use.
type Cap struct {
	store      keycap.Store
	syncer     keycap.Syncer
	nodeName   string
	node       keycap.NodeID
	defaultCap int
	appCaps    map[string]int
	heartbeat  time.Duration
	ttl        time.Duration
	failOpen   bool
	observer   Observer
	live       func(app, user, conn string) bool

	mu    sync.Mutex
	conns map[connKey]*conn
	pools map[keycap.PoolID]*userPool

	outage atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool
}

type connKey struct{ app, conn string }

type conn struct {
	app, user string
	pool      keycap.PoolID
	member    keycap.Owner
	since     time.Time
}

// userPool is this node's part of one user's pool.
type userPool struct {
	members map[keycap.Owner]struct{}
}

// An Option configures a Cap.
type Option func(*Cap) error

// WithDefaultCap sets the cap of apps without their own (WithAppCap): the
// most connections one user may hold at once. 0 disables capping. Default
// DefaultCap.
func WithDefaultCap(n int) Option {
	return func(c *Cap) error {
		if n < 0 {
			return &keycap.InvalidLimitError{Field: "default cap", Value: strconv.Itoa(n), Reason: "must be at least 0"}
		}
		c.defaultCap = n
		return nil
	}
}

// WithAppCap sets the cap of one app. 0 disables capping for it.
func WithAppCap(app string, n int) Option {
	return func(c *Cap) error {
		if n < 0 {
			return &keycap.InvalidLimitError{Field: "cap of app " + strconv.Quote(app), Value: strconv.Itoa(n), Reason: "must be at least 0"}
		}
		c.appCaps[app] = n
		return nil
	}
}

// WithHeartbeat sets how often the node renews its connections and drops its
// ghosts (default DefaultHeartbeat), and how long the store keeps a
// connection that is not renewed (default DefaultTTL). ttl must exceed the
// interval, or live connections would expire between heartbeats.
func WithHeartbeat(interval, ttl time.Duration) Option {
	return func(c *Cap) error {
		switch {
		case interval <= 0:
			return &keycap.InvalidLimitError{Field: "heartbeat", Value: interval.String(), Reason: "must be positive"}
		case ttl <= interval:
			return &keycap.InvalidLimitError{Field: "ttl", Value: ttl.String(), Reason: "must exceed the heartbeat of " + interval.String()}
		}
		c.heartbeat, c.ttl = interval, ttl
		return nil
	}
}

// WithFailOpen admits connections uncounted while the store cannot answer;
// the first heartbeat after it recovers counts them. The default fails
// closed: the connection is refused.
func WithFailOpen() Option { return func(c *Cap) error { c.failOpen = true; return nil } }

// WithNodeName names this node. Names must be unique among the nodes sharing
// a store. Default: the host name, the process ID and a random suffix, so that
// a restarted node never mistakes its predecessor's connections for its own.
func WithNodeName(name string) Option {
	return func(c *Cap) error {
		if name == "" {
			return errors.New("conncap: node name is empty")
		}
		c.nodeName = name
		return nil
	}
}

// WithLiveness lets the heartbeat ask the server which connections are still
// open: a connection this node holds for longer than one heartbeat and that
// live reports closed is dropped as if it had left. It is a safety net for
// servers whose close hooks can be missed (centrifugecap.Live uses a
// centrifuge node's hub); a node's own Leave calls still free slots at once.
func WithLiveness(live func(app, user, conn string) bool) Option {
	return func(c *Cap) error { c.live = live; return nil }
}

// WithObserver sends events (admissions, refusals, departures, ghosts
// dropped, store outages) to o.
func WithObserver(o Observer) Option { return func(c *Cap) error { c.observer = o; return nil } }

// New returns a Cap on store, which must implement keycap.Syncer (memstore and
// redisstore do), and starts its heartbeat. Close stops it.
func New(store keycap.Store, opts ...Option) (*Cap, error) {
	syncer, ok := store.(keycap.Syncer)
	if !ok {
		return nil, fmt.Errorf("conncap: the store %T cannot sync a node's connections (keycap.Syncer)", store)
	}
	host, _ := os.Hostname()
	c := &Cap{
		store: store, syncer: syncer,
		nodeName:   fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32()),
		defaultCap: DefaultCap, appCaps: map[string]int{},
		heartbeat: DefaultHeartbeat, ttl: DefaultTTL,
		conns: map[connKey]*conn{}, pools: map[keycap.PoolID]*userPool{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.node = keycap.NewNodeID(c.nodeName)
	go c.loop()
	return c, nil
}

// Node returns this node's name.
func (c *Cap) Node() string { return c.nodeName }

// CapOf returns app's cap: 0 means uncapped.
func (c *Cap) CapOf(app string) int {
	if n, ok := c.appCaps[app]; ok {
		return n
	}
	return c.defaultCap
}

var (
	// ErrOverCap matches an *OverCapError.
	ErrOverCap = errors.New("conncap: too many connections for this user")
	// ErrClosed is returned by Admit after Close.
	ErrClosed = errors.New("conncap: closed")
)

// OverCapError refuses a connection: its user already holds Cap connections.
type OverCapError struct {
	App, User string
	Cap       int
}

func (e *OverCapError) Error() string {
	return fmt.Sprintf("conncap: user already holds %d connections to app %q, the cap", e.Cap, e.App)
}

// Is makes errors.Is(err, ErrOverCap) true.
func (e *OverCapError) Is(target error) bool { return target == ErrOverCap }

func poolOf(app, user string) keycap.PoolID { return keycap.NewPoolID("conncap:"+app, user) }

// Admit counts connection conn of user against app's cap, or refuses it with
// an *OverCapError. Admitting a connection already admitted (for the same
// user) does nothing and succeeds. An uncapped app (cap 0) admits everything
// without a store call. When the store cannot answer, Admit fails closed with
// an error matching keycap.ErrStoreUnavailable, or with WithFailOpen admits
// the connection uncounted; either way the outage is reported once.
func (c *Cap) Admit(ctx context.Context, app, user, conn string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	limit := c.CapOf(app)
	if limit == 0 {
		return nil
	}
	key := connKey{app, conn}
	e, fresh, err := c.register(key, app, user)
	if err != nil || !fresh {
		return err
	}
	ok, err := c.store.Acquire(ctx, e.pool, e.member, limit, c.ttl)
	switch {
	case err != nil && ctx.Err() != nil:
		c.unregister(key, e)
		return ctx.Err()
	case err != nil:
		c.failed(err)
		if c.failOpen {
			c.emit(Event{Kind: Admitted, App: app, User: user, Conn: conn, Uncounted: true})
			return nil // counted by the first heartbeat after the outage
		}
		c.unregister(key, e)
		c.emit(Event{Kind: Refused, App: app, User: user, Conn: conn, Err: err})
		return &keycap.StoreError{Limit: keycap.MustLimit("conncap:"+app, user, limit), Err: err}
	case !ok:
		c.answered()
		c.unregister(key, e)
		c.emit(Event{Kind: Refused, App: app, User: user, Conn: conn, Cap: limit})
		return &OverCapError{App: app, User: user, Cap: limit}
	}
	c.answered()
	c.emit(Event{Kind: Admitted, App: app, User: user, Conn: conn, Cap: limit})
	return nil
}

// register records conn as live before it is counted in the store, so that
// a heartbeat running meanwhile keeps it rather than dropping it as a ghost.
// fresh is false when conn was admitted already.
func (c *Cap) register(key connKey, app, user string) (*conn, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conns[key]; ok {
		if e.user != user {
			return nil, false, fmt.Errorf("conncap: connection %q of app %q is already admitted for another user", key.conn, app)
		}
		return e, false, nil
	}
	e := &conn{app: app, user: user, pool: poolOf(app, user), member: keycap.NodeOwner(c.node, app+"\x00"+key.conn), since: time.Now()}
	c.conns[key] = e
	up := c.pools[e.pool]
	if up == nil {
		up = &userPool{members: map[keycap.Owner]struct{}{}}
		c.pools[e.pool] = up
	}
	up.members[e.member] = struct{}{}
	return e, true, nil
}

// unregister forgets conn locally; the pool stays known until a heartbeat
// has made the store agree.
func (c *Cap) unregister(key connKey, e *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns[key] == e {
		delete(c.conns, key)
		if up := c.pools[e.pool]; up != nil {
			delete(up.members, e.member)
		}
	}
}

// Leave releases connection conn of app. Leaving a connection that was never
// admitted does nothing. If the release does not reach the store, the next
// heartbeat drops the ghost it leaves.
func (c *Cap) Leave(app, conn string) {
	key := connKey{app, conn}
	c.mu.Lock()
	e := c.conns[key]
	c.mu.Unlock()
	if e == nil {
		return
	}
	c.unregister(key, e)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.store.Release(ctx, e.pool, e.member); err != nil {
		c.failed(err)
	} else {
		c.answered()
	}
	c.emit(Event{Kind: Left, App: app, User: e.user, Conn: conn})
}

// Connections returns how many connections this node holds.
func (c *Cap) Connections() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}

// Heartbeat renews this node's connections and drops its ghosts now, in one
// Syncer.Sync batch. The heartbeat loop calls it every interval; tests and
// shutdown code may call it too.
func (c *Cap) Heartbeat(ctx context.Context) error {
	c.dropDead()
	return c.sync(ctx, false)
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
	old := time.Now().Add(-c.heartbeat)
	var check []held
	c.mu.Lock()
	for k, e := range c.conns {
		if e.since.Before(old) {
			check = append(check, held{k, e})
		}
	}
	c.mu.Unlock()
	for _, h := range check {
		if !c.live(h.key.app, h.e.user, h.key.conn) {
			c.unregister(h.key, h.e)
			c.emit(Event{Kind: Left, App: h.key.app, User: h.e.user, Conn: h.key.conn})
		}
	}
}

// sync makes the store hold exactly this node's live connections; with none,
// it withdraws every one of them.
func (c *Cap) sync(ctx context.Context, none bool) error {
	c.mu.Lock()
	batch := make([]keycap.SyncPool, 0, len(c.pools))
	for id, up := range c.pools {
		sp := keycap.SyncPool{Pool: id}
		if !none {
			sp.Members = make([]keycap.Owner, 0, len(up.members))
			for m := range up.members {
				sp.Members = append(sp.Members, m)
			}
		}
		batch = append(batch, sp)
	}
	c.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := c.syncer.Sync(ctx, c.node, c.ttl, batch)
	if err != nil {
		c.failed(err)
		return err
	}
	var failure error
	ghosts := 0
	c.mu.Lock()
	for _, sp := range batch {
		if sp.Err != nil {
			failure = sp.Err
			continue
		}
		ghosts += sp.Removed
		// A pool with no live connection, now empty in the store too, is
		// forgotten: it costs nothing in later heartbeats.
		if up := c.pools[sp.Pool]; up != nil && len(up.members) == 0 && len(sp.Members) == 0 {
			delete(c.pools, sp.Pool)
		}
	}
	c.mu.Unlock()
	if failure != nil {
		c.failed(failure)
		return failure
	}
	c.answered()
	if ghosts > 0 {
		c.emit(Event{Kind: GhostsDropped, Count: ghosts})
	}
	return nil
}

func (c *Cap) loop() {
	defer close(c.done)
	t := time.NewTicker(c.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.heartbeat)
			_ = c.Heartbeat(ctx)
			cancel()
		}
	}
}

// Close stops the heartbeat and withdraws every connection this node holds
// from the store, so that their slots are free at once: call it when the
// node stops serving. Admit returns ErrClosed afterwards.
func (c *Cap) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(c.stop)
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.sync(ctx, true)
	c.mu.Lock()
	clear(c.conns)
	c.mu.Unlock()
	return err
}

// Stop stops the heartbeat without withdrawing anything, as a node that dies
// would: its connections expire from the store within the TTL. Tests use it.
func (c *Cap) Stop() {
	if c.closed.CompareAndSwap(false, true) {
		close(c.stop)
		<-c.done
	}
}

func (c *Cap) emit(e Event) {
	if c.observer != nil {
		c.observer.ObserveConn(e)
	}
}

func (c *Cap) failed(err error) {
	if c.outage.CompareAndSwap(false, true) {
		c.emit(Event{Kind: StoreFailed, Err: err})
	}
}

func (c *Cap) answered() {
	if c.outage.Load() && c.outage.CompareAndSwap(true, false) {
		c.emit(Event{Kind: StoreRecovered})
	}
}
