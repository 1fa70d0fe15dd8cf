// Command pusher runs a Pusher-protocol server whose connections are capped
// per user by pushercap, and connects four clients to it: three for alice
// (cap 2) and one that forges alice's presence authorization.
//
//	go run ./examples/pusher
//
// The third connection gets pusher:error 4301 and is closed with code 4301,
// which pusher-js does not reconnect after; the forged one is never counted.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pushercap"
)

var app = pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	// memstore: one server. redisstore: every server of the cluster.
	limiter, err := keycap.NewLimiter(memstore.New())
	if err != nil {
		return err
	}
	defer limiter.Close()
	caps, err := conncap.New(limiter, conncap.WithDefaultCap(2))
	if err != nil {
		return err
	}
	defer caps.Close()
	gate, err := pushercap.New(caps, []pushercap.App{{ID: app.ID, Key: app.Key, Secret: app.Secret}},
		pushercap.WithOnRefuse(func(r pushercap.Refusal) {
			fmt.Printf("   gate: refused %s's connection %s to %s: %v\n", r.User, r.SocketID, r.Channel, r.Err)
		}))
	if err != nil {
		return err
	}
	srv := httptest.NewServer(pusherserver.New(gate, app))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/app/" + app.Key + "?protocol=7"
	fmt.Printf("Pusher-protocol server at %s, at most 2 connections per user\n\n", url)

	for i, c := range []struct{ user, secret string }{
		{"alice", app.Secret}, {"alice", app.Secret}, {"alice", app.Secret}, {"alice", "a-forged-secret"},
	} {
		fmt.Printf("client %d (%s%s):\n", i+1, c.user, map[bool]string{true: ", forged auth"}[c.secret != app.Secret])
		if err := connect(url, c.user, c.secret); err != nil {
			return err
		}
	}
	fmt.Printf("\n%d connections counted for alice (the forged one is not)\n", caps.Connections())
	return nil
}

// connect opens a connection, subscribes to presence-room as user, and prints
// what the server answers. It keeps the connection open (until exit).
func connect(url, user, secret string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return err
	}
	_, msg, err := ws.Read(ctx)
	if err != nil {
		return err
	}
	var est struct{ Data string }
	_ = json.Unmarshal(msg, &est)
	var d struct {
		SocketID string `json:"socket_id"`
	}
	_ = json.Unmarshal([]byte(est.Data), &d)
	cd := fmt.Sprintf(`{"user_id":%q,"user_info":{}}`, user)
	auth := pusherserver.Sign(pusherserver.App{Key: app.Key, Secret: secret}, d.SocketID+":presence-room:"+cd)
	sub, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
		"channel": "presence-room", "auth": auth, "channel_data": cd}})
	if err := ws.Write(ctx, websocket.MessageText, sub); err != nil {
		return err
	}
	_, msg, err = ws.Read(ctx)
	if err != nil {
		fmt.Printf("   closed: %v\n", websocket.CloseStatus(err))
		return nil
	}
	fmt.Printf("   server: %s\n", msg)
	if strings.Contains(string(msg), `\"code\":4301`) { // the cap's refusal: the server closes
		if _, _, err := ws.Read(ctx); err != nil {
			fmt.Printf("   closed with code %d\n", websocket.CloseStatus(err))
		}
	}
	return nil
}
