package rpclimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/rpclimit"
)

// FuzzCall: whatever a client sends — procedure, key metadata, a peer
// address, proxy headers — and whatever pattern an application registers, a
// call is run, or refused as over its limit or for a bad key: never an
// internal error, never a panic.
func FuzzCall(f *testing.F) {
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		f.Fatal(err)
	}
	defer limiter.Close()
	trustAll, err := httplimit.NewClientIP(httplimit.HeaderXForwardedFor, 64, "0.0.0.0/0", "::/0")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("/a.S/M", "tenant", "203.0.113.1:5", "198.51.100.7, 10.0.0.1", "/a.S/*")
	f.Add("", "", "", "", "*")
	f.Add("/a.S/M/x", "\x00\xff", "[::1]:1", "for=\"[2001:db8::1]\"", "/a.S/M")
	f.Fuzz(func(t *testing.T, procedure, key, peer, forwarded, pattern string) {
		limits, _ := rpclimit.New(limiter, rpclimit.WithClientIP(trustAll))
		_ = limits.Set(pattern, rpclimit.Max(1).ByMetadata("x-tenant"))
		_ = limits.Set("*", rpclimit.All(rpclimit.Max(1), rpclimit.Limit(keycap.Spec{Name: "team", Max: 2}).ByMetadata("x-team").IfMissing(rpclimit.DefaultKeyIfMissing)))
		md := map[string][]string{"x-tenant": {key}, "x-forwarded-for": {forwarded}, "forwarded": {forwarded}}
		c := &rpclimit.Call{Procedure: procedure, Peer: fuzzAddr(peer), Metadata: func(name string) []string { return md[strings.ToLower(name)] }}
		var r *rpclimit.Refusal
		if err := limits.Run(context.Background(), c, func(context.Context) {}); err != nil &&
			(!errors.As(err, &r) || r.Code != rpclimit.InvalidArgument && r.Code != rpclimit.ResourceExhausted) {
			t.Fatalf("refused: %v", err)
		}
		_ = limits.DefaultKey(context.Background(), c)
	})
}

// fuzzAddr is a peer address of any text.
type fuzzAddr string

func (a fuzzAddr) Network() string { return "tcp" }
func (a fuzzAddr) String() string  { return string(a) }
