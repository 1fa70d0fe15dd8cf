package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	portsMu sync.Mutex
	given   = map[int]bool{}
)

// FreeAddr returns a loopback address, "127.0.0.1:port", free to listen on,
// for a server a test starts and stops. The port is below the kernel's
// range of ephemeral ports (/proc/sys/net/ipv4/ip_local_port_range): a port
// of that range, picked free and let go, can be taken by an outgoing
// connection's source port before the server binds it — which made one
// lane's cluster fail to start ("did not answer") in a soak that started
// many. One process never hands out a port twice. Where the range cannot
// be read, the kernel picks (port 0), as before.
func FreeAddr(t testing.TB) string {
	t.Helper()
	const low = 10000
	top := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		if top <= low+1000 {
			break
		}
		p := low + rand.IntN(top-low)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // taken
		}
		addr := l.Addr().String()
		_ = l.Close()
		given[p] = true
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	p, _ := strconv.Atoi(port)
	return p
}

// ephemeralLow returns the first port of the kernel's ephemeral range, or 0
// where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
