package pgstore

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keycap/keycap/store"
)

// hub is the store's one LISTEN connection, held while anyone watches a
// pool, and the watchers it hands notifications to.
type hub struct {
	channel string // quoted, for LISTEN

	mu      sync.Mutex
	pools   map[store.PoolID]map[*func([]store.Owner)]struct{}
	running bool
	start   *start        // the running listener's first LISTEN
	cancel  func()        // stops the running listener
	done    chan struct{} // closed when it has stopped
}

// start is the outcome of a listener's first LISTEN: err is set before
// ready is closed, and read by every caller that waited for it.
type start struct {
	ready chan struct{}
	err   error
}

// Notify implements store.Store (store.Notifications) with LISTEN/NOTIFY: the functions that
// hand a slot to a ticket announce the owners served on the store's channel,
// after their transaction commits. The store holds one connection of its
// pool, LISTENing, while anyone watches (taken out of the pool: size it one
// larger); Notify returns once it listens. A notification lost to a broken
// connection is made up for by the waiters' polls (every second).
func (s *Store) Notify(ctx context.Context, pool store.PoolID, fn func([]store.Owner)) (func(), error) {
	h := &s.hub
	fp := &fn
	h.mu.Lock()
	if h.pools == nil {
		h.pools = make(map[store.PoolID]map[*func([]store.Owner)]struct{})
	}
	if h.pools[pool] == nil {
		h.pools[pool] = make(map[*func([]store.Owner)]struct{})
	}
	h.pools[pool][fp] = struct{}{}
	if !h.running {
		lctx, cancel := context.WithCancel(context.Background())
		h.running, h.cancel = true, cancel
		h.start, h.done = &start{ready: make(chan struct{})}, make(chan struct{})
		go s.listen(lctx, h.start, h.done)
	}
	st := h.start
	h.mu.Unlock()
	stop := sync.OnceFunc(func() { h.stop(pool, fp) })
	select {
	case <-st.ready:
		if err := st.err; err != nil {
			stop()
			return nil, wrap("notify", err)
		}
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// stop removes a watcher; the last one stops the listener.
func (h *hub) stop(pool store.PoolID, fp *func([]store.Owner)) {
	h.mu.Lock()
	delete(h.pools[pool], fp)
	if len(h.pools[pool]) == 0 {
		delete(h.pools, pool)
	}
	var done chan struct{}
	if len(h.pools) == 0 && h.running {
		h.running = false
		h.cancel()
		done = h.done
	}
	h.mu.Unlock()
	if done != nil {
		<-done
	}
}

// listen holds a connection that LISTENs and dispatches what it hears,
// until ctx ends; it reconnects when the connection breaks. The first
// LISTEN's outcome goes to ready, which is then closed.
func (s *Store) listen(ctx context.Context, st *start, done chan struct{}) {
	defer close(done)
	first := true
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, func() {
			if first {
				first = false
				close(st.ready)
			}
			backoff = 50 * time.Millisecond
		})
		if first {
			// Every caller waiting for this listener reads the error.
			st.err = err
			s.hub.mu.Lock()
			if s.hub.done == done {
				s.hub.running = false // the next Notify starts again
			}
			s.hub.mu.Unlock()
			close(st.ready)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listenOnce takes a connection out of the pool, LISTENs, calls listening,
// and dispatches notifications until ctx ends or the connection breaks.
func (s *Store) listenOnce(ctx context.Context, listening func()) error {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	pc, err := s.pool.Acquire(actx)
	if err != nil {
		cancel()
		return err
	}
	conn := pc.Hijack() // never back to the pool: it LISTENs
	defer conn.Close(context.Background())
	_, err = conn.Exec(actx, "LISTEN "+s.hub.channel)
	cancel()
	if err != nil {
		return err
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.hub.deliver(n)
	}
}

// deliver parses a notification ("<pool hex>" or "<pool hex>:<owners hex>")
// and hands its owners to the pool's watchers.
func (h *hub) deliver(n *pgconn.Notification) {
	poolHex, ownersHex, _ := strings.Cut(n.Payload, ":")
	var pool store.PoolID
	b, err := hex.DecodeString(poolHex)
	if err != nil || len(b) != len(pool) {
		return
	}
	copy(pool[:], b)
	var served []store.Owner
	if b, err = hex.DecodeString(ownersHex); err == nil {
		for len(b) >= len(store.Owner{}) {
			var o store.Owner
			copy(o[:], b)
			served = append(served, o)
			b = b[len(o):]
		}
	}
	h.mu.Lock()
	var fns []func([]store.Owner)
	for fp := range h.pools[pool] {
		fns = append(fns, *fp)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(served)
	}
}
