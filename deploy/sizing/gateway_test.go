package sizing_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keycap/keycap/deploy/build"
)

// keycapBinary builds the gateway of this checkout's working tree for the
// host, as a release builds it, and returns its path.
func keycapBinary(b *testing.B) string {
	b.Helper()
	root, err := build.Repo()
	if err != nil {
		b.Fatal(err)
	}
	stamp, err := build.GitStamp(root)
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "keycap")
	if err := build.Keycap(root, runtime.GOOS, runtime.GOARCH, stamp, bin); err != nil {
		b.Fatal(err)
	}
	b.Logf("gateway: %s (%s)", stamp.Version, stamp.Revision)
	return bin
}

// gateway is a keycap gateway process.
type gateway struct {
	cmd    *exec.Cmd
	pid    int
	proxy  string // host:port
	admin  string // host:port
	exited chan struct{}

	mu   sync.Mutex
	tail []string // the last lines of its log, for a failure's message
}

// startGateway writes config to a file and runs the gateway on it; it
// returns once the gateway listens and /readyz answers 200. The process is
// killed when b ends.
func startGateway(b *testing.B, bin, config string) *gateway {
	b.Helper()
	file := filepath.Join(b.TempDir(), "keycap.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		b.Fatal(err)
	}
	g := &gateway{exited: make(chan struct{})}
	g.cmd = exec.Command(bin, "serve", "-config", file)
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	g.pid = g.cmd.Process.Pid
	b.Cleanup(func() {
		_ = g.cmd.Process.Signal(syscall.SIGKILL)
		<-g.exited
	})
	listening := make(chan map[string]any, 4)
	go func() {
		defer func() {
			_ = g.cmd.Wait() // after stderr is read to its end
			close(g.exited)
		}()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.tail = append(g.tail, line)
			if len(g.tail) > 20 {
				g.tail = g.tail[1:]
			}
			g.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "keycap: listening" {
				select {
				case listening <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for g.proxy == "" || g.admin == "" {
		select {
		case m := <-listening:
			addr, _ := m["addr"].(string)
			switch m["kind"] {
			case "proxy":
				g.proxy = addr
			case "admin":
				g.admin = addr
			}
		case <-g.exited:
			b.Fatalf("the gateway exited at start:\n%s", g.logTail())
		case <-timeout.C:
			b.Fatalf("the gateway did not listen within 30 s:\n%s", g.logTail())
		}
	}
	g.waitReady(b)
	return g
}

// waitReady polls the gateway's /readyz until it answers 200, for at most
// 10 s.
func (g *gateway) waitReady(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get("http://" + g.admin + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the gateway's /readyz did not answer 200 within 10 s (%v):\n%s", err, g.logTail())
		}
		select {
		case <-tick.C:
		case <-g.exited:
			b.Fatalf("the gateway exited:\n%s", g.logTail())
		}
	}
}

func (g *gateway) logTail() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.tail, "\n")
}

// alive fails b if the gateway has exited.
func (g *gateway) alive(b *testing.B) {
	b.Helper()
	select {
	case <-g.exited:
		b.Fatalf("the gateway exited:\n%s", g.logTail())
	default:
	}
}

// procStat is what /proc tells of a process.
type procStat struct {
	cpu time.Duration // user and system time, every thread's
	sys time.Duration // of which system time
	rss int64         // bytes resident now (VmRSS)
	hwm int64         // the most bytes ever resident (VmHWM)
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every architecture Go supports.
const clockTick = 10 * time.Millisecond

// readProc reads pid's CPU time from /proc/PID/stat and its resident memory
// from /proc/PID/status.
func readProc(pid int) (procStat, error) {
	var s procStat
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	_, rest, ok := bytes.Cut(stat, []byte(") ")) // after the command's name
	f := strings.Fields(string(rest))
	if !ok || len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("/proc/%d/stat: %q", pid, stat)
	}
	s.cpu = time.Duration(utime+stime) * clockTick
	s.sys = time.Duration(stime) * clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(status)) {
		name, value, _ := strings.Cut(line, ":")
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &s.rss
		case "VmHWM":
			dst = &s.hwm
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/%d/status: %s: %v", pid, name, err)
		}
		*dst = kb << 10
	}
	if s.rss == 0 {
		return s, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return s, nil
}

// machineStat is what /proc/stat tells of the whole machine: its CPU time
// busy (every core's user, nice, system, irq and softirq time) and stolen by
// the hypervisor.
type machineStat struct{ busy, steal time.Duration }

func readMachine() (machineStat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineStat{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineStat{}, fmt.Errorf("/proc/stat: %q", line)
	}
	var v [8]int64
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return machineStat{}, fmt.Errorf("/proc/stat: %q", line)
		}
	}
	// user nice system idle iowait irq softirq steal
	return machineStat{
		busy:  time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * clockTick,
		steal: time.Duration(v[7]) * clockTick,
	}, nil
}

func mustMachine(b *testing.B) machineStat {
	b.Helper()
	s, err := readMachine()
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// waitQuiet waits, for at most wait, until the machine's busy CPU other than
// the processes named has been under 0.3 cores for 1 s (another program's
// build or tests would take the cores the measurement needs), polling
// /proc every 250 ms; it logs how long it waited, or that the machine
// stayed busy.
func waitQuiet(b *testing.B, wait time.Duration, pids ...int) {
	b.Helper()
	const quietFor, limit = time.Second, 0.3
	ours := func() time.Duration {
		var d time.Duration
		for _, pid := range pids {
			if s, err := readProc(pid); err == nil {
				d += s.cpu
			}
		}
		return d
	}
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	type point struct {
		at         time.Time
		busy, ours time.Duration
	}
	var window []point
	for {
		m := mustMachine(b)
		now := point{time.Now(), m.busy, ours()}
		window = append(window, now)
		for len(window) > 1 && now.at.Sub(window[1].at) >= quietFor {
			window = window[1:]
		}
		if first := window[0]; now.at.Sub(first.at) >= quietFor {
			other := ((now.busy - first.busy) - (now.ours - first.ours)).Seconds() / now.at.Sub(first.at).Seconds()
			if other < limit {
				if waited := time.Since(start); waited > 2*quietFor {
					b.Logf("quiet:    waited %v for the rest of the machine to go under %.1f cores", waited.Round(100*time.Millisecond), limit)
				}
				return
			}
			if time.Since(start) >= wait {
				b.Logf("quiet:    the rest of the machine stayed busy (%.2f cores) for %v: measuring anyway", other, wait)
				return
			}
		}
		<-tick.C
	}
}

func mustProc(b *testing.B, pid int) procStat {
	b.Helper()
	s, err := readProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// metrics scrapes the gateway's /metrics and returns each family's value,
// summed over its labels, for the families named.
func (g *gateway) metrics(b *testing.B, names ...string) map[string]float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.admin+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("scraping the gateway: %v", err)
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line+" ", "{ ")]
		if !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	if err := sc.Err(); err != nil {
		b.Fatalf("scraping the gateway: %v", err)
	}
	return out
}

// idleSample is the gateway over a window with nothing to do.
type idleSample struct {
	n          int           // connections open
	prev       int           // connections open before the last were opened
	opened     time.Duration // how long opening them took
	window     time.Duration // how long it was watched
	cores      float64       // CPU time over the window, per second
	rss, hwm   int64         // at the window's end
	heap       float64       // go_memstats_heap_inuse_bytes, after the window
	stack      float64       // go_memstats_stack_inuse_bytes
	goroutines float64       // go_goroutines
	conns      float64       // keycap_gateway_connections (every listener)
	slots      float64       // keycap_slots_in_use (every family)
	fds        int           // file descriptors open, from /proc/PID/fd
	other      float64       // the rest of the machine's busy CPU over the window, per second
}

// idle watches the gateway for d, which holds n connections, and reads its
// CPU use over the window and its memory at the window's end (then its Go
// runtime's figures from /metrics, after the CPU is read: the scrape's own
// work is not counted).
func (g *gateway) idle(b *testing.B, n int, d time.Duration) idleSample {
	b.Helper()
	before, m0 := mustProc(b, g.pid), mustMachine(b)
	start := time.Now()
	window := time.NewTimer(d) // a measuring window, not a synchronisation
	defer window.Stop()
	select {
	case <-window.C:
	case <-g.exited:
		b.Fatalf("the gateway exited:\n%s", g.logTail())
	}
	after, m1 := mustProc(b, g.pid), mustMachine(b)
	wall := time.Since(start)
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.pid))
	if err != nil {
		b.Fatal(err)
	}
	m := g.metrics(b, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines",
		"keycap_gateway_connections", "keycap_slots_in_use")
	return idleSample{
		n: n, window: wall,
		cores: (after.cpu - before.cpu).Seconds() / wall.Seconds(),
		rss:   after.rss, hwm: after.hwm,
		heap: m["go_memstats_heap_inuse_bytes"], stack: m["go_memstats_stack_inuse_bytes"],
		goroutines: m["go_goroutines"], conns: m["keycap_gateway_connections"], slots: m["keycap_slots_in_use"],
		fds:   len(fds),
		other: ((m1.busy - m0.busy) - (after.cpu - before.cpu)).Seconds() / wall.Seconds(),
	}
}

func (s idleSample) String() string {
	return fmt.Sprintf("n=%-6d RSS %7.1f MiB  HWM %7.1f MiB  heap %7.1f MiB  stacks %6.1f MiB  goroutines %6.0f  fds %6d  conns %6.0f  slots %6.0f  idle CPU %6.1f mcores over %.1fs (the rest of the machine: %.2f cores)",
		s.n, mib(s.rss), mib(s.hwm), s.heap/(1<<20), s.stack/(1<<20), s.goroutines, s.fds, s.conns, s.slots, 1000*s.cores, s.window.Seconds(), s.other)
}

func mib[T int64 | float64](v T) float64 { return float64(v) / (1 << 20) }
