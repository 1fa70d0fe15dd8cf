package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The scripts of a pool's line — acquire.lua, queue.lua and release.lua,
// each after line.lua — and a parent's (share.lua) are also the functions
// of one Redis Function library, and run as such (FCALL) on Redis 7 and
// later. A library is loaded once: a call runs its own body only, where
// EVALSHA runs the shared definitions again at every call (a plain grant
// costs Redis about a tenth less, a refusal a sixth, a parent's decision
// 6–12 %; BENCHMARKS.md). Before Redis 7, or where functions are refused
// (an ACL without FUNCTION), the store runs the same code as scripts
// (EVALSHA), from the first call that finds out. The library's name and
// its functions' carry a hash of their code, so that stores of two
// versions of keycap can share one Redis.
//
// The other scripts stay scripts (EVALSHA): the grants acknowledged by
// replicas (WithReplicaAcks, whose WAIT dwarfs the difference), the
// renewals of a batch (pipelined), and the rare ones.

// linePrologue sets line.lua's keys from the call's, first thing in a
// script or a function of the line.
const linePrologue = "slots, line, meta = KEYS[1], KEYS[2], KEYS[3]\n"

// sharePrologue sets share.lua's keys and common arguments, first thing in
// its script or function, and forgets what the last call read and kept
// (begin: the parent's virtual time, the fields read, the expiries asked
// for): a function library's locals outlive its calls, and a call would
// otherwise start from another call's — another parent's — state.
const sharePrologue = "leases, meta, waiting, fairq, minq, acct, idle = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]\n" +
	"op, lines, channel, kid, owner, w = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])\n" +
	"A = ARGV\n" +
	"begin()\n"

// shareDefs and shareCall are share.lua's definitions and its call;
// shareSource is share.lua as a script.
var (
	shareDefs, shareCall = splitShare()
	shareSource          = shareDefs + sharePrologue + shareCall
)

func splitShare() (defs, call string) {
	defs, call, ok := strings.Cut(shareLua, "\n-- The call.\n")
	if !ok {
		panic("redisstore: share.lua has no line \"-- The call.\"")
	}
	return defs + "\n", call
}

var (
	functionOf = map[*redis.Script]any{} // a script's function's name (boxed once, as a command's argument)
	scriptOf   = map[string]*redis.Script{}

	// libraryName names the library, whose code, for FUNCTION LOAD, is
	// library.
	libraryName, library = buildLibrary()

	fcallArg   any = "fcall"
	evalshaArg any = "evalsha"
)

func buildLibrary() (name, code string) {
	sum := sha1.Sum([]byte(linePrologue + lineLua + acquireLua + queueLua + releaseLua + sharePrologue + shareLua))
	name = "keycap_" + hex.EncodeToString(sum[:6])
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n", name)
	register := func(fn, prologue, body string, script *redis.Script) {
		fn = name + "_" + fn
		fmt.Fprintf(&b, "redis.register_function('%s', function(KEYS, ARGV)\n%s%s\nend)\n", fn, prologue, body)
		functionOf[script] = fn
		scriptOf[fn] = script
	}
	// Each part's definitions in a block of its own: their locals do not
	// meet.
	b.WriteString("do\n" + lineLua)
	register("acquire", linePrologue, acquireLua, acquireScript)
	register("queue", linePrologue, queueLua, queueScript)
	register("release", linePrologue, releaseLua, releaseScript)
	b.WriteString("end\ndo\n" + shareDefs)
	register("share", sharePrologue, shareCall, shareScript)
	b.WriteString("end\n")
	return name, b.String()
}

// call runs script on keys with args at once, outside the node's queue (a
// parent's calls), as its function where it has one and Redis runs
// functions, loading what Redis lacks and trying once more.
func (s *Store) call(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := s.script(script, keys, args...)
	_ = s.client.Process(ctx, cmd)
	if s.missing(cmd) {
		if err := s.loadScripts(ctx); err != nil {
			cmd.SetErr(fmt.Errorf("loading scripts: %w", err))
			return cmd
		}
		s.fit(cmd)
		cmd.SetErr(nil)
		_ = s.client.Process(ctx, cmd)
	}
	return cmd
}

// functions says how a store runs the scripts of a pool's line.
type functions struct {
	off atomic.Bool // once Redis refused FCALL or FUNCTION LOAD: scripts from then on
}

func (f *functions) on() bool { return !f.off.Load() }

func (f *functions) turnOff() { f.off.Store(true) }

// head returns the first two arguments of the command that runs script:
// FCALL and its function's name, or EVALSHA and its hash.
func (s *Store) head(script *redis.Script) (cmd, name any) {
	if fn, ok := functionOf[script]; ok && s.functions.on() {
		return fcallArg, fn
	}
	return evalshaArg, script.Hash()
}

// script returns the command that runs script on keys with args (as its
// function, where it has one and Redis runs functions), ready for a
// pipeline.
func (s *Store) script(script *redis.Script, keys []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	cmd, name := s.head(script)
	a = append(a, cmd, name, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	c := redis.NewCmd(context.Background(), a...)
	c.SetFirstKeyPos(3)
	return c
}

// missing reports whether cmd, a script's or a function's call, failed
// because Redis does not have it (a restart, a flush, a first call) or
// does not run functions (which it then turns off): the caller loads what
// is missing (loadScripts), makes cmd fit (fit) and sends it again.
func (s *Store) missing(cmd redis.Cmder) bool {
	err := cmd.Err()
	if err == nil {
		return false
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return true
	}
	if args := cmd.Args(); len(args) < 2 || args[0] != fcallArg {
		return false
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Function not found"):
		return true
	case strings.Contains(msg, "unknown command"), redis.HasErrorPrefix(err, "NOPERM"):
		s.functions.turnOff()
		return true
	}
	return false
}

// fit makes cmd, a function's call, its script's where functions are off.
func (s *Store) fit(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) >= 2 && args[0] == fcallArg && !s.functions.on() {
		name, _ := args[1].(string)
		args[0], args[1] = evalshaArg, scriptOf[name].Hash()
	}
}

// loadScripts loads every script, and the library where functions are on,
// on every node (go-redis's ClusterClient sends SCRIPT LOAD to each node;
// FUNCTION LOAD goes to each master, whose replicas follow). A library
// Redis refuses, for whatever reason, turns functions off: the same code
// runs as scripts.
func (s *Store) loadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{acquireScript, queueScript, releaseScript, renewScript, markScript, pauseScript, syncScript, shareScript, inspectScript, overridesScript, reportTotalScript, setTotalScript} {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return err
		}
	}
	if !s.functions.on() {
		return nil
	}
	load := func(ctx context.Context, c *redis.Client) error {
		err := c.FunctionLoad(ctx, library).Err()
		var re redis.Error
		switch {
		case err == nil || strings.Contains(err.Error(), "already exists"):
			return nil
		case errors.As(err, &re):
			// Redis refuses functions (before 7: an unknown command; an
			// ACL without FUNCTION) or this library: the calls that meet
			// it become scripts' (missing, fit).
			s.functions.turnOff()
			return nil
		}
		return err
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	case *redis.Client:
		return load(ctx, c)
	}
	s.functions.turnOff() // a client whose nodes cannot be reached one by one
	return nil
}
