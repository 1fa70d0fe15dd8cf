package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddrIsOutsideTheEphemeralRange: the addresses FreeAddr hands out
// can be listened on, are never handed out twice, and lie below the range
// the kernel gives outgoing connections.
func TestFreeAddrIsOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		if low > 11000 && p >= low {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening on %s: %v", addr, err)
		}
		_ = l.Close()
	}
}
