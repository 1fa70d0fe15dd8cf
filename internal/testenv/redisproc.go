package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProcess is a redis-server of a test's own, on a loopback port, that
// the test can kill and start again to cause an outage.
type RedisProcess struct {
	t       testing.TB
	Addr    string
	dir     string
	cmd     *exec.Cmd
	persist bool // an append-only file, fsynced before each reply
}

// StartRedis starts a redis-server for t on a free loopback port and stops it
// when t ends. It needs the redis-server binary (scripts/test installs it).
func StartRedis(t testing.TB) *RedisProcess {
	t.Helper()
	return startRedis(t, false)
}

// StartRedisPersistent is StartRedis with persistence: an append-only file
// fsynced before each reply (appendfsync always), so that a write Redis
// answered survives a kill.
func StartRedisPersistent(t testing.TB) *RedisProcess {
	t.Helper()
	return startRedis(t, true)
}

func startRedis(t testing.TB, persist bool) *RedisProcess {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Missing(t, "redis-server binary: %v", err)
	}
	addr := FreeAddr(t)
	p := &RedisProcess{t: t, Addr: addr, dir: t.TempDir(), persist: persist}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// Start starts the server (again) on its address and waits until it answers.
func (p *RedisProcess) Start() {
	p.t.Helper()
	if err := p.Restart(); err != nil {
		p.t.Fatal(err)
	}
}

// Restart is Start for any goroutine: it returns what went wrong rather
// than failing the test.
func (p *RedisProcess) Restart() error {
	_, port, _ := net.SplitHostPort(p.Addr)
	aof := []string{"--appendonly", "no"}
	if p.persist {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	p.cmd = exec.Command("redis-server", append(append([]string{"--bind", "127.0.0.1", "--port", port,
		"--save", ""}, aof...), "--dir", p.dir, "--logfile", filepath.Join(p.dir, "redis.log"))...)
	p.cmd.SysProcAttr = ServerAttr()
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	if err := waitAnswer(p.Addr, 10*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
		return fmt.Errorf("redis-server on %s did not answer: %w\n%s", p.Addr, err, log)
	}
	return nil
}

// waitAnswer waits until the Redis node at addr answers a PING, for at
// most timeout, and returns the last error if it never does.
func waitAnswer(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash would, and waits for it
// to exit. Killing a stopped server does nothing.
func (p *RedisProcess) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// Options returns client options for the server that fail fast when it is
// down, so an outage shows within a request's time.
func (p *RedisProcess) Options() *redis.Options {
	return &redis.Options{
		Addr:                  p.Addr,
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              64,
	}
}

// String returns the server's address.
func (p *RedisProcess) String() string { return fmt.Sprintf("redis-server %s", p.Addr) }

// Hang freezes the server (SIGSTOP): it keeps its connections and accepts
// new ones in the kernel's backlog, but answers nothing — a hung Redis.
// Resume undoes it; the test's cleanup resumes it too.
func (p *RedisProcess) Hang() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		p.t.Cleanup(p.Resume)
	}
}

// Resume lets a hung server go on (SIGCONT).
func (p *RedisProcess) Resume() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Empty deletes every key and, with persistence, rewrites the append-only
// file, waiting (at most 10 s) for the rewrite to end: a restart after it
// replays nothing written before. A test that runs many workloads on one
// server calls it between them, or each restart replays all earlier ones
// (its load grew from 3 ms to 140 ms over 34 runs of the safety checker,
// and the calls answered LOADING meanwhile).
func (p *RedisProcess) Empty(ctx context.Context) error {
	c := redis.NewClient(p.Options())
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil || !p.persist {
		return err
	}
	if err := c.BgRewriteAOF(ctx).Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := c.InfoMap(ctx, "persistence").Result()
		if err != nil {
			return fmt.Errorf("waiting for the append-only file's rewrite: %w", err)
		}
		if s := info["Persistence"]; s["aof_rewrite_in_progress"] == "0" && s["aof_rewrite_scheduled"] == "0" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the append-only file's rewrite: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
