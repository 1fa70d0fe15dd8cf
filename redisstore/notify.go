package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap"
)

// hub holds the store's pub/sub subscriptions: one connection per Redis
// (per slot range on a cluster, since a sharded channel lives on its
// slot's master), whatever the number of pools and waiters.
type hub struct {
	s      *Store
	mu     sync.Mutex
	groups map[string]*group
}

// group is one pub/sub connection and the channels it carries.
type group struct {
	key   string
	ps    *redis.PubSub
	chans map[string]*watch
	done  chan struct{} // closed when run returns
}

// watch is one channel's watchers, and the callers waiting for Redis to
// confirm its subscription.
type watch struct {
	pool      keycap.PoolID
	fns       map[*func([]keycap.Owner)]struct{}
	confirmed bool
	pending   []chan error
}

func (h *hub) init(s *Store) {
	h.s = s
	h.groups = make(map[string]*group)
}

// Notify implements keycap.Notifier with Redis's sharded pub/sub (SSUBSCRIBE,
// Redis 7 or later): the scripts that hand a slot to a ticket publish the
// owners served on the pool's channel (Channel). It returns once Redis
// confirmed the subscription. On a Redis without sharded pub/sub it returns
// an error, and waiters poll (keycap.LinePoll).
func (s *Store) Notify(ctx context.Context, pool keycap.PoolID, fn func([]keycap.Owner)) (func(), error) {
	channel := s.Channel(pool)
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
	g := h.groups[key]
	fresh := g == nil
	if fresh {
		g = &group{key: key, chans: make(map[string]*watch), done: make(chan struct{})}
		h.groups[key] = g
	}
	w := g.chans[channel]
	newChannel := w == nil
	if newChannel {
		w = &watch{pool: pool, fns: make(map[*func([]keycap.Owner)]struct{})}
		g.chans[channel] = w
	}
	w.fns[fp] = struct{}{}
	var confirmed chan error
	if !w.confirmed {
		confirmed = make(chan error, 1)
		w.pending = append(w.pending, confirmed)
	}
	if fresh {
		if s.cluster != nil {
			g.ps = s.cluster.SSubscribe(context.Background(), channel)
		} else {
			g.ps = s.client.SSubscribe(context.Background(), channel)
		}
		go h.run(g)
	} else if newChannel {
		if err := g.ps.SSubscribe(context.Background(), channel); err != nil {
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

// stop removes one watcher; a channel left without any is unsubscribed
// from, and a connection left without channels closed.
func (h *hub) stop(g *group, channel string, fp *func([]keycap.Owner)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := g.chans[channel]
	if w == nil {
		return
	}
	delete(w.fns, fp)
	if len(w.fns) > 0 {
		return
	}
	delete(g.chans, channel)
	if len(g.chans) == 0 {
		if h.groups[g.key] == g {
			delete(h.groups, g.key)
		}
		_ = g.ps.Close() // ends run
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = g.ps.SUnsubscribe(ctx, channel)
}

// run reads g's connection: confirmations, and messages that it hands to
// the channel's watchers. go-redis reconnects a broken connection and
// subscribes again; an error that Redis itself sent (no SSUBSCRIBE before
// Redis 7) fails the callers waiting for a confirmation.
func (h *hub) run(g *group) {
	defer close(g.done)
	backoff := 10 * time.Millisecond
	for {
		msg, err := g.ps.Receive(context.Background())
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			var re redis.Error
			if errors.As(err, &re) {
				h.failPending(g, err)
			}
			h.mu.Lock()
			gone := len(g.chans) == 0
			h.mu.Unlock()
			if gone {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
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
	var served []keycap.Owner
	for len(payload) >= len(keycap.Owner{}) {
		var o keycap.Owner
		copy(o[:], payload)
		served = append(served, o)
		payload = payload[len(o):]
	}
	h.mu.Lock()
	w := g.chans[channel]
	var fns []func([]keycap.Owner)
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
