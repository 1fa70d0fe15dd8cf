package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

// hub holds the store's pub/sub subscriptions: one connection per Redis
// (per slot range on a cluster, since a sharded channel lives on its
// slot's master), whatever the number of pools and waiters.
type hub struct {
	s           *Store
	mu          sync.Mutex
	groups      map[string]*group
	unsupported error // Redis refused SSUBSCRIBE (before 7): waiters poll
}

// group is one pub/sub connection and the channels it carries.
type group struct {
	key    string
	ps     *redis.PubSub // replaced when its connection breaks
	chans  map[string]*watch
	closed bool
}

// watch is one channel's watchers, and the callers waiting for Redis to
// confirm its subscription.
type watch struct {
	pool      store.PoolID
	fns       map[*func([]store.Owner)]struct{}
	confirmed bool
	pending   []chan error
}

func (h *hub) init(s *Store) {
	h.s = s
	h.groups = make(map[string]*group)
}

// Notify implements store.Store with Redis's sharded pub/sub (SSUBSCRIBE,
// Redis 7 or later): the scripts that hand a slot to a ticket publish the
// owners served on the pool's channel. It returns once Redis
// confirmed the subscription. On a Redis without sharded pub/sub it returns
// an error, and waiters poll (every second).
func (s *Store) Notify(ctx context.Context, pool store.PoolID, fn func([]store.Owner)) (func(), error) {
	channel := s.channel(pool)
	key := ""
	if s.cluster != nil {
		key = s.slots.of(slotOf(pool))
		if key == "" {
			key = fmt.Sprint("slot ", slotOf(pool))
		}
	}
	h := &s.hub
	fp := &fn
	h.mu.Lock()
	if h.unsupported != nil {
		err := h.unsupported
		h.mu.Unlock()
		return nil, fmt.Errorf("redisstore: notify: %w", err)
	}
	g := h.groups[key]
	fresh := g == nil
	if fresh {
		g = &group{key: key, chans: make(map[string]*watch)}
		h.groups[key] = g
	}
	w := g.chans[channel]
	newChannel := w == nil
	if newChannel {
		w = &watch{pool: pool, fns: make(map[*func([]store.Owner)]struct{})}
		g.chans[channel] = w
	}
	w.fns[fp] = struct{}{}
	var confirmed chan error
	if !w.confirmed {
		confirmed = make(chan error, 1)
		w.pending = append(w.pending, confirmed)
	}
	// The caller's context (the decision budget) bounds the dial and the
	// write, which happen under the hub's lock.
	if fresh {
		g.ps = h.subscribe(ctx, []string{channel})
		go h.run(g)
	} else if newChannel {
		if err := g.ps.SSubscribe(ctx, channel); err != nil {
			h.mu.Unlock()
			h.stop(g, channel, fp)
			return nil, fmt.Errorf("redisstore: notify: %w", err)
		}
	}
	h.mu.Unlock()
	stop := sync.OnceFunc(func() { h.stop(g, channel, fp) })
	if confirmed == nil {
		return stop, nil
	}
	select {
	case err := <-confirmed:
		if err != nil {
			stop()
			return nil, fmt.Errorf("redisstore: notify: %w", err)
		}
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
}

// subscribe opens a pub/sub connection for channels, one SSUBSCRIBE each:
// on a cluster, channels of several hash slots may share a master's
// connection, but not one command.
func (h *hub) subscribe(ctx context.Context, channels []string) *redis.PubSub {
	var ps *redis.PubSub
	if h.s.cluster != nil {
		ps = h.s.cluster.SSubscribe(ctx, channels[0])
	} else {
		ps = h.s.client.SSubscribe(ctx, channels[0])
	}
	for _, ch := range channels[1:] {
		_ = ps.SSubscribe(ctx, ch)
	}
	return ps
}

// stop removes one watcher; a channel left without any is unsubscribed
// from, and a connection left without channels closed.
func (h *hub) stop(g *group, channel string, fp *func([]store.Owner)) {
	h.mu.Lock()
	w := g.chans[channel]
	if w == nil {
		h.mu.Unlock()
		return
	}
	delete(w.fns, fp)
	if len(w.fns) > 0 {
		h.mu.Unlock()
		return
	}
	delete(g.chans, channel)
	ps := g.ps
	if len(g.chans) == 0 {
		g.closed = true
		if h.groups[g.key] == g {
			delete(h.groups, g.key)
		}
		h.mu.Unlock()
		_ = ps.Close() // ends run
		return
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = ps.SUnsubscribe(ctx, channel)
}

// run reads g's connection: confirmations, and messages that it hands to
// the channel's watchers. When the connection breaks it opens a new one
// and subscribes again channel by channel (go-redis's own reconnection
// would send them all in one SSUBSCRIBE, which a cluster refuses with
// CROSSSLOT when they span hash slots), and tells every watcher to look,
// since handoffs may have been missed meanwhile. A Redis that does not
// know SSUBSCRIBE fails the callers waiting for a confirmation, and every
// later Notify.
func (h *hub) run(g *group) {
	backoff := 10 * time.Millisecond
	for {
		h.mu.Lock()
		ps, closed := g.ps, g.closed
		h.mu.Unlock()
		if closed {
			return
		}
		msg, err := ps.Receive(context.Background())
		if err != nil {
			h.mu.Lock()
			closed, replaced := g.closed, g.ps != ps
			h.mu.Unlock()
			if closed {
				return
			}
			if replaced {
				continue
			}
			var re redis.Error
			if errors.As(err, &re) {
				h.failPending(g, err)
				if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
					h.abandon(g, err)
					return
				}
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			h.rebuild(g, ps)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "ssubscribe" || m.Kind == "subscribe" {
				h.confirm(g, m.Channel)
			}
		case *redis.Message:
			h.deliver(g, m.Channel, m.Payload)
		}
	}
}

// rebuild replaces g's broken connection old by a new one carrying the
// same channels, and wakes every watcher.
func (h *hub) rebuild(g *group, old *redis.PubSub) {
	h.mu.Lock()
	if g.closed || g.ps != old || len(g.chans) == 0 {
		h.mu.Unlock()
		return
	}
	channels := make([]string, 0, len(g.chans))
	for ch, w := range g.chans {
		channels = append(channels, ch)
		w.confirmed = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	g.ps = h.subscribe(ctx, channels)
	cancel()
	h.mu.Unlock()
	_ = old.Close()
	for _, ch := range channels {
		h.deliver(g, ch, "") // no owners named: every waiter looks
	}
}

// abandon closes g for good: Redis has no sharded pub/sub.
func (h *hub) abandon(g *group, err error) {
	h.mu.Lock()
	h.unsupported = err
	g.closed = true
	if h.groups[g.key] == g {
		delete(h.groups, g.key)
	}
	ps := g.ps
	h.mu.Unlock()
	_ = ps.Close()
}

func (h *hub) confirm(g *group, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := g.chans[channel]; w != nil {
		w.confirmed = true
		for _, c := range w.pending {
			c <- nil
		}
		w.pending = nil
	}
}

func (h *hub) failPending(g *group, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range g.chans {
		for _, c := range w.pending {
			c <- err
		}
		w.pending = nil
	}
}

// deliver hands a message's owners to the channel's watchers.
func (h *hub) deliver(g *group, channel, payload string) {
	var served []store.Owner
	for len(payload) >= len(store.Owner{}) {
		var o store.Owner
		copy(o[:], payload)
		served = append(served, o)
		payload = payload[len(o):]
	}
	h.mu.Lock()
	w := g.chans[channel]
	var fns []func([]store.Owner)
	if w != nil {
		for fp := range w.fns {
			fns = append(fns, *fp)
		}
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(served)
	}
}
