package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuTime is the CPU time (user and system) a process has used, from
// Linux's /proc/PID/stat, in clock ticks of 10 ms; ok is false elsewhere.
func cpuTime(pid int) (d time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	_, rest, _ := bytes.Cut(b, []byte(") ")) // after the command's name
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, err1 == nil && err2 == nil
}

// floodResult is testdata/wsflood's result line.
type floodResult struct {
	RefusedAfter []time.Duration
	SmallFrames  int64
	Failures     []string
}

// TestWebSocketFloodLeavesOthersServed: 100 WebSockets from one address,
// half sending 1 MiB frames (over max_message: refused with 1009, and the
// flooder reconnects at once), half sending 60 KB frames as fast as they
// can (under it: read at messages_per_second), do not slow a plain request
// from another address past a bound, and each refused connection is closed
// by the gateway promptly — it reads no more of it, rather than reading and
// discarding for the 5 s of a close handshake. The flood and the upstream
// run in a process of their own (testdata/wsflood), without the race
// detector, so that this process measures the victim's requests.
func TestWebSocketFloodLeavesOthersServed(t *testing.T) {
	if testing.Short() {
		t.Skip("a 5 s flood")
	}
	// Not parallel: it measures latency, on a machine of 2 cores.
	bin := filepath.Join(t.TempDir(), "wsflood")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/wsflood").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/wsflood: %v\n%s", err, out)
	}
	helper := exec.Command(bin, "-big", "50", "-small", "50", "-for", "5s", "-from", "127.0.0.2")
	helper.Stderr = os.Stderr
	stdin, _ := helper.StdinPipe()
	stdout, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(prefix string, d time.Duration) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, prefix) {
				t.Fatalf("wsflood: %q, want a line %q", l, prefix)
			}
			return strings.TrimPrefix(l, prefix)
		case <-time.After(d):
			t.Fatalf("wsflood printed no %q within %s", prefix, d)
		}
		return ""
	}
	upURL := next("upstream ", 30*time.Second)
	g := startGateway(t, fmt.Sprintf(`log: {level: info}
upstream: %s
pusher: {apps: [{id: "1", key: app-key, secret: app-secret}]}
`, upURL))
	addr := strings.TrimPrefix(g.proxy, "http://")
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	if c, err := d.Dial("tcp", addr); err != nil {
		t.Skipf("cannot connect from 127.0.0.2: %v", err)
	} else {
		c.Close()
	}

	cpuBefore, cpuOK := cpuTime(g.cmd.Process.Pid)
	fmt.Fprintf(stdin, "flood %s\n", addr)
	next("flooding", 30*time.Second)
	// The victim, from 127.0.0.1, a new connection each time, until the
	// flood ends.
	victim := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var took []time.Duration
	var result string
	for result == "" {
		start := time.Now()
		resp, err := victim.Get(g.proxy + "/hello")
		if err != nil {
			t.Fatalf("the victim's request failed during the flood: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the victim's request: %d", resp.StatusCode)
		}
		took = append(took, time.Since(start))
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, "result ") {
				t.Fatalf("wsflood: %q, want its result", l)
			}
			result = strings.TrimPrefix(l, "result ")
		case <-time.After(100 * time.Millisecond): // the victim's pace
		case <-time.After(30 * time.Second):
		}
	}
	cpuAfter, _ := cpuTime(g.cmd.Process.Pid)
	var res floodResult
	if err := json.Unmarshal([]byte(result), &res); err != nil {
		t.Fatal(err)
	}

	slices.Sort(took)
	slices.Sort(res.RefusedAfter)
	worst := took[len(took)-1]
	t.Logf("victim: %d requests, median %s, max %s", len(took), took[len(took)/2], worst)
	if n := len(res.RefusedAfter); n > 0 {
		t.Logf("refused connections: %d, closed after median %s, p99 %s, max %s", n,
			res.RefusedAfter[n/2], res.RefusedAfter[n*99/100], res.RefusedAfter[n-1])
	}
	t.Logf("60 KB frames written: %d; failed dials: %v", res.SmallFrames, res.Failures)
	if cpuOK {
		t.Logf("the gateway's CPU during the flood: %s", cpuAfter-cpuBefore)
	}
	if len(took) < 3 {
		t.Errorf("the victim made %d requests during the flood, want at least 3", len(took))
	}
	if worst > 500*time.Millisecond {
		t.Errorf("a victim's request took %s during the flood, want under 500ms", worst)
	}
	if len(res.RefusedAfter) == 0 {
		t.Fatal("no connection was refused for its 1 MiB frames")
	}
	if last := res.RefusedAfter[len(res.RefusedAfter)-1]; last > 2*time.Second {
		t.Errorf("a connection refused for its 1 MiB frames was closed %s after its first frame, want under 2s", last)
	}
}
