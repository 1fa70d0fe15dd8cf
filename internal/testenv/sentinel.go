package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a Redis master, its replica and a Sentinel watching them, of
// a test's own on loopback ports (the master judged down after 300 ms),
// that the test may fail over once by killing the master, without
// disturbing the shared Sentinel other tests use. (A killed node is not
// started again: the Sentinel takes up to 10 s to see a returning node's
// new role, and start one for each failover instead.)
type Sentinel struct {
	t     testing.TB
	dir   string
	Name  string   // the master's name, as the Sentinel knows it
	Addrs []string // the two Redis nodes; the first starts as the master
	Addr  string   // the Sentinel's
	procs []*exec.Cmd
	watch *exec.Cmd
}

// StartSentinel starts the nodes and the Sentinel for t and stops them
// when t ends. It needs redis-server (scripts/test installs it).
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Missing(t, "redis-server binary: %v", err)
	}
	s := &Sentinel{t: t, dir: t.TempDir(), Name: "keycap-own"}
	for range 3 {
		s.Addrs = append(s.Addrs, FreeAddr(t))
	}
	s.Addr, s.Addrs = s.Addrs[2], s.Addrs[:2]
	s.procs = make([]*exec.Cmd, 2)
	t.Cleanup(s.stop)
	s.start(0, "")
	s.start(1, s.Addrs[0])

	_, sport, _ := net.SplitHostPort(s.Addr)
	mhost, mport, _ := net.SplitHostPort(s.Addrs[0])
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %[4]s 300\n"+
		"sentinel failover-timeout %[4]s 2000\nsentinel parallel-syncs %[4]s 1\n",
		sport, s.dir, filepath.Join(s.dir, "sentinel.log"), s.Name, mhost, mport)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	s.watch = exec.Command("redis-server", conf, "--sentinel")
	s.watch.SysProcAttr = ServerAttr()
	if err := s.watch.Start(); err != nil {
		t.Fatalf("starting the sentinel: %v", err)
	}
	if err := s.WaitReplica(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

// start starts node i, a replica of master unless master is "", and waits
// until it answers.
func (s *Sentinel) start(i int, master string) {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addrs[i])
	dir := filepath.Join(s.dir, port)
	_ = os.MkdirAll(dir, 0o755)
	args := []string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}
	if master != "" {
		host, mport, _ := net.SplitHostPort(master)
		args = append(args, "--replicaof", host, mport)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.SysProcAttr = ServerAttr()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.procs[i] = cmd
	if err := waitAnswer(s.Addrs[i], 10*time.Second); err != nil {
		s.t.Fatalf("redis-server %s did not answer: %v", s.Addrs[i], err)
	}
}

// Kill stops node i at once (SIGKILL), as a crash would.
func (s *Sentinel) Kill(i int) {
	if p := s.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Kill()
		_ = p.Wait()
		s.procs[i] = nil
	}
}

func (s *Sentinel) stop() {
	for i := range s.procs {
		s.Kill(i)
	}
	if s.watch != nil && s.watch.Process != nil {
		_ = s.watch.Process.Kill()
		_ = s.watch.Wait()
	}
}

// Master returns the index of the node the Sentinel names master.
func (s *Sentinel) Master() (int, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	addr, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
	if err != nil {
		return 0, err
	}
	a := net.JoinHostPort(addr[0], addr[1])
	for i, n := range s.Addrs {
		if n == a {
			return i, nil
		}
	}
	return 0, fmt.Errorf("the sentinel names %s master, not one of %v", a, s.Addrs)
}

// WaitReplica waits until the master the Sentinel names answers as one and
// the Sentinel sees a replica of it in sync: a failover can then happen.
func (s *Sentinel) WaitReplica(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := s.replicaReady()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel %s: no replica ready after %s: %v", s.Addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Sentinel) replicaReady() error {
	m, err := s.Master()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cl := redis.NewClient(&redis.Options{Addr: s.Addrs[m], MaxRetries: -1})
	defer cl.Close()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:1") {
		return fmt.Errorf("master %s: %q", s.Addrs[m], info)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer sc.Close()
	reps, err := sc.Replicas(ctx, s.Name).Result()
	if err != nil {
		return err
	}
	for _, r := range reps {
		if r["master-link-status"] == "ok" && !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") {
			return nil
		}
	}
	return fmt.Errorf("the sentinel sees no replica in sync: %v", reps)
}

// WaitFailover waits until the Sentinel names a master other than old and
// that node answers as one.
func (s *Sentinel) WaitFailover(old int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := s.Master()
		if err == nil && m != old {
			cl := redis.NewClient(&redis.Options{Addr: s.Addrs[m], MaxRetries: -1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err2 := cl.Info(ctx, "replication").Result()
			cancel()
			cl.Close()
			if err2 == nil && strings.Contains(info, "role:master") {
				return nil
			}
			err = err2
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinel %s: no failover from %s after %s (%v)", s.Addr, s.Addrs[old], timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a client of the master, through the Sentinel, that fails
// fast while there is none, so a failover shows within a request's time.
func (s *Sentinel) Client() *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.Name,
		SentinelAddrs:         []string{s.Addr},
		DialTimeout:           300 * time.Millisecond,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		PoolSize:              64,
	})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}
