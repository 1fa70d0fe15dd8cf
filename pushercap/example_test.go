package pushercap_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pushercap"
)

// presenceSubscribe is the frame pusher-js sends to join a presence channel,
// with the auth that the app's authorization endpoint signed for the socket.
func presenceSubscribe(socketID, channel, userID string) []byte {
	channelData := fmt.Sprintf(`{"user_id":%q}`, userID)
	auth := pushercap.Sign("app-key", "app-secret", socketID+":"+channel+":"+channelData)
	frame, _ := json.Marshal(map[string]any{
		"event": "pusher:subscribe",
		"data":  map[string]string{"channel": channel, "auth": auth, "channel_data": channelData},
	})
	return frame
}

// A Pusher-protocol server passes each frame a client sends through the
// gate. A connection gets its user from a verified presence subscribe, and
// the subscribe that puts its user over the cap is refused before the server
// sees it: send the error frame, close with its code, drop the subscribe.
func Example() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	caps, _ := conncap.New(limiter, conncap.WithDefaultCap(1)) // one tab per user
	defer caps.Close()
	gate, _ := pushercap.New(caps, []pushercap.App{{ID: "1", Key: "app-key", Secret: "app-secret"}})
	ctx := context.Background()

	first, _ := gate.Open("app-key") // from the connection's URL, /app/{key}
	defer first.Close()              // leaves the cap when the socket closes
	first.Established("123.1")       // the id sent in pusher:connection_established

	// A public subscribe names nobody: it passes, and is not counted.
	public := []byte(`{"event":"pusher:subscribe","data":{"channel":"news"}}`)
	fmt.Println("public subscribe passes:", first.Inspect(ctx, public) == nil)
	fmt.Println("presence subscribe passes:", first.Inspect(ctx, presenceSubscribe("123.1", "presence-room", "alice")) == nil)
	fmt.Println("first connection's user:", first.User())

	// Alice opens a second tab.
	second, _ := gate.Open("app-key")
	defer second.Close()
	second.Established("123.2")
	if r := second.Inspect(ctx, presenceSubscribe("123.2", "presence-room", "alice")); r != nil {
		fmt.Println("second connection refused, close code", r.CloseCode)
		fmt.Println(string(r.Frame))
	}
	// Output:
	// public subscribe passes: true
	// presence subscribe passes: true
	// first connection's user: alice
	// second connection refused, close code 4301
	// {"event":"pusher:error","data":{"code":4301,"message":"Too many connections for this user"}}
}

// Sign computes a channel authorization as a Pusher app's auth endpoint does:
// the key, a colon, and the HMAC-SHA256 of "socket_id:channel" (plus
// ":channel_data" for a presence channel) with the app's secret. Here with
// the test vector of Pusher's documentation.
func ExampleSign() {
	fmt.Println(pushercap.Sign("278d425bdf160c739803", "7ad3773142a6692b25b8", "1234.1234:private-foobar"))
	// Output: 278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4
}
