package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of a test's own — 3 masters and 3 replicas on
// loopback ports, node timeout 1 s, the masters serving their slots while
// another's are uncovered (cluster-require-full-coverage no) — that the test
// may break (kill a master, make it hang) without disturbing the shared
// cluster other tests use.
type Cluster struct {
	t        testing.TB
	dir      string
	Addrs    []string // every node, masters first as created
	busPorts []string // each node's cluster bus
	procs    []*exec.Cmd
}

// StartCluster starts a cluster for t and stops it when t ends. It needs
// redis-server and redis-cli (scripts/test installs them).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			Missing(t, "%s binary: %v", bin, err)
		}
	}
	c := &Cluster{t: t, dir: t.TempDir()}
	// Each node's cluster bus gets a free port of its own too: the default,
	// the node's port + 10000, can be taken or, for a port above 55535, not
	// exist.
	for i := range 12 {
		addr := FreeAddr(t)
		if i < 6 {
			c.Addrs = append(c.Addrs, addr)
		} else {
			_, port, _ := net.SplitHostPort(addr)
			c.busPorts = append(c.busPorts, port)
		}
	}
	c.procs = make([]*exec.Cmd, len(c.Addrs))
	t.Cleanup(c.stop)
	for i := range c.Addrs {
		c.Start(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Every replica in sync with its master, so that any master can fail
	// over.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range c.Addrs {
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		for {
			info, _ := cl.Info(ctx, "replication").Result()
			if strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				cl.Close()
				t.Fatalf("replica %s never synced with its master", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cl.Close()
	}
	return c
}

// Start starts node i (again), as a cluster node on its address, and waits
// until it answers.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	_, port, _ := net.SplitHostPort(c.Addrs[i])
	dir := filepath.Join(c.dir, port)
	_ = os.MkdirAll(dir, 0o755)
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--cluster-port", c.busPorts[i],
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
		"--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = ServerAttr()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting redis-server: %v", err)
	}
	c.procs[i] = cmd
	if err := waitAnswer(c.Addrs[i], 10*time.Second); err != nil {
		c.t.Fatalf("cluster node %s did not answer: %v", c.Addrs[i], err)
	}
}

// Kill stops node i at once (SIGKILL), as a crash would.
func (c *Cluster) Kill(i int) {
	if p := c.procs[i]; p != nil && p.Process != nil {
		_ = p.Process.Kill()
		_ = p.Wait()
		c.procs[i] = nil
	}
}

func (c *Cluster) stop() {
	for i := range c.procs {
		c.Kill(i)
	}
}

// Client returns a cluster client of the cluster, closed when the test ends;
// opts may adjust its options.
func (c *Cluster) Client(opts func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true, PoolSize: 32}
	if opts != nil {
		opts(o)
	}
	cl := redis.NewClusterClient(o)
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// MasterOf returns the index of the node that is master of key's slot now.
func (c *Cluster) MasterOf(key string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, a := range c.Addrs {
		if c.procs[i] == nil {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			cl.Close()
			continue
		}
		//lint:ignore SA1019 the same call as redisstore's, which supports Redis 6.2
		slots, err := cl.ClusterSlots(ctx).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				for j, b := range c.Addrs {
					if b == s.Nodes[0].Addr {
						return j, nil
					}
				}
			}
		}
	}
	return 0, fmt.Errorf("no node knows the master of %q", key)
}

// WaitOK waits until every live node reports cluster_state:ok and all 16384
// slots served.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c.ok() {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("cluster not ok after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) ok() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for i, a := range c.Addrs {
		if c.procs[i] == nil {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		cl.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:"+strconv.Itoa(16384)) {
			return false
		}
	}
	return true
}
