package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// idleClient opens a connection to addr from local, makes one request on it
// and leaves it open, idle: a keep-alive client between requests. It reads
// the response into buf, so that the client end costs little more than its
// socket.
func idleClient(addr string, local net.IP, header string, buf []byte) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /idle HTTP/1.1\r\nHost: gateway\r\n"+header+"\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
		if head, body, ok := bytes.Cut(buf[:n], []byte("\r\n\r\n")); ok {
			if i := bytes.Index(head, []byte("Content-Length: ")); i >= 0 {
				v, _, _ := bytes.Cut(head[i+16:], []byte("\r\n"))
				if l, _ := strconv.Atoi(string(v)); len(body) >= l {
					break
				}
			}
		}
		if err != nil || n == len(buf) {
			c.Close()
			return nil, fmt.Errorf("reading the response: %v (%q)", err, buf[:n])
		}
	}
	if !bytes.HasPrefix(buf, []byte("HTTP/1.1 200 ")) {
		c.Close()
		return nil, fmt.Errorf("response %q", buf[:n])
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

type memSample struct {
	heap       uint64 // HeapAlloc, after GCs
	stack      uint64 // StackInuse before a GC
	stackGC    uint64 // StackInuse after one
	goroutines int
}

// sampleMem samples the live heap and the stacks: the stacks before a GC,
// as an idle process holds them (it may not run one for minutes; the
// runtime keeps the stacks of goroutines that ended, for new ones, until
// it does), and after one (which frees those and shrinks the stacks of
// goroutines using less than a quarter of theirs). With gcFirst, a GC
// runs first.
func sampleMem(gcFirst bool) memSample {
	if gcFirst {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := memSample{stack: m.StackInuse, goroutines: runtime.NumGoroutine()}
	runtime.GC()
	runtime.ReadMemStats(&m)
	s.stackGC = m.StackInuse
	runtime.GC()
	runtime.ReadMemStats(&m)
	s.heap = m.HeapAlloc
	return s
}

// TestIdleConnectionMemory opens 2,000 keep-alive connections through the
// proxy listener (from 20 addresses, 100 each, under
// max_connections_per_ip), each after one proxied request, and measures
// what each costs the process while it waits idle for its next request:
// the live heap (after a GC) and the goroutine stacks (before the GC, which
// may shrink them: an idle process may not run one for minutes). The
// requests are made 8 at a time ("staggered"), or all at once, held at the
// upstream until all have arrived ("together"), as a crowd arriving does.
// The client ends are in this process too; a bare pair of sockets (client
// end and accepted end, no goroutine) is measured alike and reported, to
// subtract.
func TestIdleConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 connections")
	}
	if raceEnabled {
		t.Skip("the race detector changes what memory costs")
	}
	const addrs, per = 20, 100
	const n = addrs * per
	var ips []net.IP
	for i := range addrs {
		ips = append(ips, net.IPv4(127, 0, 0, byte(1+i)))
	}
	if ln, err := net.Listen("tcp", net.JoinHostPort(ips[addrs-1].String(), "0")); err != nil {
		t.Skipf("no address %s here: %v", ips[addrs-1], err)
	} else {
		ln.Close()
	}
	// The upstream holds a request whose X-Together header says how many
	// are to arrive, until they have (or 5 s have passed).
	var mu sync.Mutex
	var arrived int
	var gate chan struct{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want, _ := strconv.Atoi(r.Header.Get("X-Together")); want > 0 {
			mu.Lock()
			if arrived++; arrived%want == 1 {
				gate = make(chan struct{})
			}
			g := gate
			if arrived%want == 0 {
				close(g)
			}
			mu.Unlock()
			select {
			case <-g:
			case <-time.After(5 * time.Second):
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	file := filepath.Join(t.TempDir(), "keycap.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nlog: {level: error}\nupstream: %s\n", up.URL)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	ll := s.proxies[0]

	// open opens n idle connections to addr, workers at a time.
	open := func(addr string, workers int, header string) []net.Conn {
		t.Helper()
		conns := make([]net.Conn, n)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				buf := make([]byte, 4096)
				for i := range next {
					c, err := idleClient(addr, ips[i%addrs], header, buf)
					if err != nil {
						errs <- err
						continue
					}
					conns[i] = c
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return conns
	}
	closeAll := func(conns []net.Conn) {
		for _, c := range conns {
			c.Close()
		}
	}
	waitOpen := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ll.open.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("the listener counts %d connections, want %d", ll.open.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The bare pair: a listener that only accepts, answers the one
	// request and keeps the connection.
	bare, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	var accepted []net.Conn
	go func() {
		for {
			c, err := bare.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 512)
				_, _ = c.Read(buf)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	bareBefore := sampleMem(true)
	bareConns := open(bare.Addr().String(), 8, "")
	bareAfter := sampleMem(false)
	closeAll(bareConns)
	mu.Lock()
	closeAll(accepted)
	mu.Unlock()
	bareHeap := float64(int64(bareAfter.heap-bareBefore.heap)) / n

	var worst float64 // of the staggered connections, which the test bounds: a crowd's figures depend on when GCs run
	for _, mode := range []struct {
		name    string
		workers int
		header  string
	}{{"staggered", 8, ""}, {"together", n, fmt.Sprintf("X-Together: %d\r\n", n)}} {
		// A first round warms the pools up (and leaves the transport
		// its idle upstream connections).
		closeAll(open(ll.Addr().String(), mode.workers, mode.header))
		waitOpen(0)
		before := sampleMem(true)
		conns := open(ll.Addr().String(), mode.workers, mode.header)
		waitOpen(n)
		after := sampleMem(false)
		closeAll(conns)
		waitOpen(0)
		per := func(a, b uint64) float64 { return float64(int64(a-b)) / n }
		heap, stack, stackGC := per(after.heap, before.heap), per(after.stack, before.stack), per(after.stackGC, before.stack)
		t.Logf("%s: per idle connection: heap %.0f B, stacks %.0f B before a GC, %.0f B after (%.2f goroutines); total %.0f B before a GC, %.0f B after",
			mode.name, heap, stack, stackGC, float64(after.goroutines-before.goroutines)/n, heap+stack, heap+stackGC)
		if mode.name == "staggered" {
			worst = heap + stackGC
		}
	}
	t.Logf("a bare pair of sockets (both ends, in the heaps above too): %.0f B", bareHeap)
	// net/http's own: a 4 KiB bufio.Reader and Writer, its conn, contexts
	// and socket, about 10 KB, and the connection goroutine's stack, which
	// the proxy's handlers grow to 16 KiB and a GC halves to 8 KiB.
	if worst > 20<<10 {
		t.Errorf("an idle connection costs %.0f B after a GC, want under 20 KiB (net/http's own is about 18 KB)", worst)
	}
}
