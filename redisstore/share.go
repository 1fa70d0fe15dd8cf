package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

func (s *Store) shareNames(parent store.PoolID) (keys []string, lines, channel string) {
	h := parent.String()
	p := s.prefix + "keycap:"
	return []string{p + "share:{" + h + "}", p + "shmeta:{" + h + "}", p + "shwait:{" + h + "}",
		p + "shq:{" + h + "}", p + "shqmin:{" + h + "}", p + "shacct:{" + h + "}", p + "shidle:{" + h + "}"}, p + "shline:{" + h + "}:", p + "wake:{" + h + "}"
}

// held is a lease's use in ms for share.lua: fractions kept, 0 for none
// (the script then counts from the grant).
func held(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// members returns the sorted-set members of owner's lease of weight w in
// a pool without a parent: the owner token, then owner#1 to owner#(w-1).
func members(owner store.Owner, w int) []any {
	m := make([]any, w)
	m[0] = owner[:]
	for i := 1; i < w; i++ {
		m[i] = string(owner[:]) + "#" + strconv.Itoa(i)
	}
	return m
}

// acquireShared is Acquire for a demand with a weight or a parent: one
// EVALSHA (and, with WithReplicaAcks, a WAIT in the same round trip). A
// demand without a parent runs the plain pool's acquire or queue script
// with its weight; one with a parent runs share.lua on the parent's keys.
func (s *Store) acquireShared(ctx context.Context, d demand) (store.Grant, error) {
	var t *store.Ticket
	if d.Line.TTL > 0 {
		t = &d.Line
	}
	var script *redis.Script
	var keys []string
	var args []any
	w := d.Weight()
	fence := 0
	if d.Fence {
		fence = 1
	}
	switch {
	case d.HasParent():
		var lines, channel string
		keys, lines, channel = s.shareNames(d.Shared.Parent.Pool)
		var tttl, claim int64
		if t != nil {
			tttl, claim = ms(t.TTL), ms(t.Claim)
		}
		script = shareScript
		args = []any{"take", lines, channel, d.Pool.String(), d.Owner[:], w, d.Max, ms(d.TTL), d.Shared.Parent.Max, max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min, tttl, claim, fence}
	case t != nil:
		var channel string
		keys, channel = s.names(d.Pool)
		script = queueScript
		args = []any{d.Owner[:], d.Max, ms(d.TTL), ms(t.TTL), ms(t.Claim), channel, w, fence}
	default:
		var channel string
		keys, channel = s.names(d.Pool)
		script = acquireScript
		args = []any{d.Owner[:], d.Max, ms(d.TTL), channel, w, fence}
	}
	var reply *redis.Cmd
	var wait *redis.Cmd
	var err error
	if s.acks > 0 {
		reply, wait, err = s.acked(ctx, script, keys, args...)
	} else if d.HasParent() {
		reply = s.call(ctx, script, keys, args...)
		if err = reply.Err(); err != nil {
			s.failed(err)
		}
	} else {
		// A weighted lease of a pool goes through the pool's lane, as its
		// plain leases do, so that it is ordered after a plain release sent
		// without waiting (ReleaseAsync).
		reply = s.script(script, keys, args...)
		if err = s.do(ctx, d.Pool, true, reply); err == nil {
			err = reply.Err()
		}
		if err != nil {
			s.failed(err)
		}
	}
	if err != nil {
		return store.Grant{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	var granted bool
	var ahead int
	var token uint64
	if script == acquireScript {
		n, err := reply.Int64()
		if err != nil {
			return store.Grant{}, fmt.Errorf("redisstore: acquire: %w", err)
		}
		granted = n != 0
		if d.Fence {
			token = uint64(n)
		}
	} else {
		res, err := reply.Int64Slice()
		if err != nil || len(res) < 2 {
			return store.Grant{}, fmt.Errorf("redisstore: acquire: unexpected reply %v (%v)", res, err)
		}
		granted, ahead = res[0] == 1, int(res[1])
		if granted && len(res) > 2 {
			token = uint64(res[2])
		}
	}
	if d.Fence && granted && token <= 1 {
		return store.Grant{}, fmt.Errorf("redisstore: acquire: a grant without its fencing token (%d)", token)
	}
	if granted && wait != nil {
		got, werr := wait.Int64()
		if werr != nil || got < int64(s.acks) {
			_, _ = s.releaseShared(context.WithoutCancel(ctx), d, t != nil)
			if werr != nil {
				return store.Grant{}, fmt.Errorf("redisstore: acquire: WAIT: %w", werr)
			}
			return store.Grant{}, fmt.Errorf("redisstore: acquire: %w: %d of %d replicas within %s", ErrNotReplicated, got, s.acks, s.ackWait)
		}
	}
	return store.Grant{Granted: granted, Ahead: ahead, Token: token}, nil
}

// releaseShared is Release for a demand with a weight or a parent: without
// a parent, as a plain release (or leaving the line) with the lease's
// members; with a parent, one EVALSHA of share.lua.
func (s *Store) releaseShared(ctx context.Context, d demand, dequeue bool) (bool, error) {
	w := d.Weight()
	var err error
	kept := false
	switch {
	case d.HasParent():
		keys, lines, channel := s.shareNames(d.Shared.Parent.Pool)
		leave := 0
		if dequeue {
			leave = 1
		}
		var res []int64
		res, err = s.call(ctx, shareScript, keys, "give", lines, channel, d.Pool.String(), d.Owner[:], w, leave,
			ms(d.Shared.Parent.Keep), max(d.Shared.Parent.Share, 1), d.Shared.Parent.Min, held(d.Held)).Int64Slice()
		kept = err == nil && len(res) == 2 && res[1] == 1
	case dequeue:
		// On the pool's lane, as the plain calls (see acquireShared).
		keys, channel := s.names(d.Pool)
		cmd := s.script(releaseScript, keys, d.Owner[:], 1, channel, w)
		if err = s.do(ctx, d.Pool, true, cmd); err == nil {
			err = cmd.Err()
		}
	default:
		keys, channel := s.names(d.Pool)
		zrem := redis.NewIntCmd(ctx, append([]any{"zrem", keys[0]}, members(d.Owner, w)...)...)
		waiting := redis.NewIntCmd(ctx, "exists", keys[1])
		if err = s.do(ctx, d.Pool, false, zrem, waiting); err == nil {
			err = errOf(zrem, waiting)
		}
		if err == nil && waiting.Val() == 1 {
			cmd := s.script(releaseScript, keys, d.Owner[:], 0, channel, w)
			if err = s.do(ctx, d.Pool, true, cmd); err == nil {
				err = cmd.Err()
			}
		}
	}
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("redisstore: release: %w", err)
	}
	return kept, nil
}
