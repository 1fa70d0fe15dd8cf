// Command gwattack measures how a keycap gateway binary holds up against the
// attacks of issue 11, on loopback: idle keep-alive connections, trickled
// request bodies, and WebSocket clients sending 1 MiB frames while a victim
// makes ordinary requests. Give it several binaries (an older build and the
// current one) to compare them in one run.
//
//	go build -o /tmp/keycap-new ./cmd/keycap
//	go run ./cmd/keycap/internal/gwattack /tmp/keycap-old /tmp/keycap-new
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

var (
	idleConns = flag.Int("idle", 3000, "idle keep-alive connections")
	idleWait  = flag.Duration("idle-wait", 40*time.Second, "how long after opening them to count the idle connections")
	trickle   = flag.Int("trickle", 50, "clients trickling a request body")
	trickleW  = flag.Duration("trickle-wait", 25*time.Second, "how long to trickle")
	wsConns   = flag.Int("ws", 100, "WebSocket clients sending 1 MiB frames")
	wsFor     = flag.Duration("ws-for", 10*time.Second, "how long they send")
)

func main() {
	flag.Parse()
	fmt.Printf("| binary | idle connections still open after %s (of %d) | RSS with them | trickling bodies still open after %s (of %d) | 1 MiB-frame flood (%d clients, %s): peak RSS | victim p50 / p99 during the flood |\n",
		*idleWait, *idleConns, *trickleW, *trickle, *wsConns, *wsFor)
	fmt.Println("|---|---|---|---|---|---|")
	for _, bin := range flag.Args() {
		if err := run(bin); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", bin, err)
			os.Exit(1)
		}
	}
}

type gateway struct {
	cmd   *exec.Cmd
	proxy string
}

func start(bin string) (*gateway, error) {
	dir, err := os.MkdirTemp("", "gwattack")
	if err != nil {
		return nil, err
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	demo := ln.Addr().String()
	ln.Close()
	// The HTTP upstream reads every request body, as an application does.
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		_ = http.Serve(up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok\n")
		}))
	}()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
upstream: http://%s
demo_upstream: %s
log: {level: info}
routes:
  - {name: report, path: /report, limits: [{max: 1000, key: "header:X-User"}]}
pusher:
  upstream: http://%s
  default_cap: 1000
  apps: [{id: "1", key: app-key, secret: app-secret}]
`, up.Addr(), demo, demo)
	file := filepath.Join(dir, "keycap.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-config", file)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gateway{cmd: cmd}
	sc := bufio.NewScanner(stderr)
	deadline := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for g.proxy == "" && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "keycap: listening" && m["kind"] == "proxy" {
			g.proxy = m["addr"].(string)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	if g.proxy == "" {
		return nil, fmt.Errorf("the gateway did not start")
	}
	return g, nil
}

func (g *gateway) stop() {
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
}

// rss returns the process's resident set size in MiB.
func (g *gateway) rss() float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// open counts the connections the server has not closed: a connection
// whose reads end in a time-out, not in EOF, is still open (what it had to
// say, a 408, say, is read first).
func open(conns []net.Conn) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			buf := make([]byte, 4096)
			for {
				_, err := c.Read(buf)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					n.Add(1)
					return
				}
				if err != nil {
					return // closed
				}
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

func run(bin string) error {
	g, err := start(bin)
	if err != nil {
		return err
	}
	defer g.stop()

	// Idle keep-alive connections, each after one request.
	var idle []net.Conn
	for range *idleConns {
		c, err := net.Dial("tcp", g.proxy)
		if err != nil {
			break
		}
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		idle = append(idle, c)
	}
	time.Sleep(2 * time.Second)
	idleRSS := g.rss()
	time.Sleep(*idleWait - 2*time.Second)
	idleOpen := open(idle)
	for _, c := range idle {
		c.Close()
	}

	// Trickled bodies: one byte every second.
	var trickled []net.Conn
	for range *trickle {
		c, err := net.Dial("tcp", g.proxy)
		if err != nil {
			break
		}
		_, _ = io.WriteString(c, "POST /report HTTP/1.1\r\nHost: x\r\nX-User: t\r\nContent-Length: 1000000\r\n\r\n")
		trickled = append(trickled, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *trickleW)
	for ctx.Err() == nil {
		for _, c := range trickled {
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = c.Write([]byte("x"))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	cancel()
	trickleOpen := open(trickled)
	for _, c := range trickled {
		c.Close()
	}

	// The flood, and a victim.
	frame := make([]byte, 1<<20)
	for i := range frame {
		frame[i] = 'x'
	}
	ctx, cancel = context.WithTimeout(context.Background(), *wsFor)
	defer cancel()
	var wg sync.WaitGroup
	for range *wsConns {
		wg.Go(func() {
			for ctx.Err() == nil {
				ws, _, err := websocket.Dial(ctx, "ws://"+g.proxy+"/app/app-key", nil)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				ws.SetReadLimit(1 << 22)
				go func() {
					for {
						if _, _, err := ws.Read(ctx); err != nil {
							return
						}
					}
				}()
				for ctx.Err() == nil {
					if ws.Write(ctx, websocket.MessageText, frame) != nil {
						break
					}
				}
				_ = ws.CloseNow()
				time.Sleep(100 * time.Millisecond) // then connect again
			}
		})
	}
	var peak float64
	var lat []time.Duration
	hc := &http.Client{Timeout: 30 * time.Second}
	for ctx.Err() == nil {
		peak = max(peak, g.rss())
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.proxy+"/", nil)
		t0 := time.Now()
		if resp, err := hc.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat = append(lat, time.Since(t0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	slices.Sort(lat)
	p := func(q float64) string {
		if len(lat) == 0 {
			return "—"
		}
		return lat[int(q*float64(len(lat)-1))].Round(100 * time.Microsecond).String()
	}
	fmt.Printf("| %s | %d | %.0f MiB | %d | %.0f MiB | %s / %s |\n", filepath.Base(bin), idleOpen, idleRSS, trickleOpen, peak, p(0.5), p(0.99))
	return nil
}
