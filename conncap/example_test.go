package conncap_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
)

// Two servers share one store (redisstore in a real cluster; memstore here,
// with two Limiters standing for the two servers). Each user may hold 2
// connections in all, whichever server each one lands on.
func Example() {
	store := memstore.New()
	ctx := context.Background()

	limiterA, _ := keycap.NewLimiter(store, keycap.WithNode("server-a"))
	defer limiterA.Close()
	serverA, _ := conncap.New(limiterA, conncap.WithDefaultCap(2))
	defer serverA.Close() // withdraws server A's connections from the store

	limiterB, _ := keycap.NewLimiter(store, keycap.WithNode("server-b"))
	defer limiterB.Close()
	serverB, _ := conncap.New(limiterB, conncap.WithDefaultCap(2))
	defer serverB.Close()

	fmt.Println("on A:", serverA.Admit(ctx, "chat", "alice", "socket-1"))
	fmt.Println("on B:", serverB.Admit(ctx, "chat", "alice", "socket-2"))
	// The third is refused: refuse the WebSocket (or close it).
	fmt.Println("on A:", serverA.Admit(ctx, "chat", "alice", "socket-3"))

	// When a connection closes, Leave frees its slot at once, for every server.
	serverB.Leave("chat", "socket-2")
	fmt.Println("on A:", serverA.Admit(ctx, "chat", "alice", "socket-3"))
	// Output:
	// on A: <nil>
	// on B: <nil>
	// on A: conncap: user already holds 2 connections to app "chat", the cap
	// on A: <nil>
}

// Caps are per app: WithAppCap sets one app's, and a cap of 0 leaves an app
// uncapped (Admit then makes no store call).
func ExampleWithAppCap() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	caps, _ := conncap.New(limiter,
		conncap.WithDefaultCap(3),
		conncap.WithAppCap("trading", 1),
		conncap.WithAppCap("status-page", 0))
	defer caps.Close()

	for _, app := range []string{"trading", "chat", "status-page"} {
		fmt.Println(app, "cap", caps.CapOf(app))
	}
	ctx := context.Background()
	_ = caps.Admit(ctx, "trading", "bob", "tab-1")
	var over *conncap.OverCapError
	if err := caps.Admit(ctx, "trading", "bob", "tab-2"); errors.As(err, &over) {
		fmt.Println("second trading tab refused for", over.User)
	}
	// Output:
	// trading cap 1
	// chat cap 3
	// status-page cap 0
	// second trading tab refused for bob
}
