package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// unused returns how many connections ip holds, and how many of them a
// newcomer may close.
func (l *limitListener) unused(ip netip.Addr) (held, unused int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.byIP[ip]
	if a == nil {
		return 0, 0
	}
	for c := a.head; c != nil; c = c.next {
		unused++
	}
	return a.n, unused
}

// fairGateway starts a gateway whose addresses may hold 8 connections,
// before an upstream that holds /hold requests until release is closed.
func fairGateway(t *testing.T) (s *Server, ll *limitListener, held chan struct{}, release chan struct{}) {
	t.Helper()
	held, release = make(chan struct{}, 100), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	file := filepath.Join(t.TempDir(), "keycap.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nlog: {level: error}\nupstream: %s\nserver: {max_connections_per_ip: 8}\n", up.URL)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Start(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s, s.proxies[0], held, release
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clientFrom is an HTTP client whose connections come from ip, a new one
// for each request.
func clientFrom(ip netip.Addr) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}}
}

func canUse(t *testing.T, ip netip.Addr) {
	t.Helper()
	if ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()); err != nil {
		t.Skipf("no address %s here: %v", ip, err)
	} else {
		ln.Close()
	}
}

// TestPerAddressBoundIsFair: a client holding its address's
// max_connections_per_ip of idle keep-alive connections, or of connections
// that never send a request, cannot stop another client behind the same
// address from being served: each newcomer closes the address's
// longest-unused connection instead of being refused.
func TestPerAddressBoundIsFair(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ip   netip.Addr
		hold func(addr string, from netip.Addr) (net.Conn, error)
	}{
		{"idle keep-alive connections", netip.MustParseAddr("127.0.0.11"), func(addr string, from netip.Addr) (net.Conn, error) {
			return idleClient(addr, from.AsSlice(), "", make([]byte, 4096))
		}},
		{"connections that never send a request", netip.MustParseAddr("127.0.0.12"), func(addr string, from netip.Addr) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
			return d.Dial("tcp", addr)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			canUse(t, tc.ip)
			_, ll, _, _ := fairGateway(t)
			addr := ll.Addr().String()
			// One at a time, each counted unused before the next is
			// dialled: the server marks a connection idle after the client
			// has read its response, so without the wait a later
			// connection could become idle first and be the one to go.
			var held []net.Conn
			for i := range 8 {
				c, err := tc.hold(addr, tc.ip)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				held = append(held, c)
				waitFor(t, fmt.Sprintf("the attacker's connection %d to be counted, unused", i+1), func() bool {
					n, unused := ll.unused(tc.ip)
					return n == i+1 && unused == i+1
				})
			}
			victim := clientFrom(tc.ip)
			for i := range 20 {
				resp, err := victim.Get("http://" + addr + "/victim")
				if err != nil {
					t.Fatalf("the victim's request %d failed: %v", i, err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("the victim's request %d: %d", i, resp.StatusCode)
				}
			}
			if r := ll.refused.Load(); r != 0 {
				t.Errorf("%d connections refused, want none: the address held unused connections", r)
			}
			if e := ll.evicted.Load(); e == 0 {
				t.Error("no unused connection was closed for the victim's")
			}
			// The attacker's oldest connection went first.
			_ = held[0].SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := held[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Errorf("the attacker's oldest connection is still open (%v)", err)
			}
		})
	}
}

// TestPerAddressBoundKeepsRequestsInFlight: connections with a request in
// flight are never closed for a newcomer: with all of an address's
// connections busy the newcomer is refused, and with one idle among them,
// the idle one is closed, never a busy one.
func TestPerAddressBoundKeepsRequestsInFlight(t *testing.T) {
	t.Parallel()
	ip := netip.MustParseAddr("127.0.0.13")
	canUse(t, ip)
	_, ll, held, release := fairGateway(t)
	addr := ll.Addr().String()
	client := clientFrom(ip)
	results := make(chan error, 8)
	for range 7 {
		go func() {
			resp, err := client.Get("http://" + addr + "/hold")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			results <- err
		}()
	}
	for range 7 {
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("the held requests never reached the upstream")
		}
	}
	// The eighth connection: one request, then idle.
	idle, err := idleClient(addr, ip.AsSlice(), "", make([]byte, 4096))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	waitFor(t, "8 connections, 1 of them idle", func() bool {
		n, unused := ll.unused(ip)
		return n == 8 && unused == 1
	})

	// A newcomer closes the idle one.
	newcomer := func() net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip.AsSlice()}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := newcomer()
	defer first.Close()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the idle connection was not closed for the newcomer (%v)", err)
	}
	// The newcomer sends a request: now every connection is busy, and the
	// next newcomer is refused.
	if _, err := io.WriteString(first, "GET /hold HTTP/1.1\r\nHost: gateway\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the newcomer's request never reached the upstream")
	}
	waitFor(t, "8 connections, none unused", func() bool {
		n, unused := ll.unused(ip)
		return n == 8 && unused == 0
	})
	second := newcomer()
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := second.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a newcomer to an address whose every connection is busy was not refused (%v)", err)
	}
	if r, e := ll.refused.Load(), ll.evicted.Load(); r != 1 || e != 1 {
		t.Errorf("%d refused, %d evicted; want 1 and 1", r, e)
	}
	// Every request in flight completes.
	close(release)
	for i := range 7 {
		select {
		case err := <-results:
			if err != nil {
				t.Errorf("a request in flight: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 7 requests in flight completed", i)
		}
	}
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(first), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the newcomer's request in flight: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestPerAddressBoundExemptsTrustedProxies: a trusted proxy's address is
// not bound, every client behind it sharing it.
func TestPerAddressBoundExemptsTrustedProxies(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := newLimitListener(ln, 0, 2, func(ip netip.Addr) bool { return ip == netip.MustParseAddr("127.0.0.1") })
	defer ll.Close()
	var mu sync.Mutex
	var accepted []net.Conn
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	for range 5 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitFor(t, "5 connections accepted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) == 5
	})
	if r, e := ll.refused.Load(), ll.evicted.Load(); r != 0 || e != 0 {
		t.Fatalf("%d refused, %d evicted from a trusted proxy", r, e)
	}
	mu.Lock()
	for _, c := range accepted {
		c.Close()
	}
	mu.Unlock()
}
