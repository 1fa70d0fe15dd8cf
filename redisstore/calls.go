package redisstore

import (
	"context"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

// The hot calls (an acquire, a release) build their commands in one
// allocation each: the pool's names in one string, the arguments in the
// call's own fields, boxed as pointers (which go-redis writes as their
// values), so a pair costs a few allocations of keycap's beside go-redis's.

// poolNames are a pool's keys, channel and an owner token, slices of one
// string: of buf when they fit (a prefix of up to 29 bytes), which is
// written once, before the string is made, and never again.
type poolNames struct {
	keys    [3]string // slots, line, meta: as names
	channel string
	owner   string
	buf     [320]byte
}

const hexDigits = "0123456789abcdef"

// fill sets n to pool's names and owner, built in one string.
func (n *poolNames) fill(prefix string, pool store.PoolID, owner store.Owner) {
	var h [32]byte
	for i, c := range pool {
		h[2*i], h[2*i+1] = hexDigits[c>>4], hexDigits[c&15]
	}
	parts := [4]string{"slots:{", "line:{", "lmeta:{", "wake:{"}
	b := n.buf[:0]
	if size := 4*(len(prefix)+len("keycap:")+len("}")+len(h)) + len("slots:{line:{lmeta:{wake:{") + len(owner); size > len(n.buf) {
		b = make([]byte, 0, size)
	}
	var ends [4]int
	for i, part := range parts {
		b = append(b, prefix...)
		b = append(b, "keycap:"...)
		b = append(b, part...)
		b = append(b, h[:]...)
		b = append(b, '}')
		ends[i] = len(b)
	}
	b = append(b, owner[:]...)
	s := unsafe.String(&b[0], len(b)) // b is never written again
	n.keys[0], n.keys[1], n.keys[2] = s[:ends[0]], s[ends[0]:ends[1]], s[ends[1]:ends[2]]
	n.channel, n.owner = s[ends[2]:ends[3]], s[ends[3]:]
}

// acquireCall is one Acquire's op and command.
type acquireCall struct {
	op
	n    poolNames
	max  int
	ttl  int64
	args [10]any
	cmd  redis.Cmd
	arr  [1]redis.Cmder
}

func (s *Store) newAcquire(pool store.PoolID, owner store.Owner, max int, ttl time.Duration) *acquireCall {
	c := &acquireCall{max: max, ttl: ms(ttl)}
	c.n.fill(s.prefix, pool, owner)
	cmd, name := s.head(acquireScript)
	c.args = [10]any{cmd, name, 3, &c.n.keys[0], &c.n.keys[1], &c.n.keys[2], &c.n.owner, &c.max, &c.ttl, &c.n.channel}
	c.cmd = *redis.NewCmd(context.Background(), c.args[:]...) // a fresh command, copied in place
	c.cmd.SetFirstKeyPos(3)
	c.arr[0] = &c.cmd
	c.op.cmds, c.op.script = c.arr[:], true
	return c
}

// releaseCall is one Release's op and commands: a ZREM of the lease and an
// EXISTS of the line.
type releaseCall struct {
	op
	n       poolNames
	zremA   [3]any
	existsA [2]any
	zrem    redis.IntCmd
	waiting redis.IntCmd
	arr     [2]redis.Cmder
}

func (s *Store) newRelease(pool store.PoolID, owner store.Owner) *releaseCall {
	c := &releaseCall{}
	c.n.fill(s.prefix, pool, owner)
	c.zremA = [3]any{"zrem", &c.n.keys[0], &c.n.owner}
	c.existsA = [2]any{"exists", &c.n.keys[1]}
	c.zrem = *redis.NewIntCmd(context.Background(), c.zremA[:]...) // fresh commands, copied in place
	c.waiting = *redis.NewIntCmd(context.Background(), c.existsA[:]...)
	c.arr = [2]redis.Cmder{&c.zrem, &c.waiting}
	c.op.cmds = c.arr[:]
	return c
}

// handOn returns the command that hands the slot c freed to its pool's line
// (release.lua), run only when someone waits.
func (c *releaseCall) handOn(s *Store) *redis.Cmd {
	return s.script(releaseScript, c.n.keys[:], c.n.owner, 0, c.n.channel)
}
