package pushercap_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/conncap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/pushercap"
)

// The reference's test vectors: secret, key and socket id.
const (
	secret = "7ad3773142a6692b25b8"
	key    = "278d425bdf160c739803"
	socket = "1234.1234"
)

func TestSignatureVectors(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"1234.1234:private-foobar": "58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4",
		`1234.1234:presence-foobar:{"user_id":10,"user_info":{"name":"Mr. Channels"}}`: "31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80",
		`1234.1234:presence-foobar:{"user_id":10,"user_info":{"name":"Mr. Pusher"}}`:   "afaed3695da2ffd16931f457e338e6c9f2921fa133ce7dac49f529792be6304c",
		`1234.1234::user::{"id":"12345"}`:                                              "4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba",
	} {
		if got := pushercap.Sign(key, secret, msg); got != key+":"+want {
			t.Errorf("Sign(%q) = %s, want %s:%s", msg, got, key, want)
		}
	}
}

func newGate(t *testing.T, cap int, opts ...pushercap.Option) (*pushercap.Gate, *conncap.Cap) {
	t.Helper()
	caps, err := capsOn(t, memstore.New(), conncap.WithDefaultCap(cap))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caps.Close() })
	g, err := pushercap.New(caps, []pushercap.App{{ID: "1", Key: key, Secret: secret}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g, caps
}

func open(t *testing.T, g *pushercap.Gate, socketID string) *pushercap.Conn {
	t.Helper()
	c, err := g.Open(key)
	if err != nil {
		t.Fatal(err)
	}
	c.Established(socketID)
	return c
}

// subscribe builds a presence subscribe for user, signed with sign's secret.
func subscribe(socketID, channel, channelData, secret string) []byte {
	f, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
		"channel": channel, "channel_data": channelData,
		"auth": pushercap.Sign(key, secret, socketID+":"+channel+":"+channelData),
	}})
	return f
}

func presence(socketID string, userID any) []byte {
	cd, _ := json.Marshal(map[string]any{"user_id": userID, "user_info": map[string]string{"name": "x"}})
	return subscribe(socketID, "presence-room", string(cd), secret)
}

func TestCapAndRefusal(t *testing.T) {
	t.Parallel()
	var refusals []pushercap.Refusal
	g, caps := newGate(t, 2, pushercap.WithOnRefuse(func(r pushercap.Refusal) { refusals = append(refusals, r) }))
	ctx := context.Background()
	for i := range 2 {
		id := fmt.Sprintf("%d.1", i)
		c := open(t, g, id)
		if r := c.Inspect(ctx, presence(id, 10)); r != nil {
			t.Fatalf("connection %d refused: %+v", i, r)
		}
		if c.User() != "10" {
			t.Fatalf("user %q, want the number 10 as \"10\"", c.User())
		}
	}
	third := open(t, g, "3.1")
	r := third.Inspect(ctx, presence("3.1", "10")) // the string "10" is the same user
	if r == nil {
		t.Fatal("the third connection of user 10 was let through")
	}
	want := `{"event":"pusher:error","data":{"code":4301,"message":"Too many connections for this user"}}`
	if string(r.Frame) != want || r.CloseCode != 4301 || !errors.Is(r.Err, conncap.ErrOverCap) || r.Channel != "presence-room" {
		t.Fatalf("refusal %+v\nframe %s", r, r.Frame)
	}
	if len(refusals) != 1 || refusals[0].User != "10" {
		t.Fatalf("WithOnRefuse saw %+v", refusals)
	}
	if third.User() != "" || caps.Connections() != 2 {
		t.Fatalf("the refused connection was counted: %d connections", caps.Connections())
	}
}

func TestWhatPassesUntouched(t *testing.T) {
	t.Parallel()
	cd := `{"user_id":"alice"}`
	for name, frame := range map[string]string{
		"wrong secret":                string(subscribe(socket, "presence-room", cd, "not-the-secret")),
		"signature of another socket": string(subscribe("9.9", "presence-room", cd, secret)),
		"tampered channel_data":       strings.Replace(string(subscribe(socket, "presence-room", cd, secret)), "alice", "mallory", 1),
		"public channel":              `{"event":"pusher:subscribe","data":{"channel":"room"}}`,
		"private channel":             string(subscribe(socket, "private-room", cd, secret)),
		"ping":                        `{"event":"pusher:ping","data":{}}`,
		"client event":                `{"event":"client-typing","channel":"presence-room","data":{"user_id":"alice"}}`,
		"malformed JSON":              `{"event":"pusher:subscribe","data":`,
		"data not an object":          `{"event":"pusher:subscribe","data":"presence-room"}`,
		"channel_data not a string":   `{"event":"pusher:subscribe","data":{"channel":"presence-room","auth":"x:y","channel_data":{"user_id":1}}}`,
		"auth without a colon":        `{"event":"pusher:subscribe","data":{"channel":"presence-room","auth":"abc","channel_data":"{}"}}`,
		"auth not hex":                `{"event":"pusher:subscribe","data":{"channel":"presence-room","auth":"k:zz","channel_data":"{}"}}`,
		"user_id null":                string(subscribe(socket, "presence-room", `{"user_id":null}`, secret)),
		"user_id true":                string(subscribe(socket, "presence-room", `{"user_id":true}`, secret)),
		"user_id false":               string(subscribe(socket, "presence-room", `{"user_id":false}`, secret)),
		"user_id object":              string(subscribe(socket, "presence-room", `{"user_id":{"id":1}}`, secret)),
		"no user_id":                  string(subscribe(socket, "presence-room", `{"user_info":{}}`, secret)),
		"channel_data not JSON":       string(subscribe(socket, "presence-room", `user_id=1`, secret)),
		"signin, not enabled":         signin(socket, `{"id":"alice"}`),
		"empty":                       ``,
		"binary":                      "\x00\xff",
	} {
		g, caps := newGate(t, 1)
		c := open(t, g, socket)
		if r := c.Inspect(context.Background(), []byte(frame)); r != nil || c.User() != "" || caps.Connections() != 0 {
			t.Errorf("%s: refusal %v, user %q, %d counted; want it untouched and uncounted", name, r, c.User(), caps.Connections())
		}
	}
}

func TestBeforeTheSocketIDIsKnownNothingVerifies(t *testing.T) {
	t.Parallel()
	g, caps := newGate(t, 1)
	c, _ := g.Open(key)
	if r := c.Inspect(context.Background(), presence(socket, "alice")); r != nil || caps.Connections() != 0 {
		t.Fatal("a frame was counted before the socket id was known")
	}
}

func TestFirstIdentityWins(t *testing.T) {
	t.Parallel()
	g, caps := newGate(t, 1)
	c := open(t, g, socket)
	ctx := context.Background()
	if r := c.Inspect(ctx, presence(socket, "alice")); r != nil {
		t.Fatal(r)
	}
	cd := `{"user_id":"bob"}`
	if r := c.Inspect(ctx, subscribe(socket, "presence-other", cd, secret)); r != nil || c.User() != "alice" || caps.Connections() != 1 {
		t.Fatalf("a second identity changed the first: %v %q", r, c.User())
	}
	c.Close()
	if caps.Connections() != 0 {
		t.Fatal("Close did not leave the cap")
	}
	again := open(t, g, "2.2")
	if r := again.Inspect(ctx, presence("2.2", "alice")); r != nil {
		t.Fatal("alice's slot was not freed by Close")
	}
}

func signin(socketID, userData string) string {
	f, _ := json.Marshal(map[string]any{"event": "pusher:signin", "data": map[string]string{
		"user_data": userData, "auth": pushercap.Sign(key, secret, socketID+"::user::"+userData),
	}})
	return string(f)
}

func TestSignin(t *testing.T) {
	t.Parallel()
	g, caps := newGate(t, 1, pushercap.WithSignin())
	ctx := context.Background()
	c := open(t, g, socket)
	if r := c.Inspect(ctx, []byte(signin(socket, `{"id":"12345","user_info":{}}`))); r != nil || c.User() != "12345" {
		t.Fatalf("signin: %v, user %q", r, c.User())
	}
	d := open(t, g, "2.2")
	if r := d.Inspect(ctx, []byte(signin("2.2", `{"id":"12345"}`))); r == nil {
		t.Fatal("second signin of user 12345 over the cap let through")
	}
	e := open(t, g, "3.3")
	if r := e.Inspect(ctx, []byte(signin("3.3", `{"id":12345}`))); r != nil || caps.Connections() != 1 {
		t.Fatal("a non-string signin id must pass, uncounted")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	caps, _ := capsOn(t, memstore.New())
	defer caps.Close()
	for name, apps := range map[string][]pushercap.App{
		"no app":               nil,
		"empty id":             {{Key: "k", Secret: "s"}},
		"empty key":            {{ID: "1", Secret: "s"}},
		"empty secret":         {{ID: "1", Key: "k"}},
		"duplicate key":        {{ID: "1", Key: "k", Secret: "s"}, {ID: "2", Key: "k", Secret: "t"}},
		"code that reconnects": {{ID: "1", Key: "k", Secret: "s", ErrorCode: 4200}},
		"normal close code":    {{ID: "1", Key: "k", Secret: "s", ErrorCode: 1000}},
		"backoff code":         {{ID: "1", Key: "k", Secret: "s", ErrorCode: 4100}},
	} {
		if _, err := pushercap.New(caps, apps); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	g, err := pushercap.New(caps, []pushercap.App{{ID: "1", Key: "k", Secret: "s", ErrorCode: 4009, ErrorMessage: "Limit reached"}})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := g.App("k"); a.ErrorCode != 4009 || a.ErrorMessage != "Limit reached" {
		t.Fatalf("app %+v", a)
	}
	if _, err := g.Open("unknown"); err == nil {
		t.Fatal("an unknown key was opened")
	}
}

// FuzzInspect feeds arbitrary frames: never a panic, and a frame is counted
// only if it carries a valid signature over exactly what it claims.
func FuzzInspect(f *testing.F) {
	f.Add(string(presence(socket, "alice")))
	f.Add(`{"event":"pusher:subscribe","data":{"channel":"presence-x","auth":"a:b","channel_data":"{\"user_id\":1}"}}`)
	f.Add(signin(socket, `{"id":"x"}`))
	f.Add(`{"event":"pusher:subscribe","data":null}`)
	f.Add(`[1,2,3]`)
	caps, err := capsOn(f, memstore.New(), conncap.WithDefaultCap(1000))
	if err != nil {
		f.Fatal(err)
	}
	defer caps.Close()
	g, err := pushercap.New(caps, []pushercap.App{{ID: "1", Key: key, Secret: secret}}, pushercap.WithSignin())
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	f.Fuzz(func(t *testing.T, frame string) {
		n++
		id := fmt.Sprintf("%d.1", n)
		c, _ := g.Open(key)
		c.Established(id)
		defer c.Close()
		_ = c.Inspect(context.Background(), []byte(strings.ReplaceAll(frame, socket, id)))
		if c.User() != "" && !signed(strings.ReplaceAll(frame, socket, id), id) {
			t.Fatalf("frame %q was counted without a valid signature", frame)
		}
	})
}

// signed reports whether frame is a presence subscribe or a signin whose auth
// is the app's signature of its own fields, for socket id.
func signed(frame, id string) bool {
	var f struct {
		Event string `json:"event"`
		Data  struct {
			Channel, Auth, ChannelData, UserData string
		} `json:"data"`
	}
	var raw struct {
		Data map[string]any `json:"data"`
	}
	if json.Unmarshal([]byte(frame), &f) != nil || json.Unmarshal([]byte(frame), &raw) != nil {
		return false
	}
	str := func(k string) string { v, _ := raw.Data[k].(string); return v }
	_, sig, _ := strings.Cut(str("auth"), ":")
	switch f.Event {
	case "pusher:subscribe":
		return strings.EqualFold(sig, strings.TrimPrefix(pushercap.Sign(key, secret, id+":"+str("channel")+":"+str("channel_data")), key+":"))
	case "pusher:signin":
		return strings.EqualFold(sig, strings.TrimPrefix(pushercap.Sign(key, secret, id+"::user::"+str("user_data")), key+":"))
	}
	return false
}

// TestNoParsingOnceTheUserIsKnown: after the frame that gave the connection
// its user, frames are not parsed (the first identity wins): a large frame
// costs nothing.
func TestNoParsingOnceTheUserIsKnown(t *testing.T) {
	g, _ := newGate(t, 2)
	c, err := g.Open(key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Established("1.1")
	if r := c.Inspect(context.Background(), presence("1.1", "alice")); r != nil {
		t.Fatalf("refused: %+v", r)
	}
	big := presence("1.1", strings.Repeat("x", 1<<20))
	if allocs := testing.AllocsPerRun(10, func() { c.Inspect(context.Background(), big) }); allocs != 0 {
		t.Fatalf("Inspect after the user is known: %v allocations a frame, want 0", allocs)
	}
}

// capsOn returns connection caps on a Limiter of their own over store, both
// closed when tb ends.
func capsOn(tb testing.TB, store keycap.Store, opts ...conncap.Option) (*conncap.Cap, error) {
	tb.Helper()
	l, err := keycap.NewLimiter(store)
	if err != nil {
		return nil, err
	}
	caps, err := conncap.New(l, opts...)
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	tb.Cleanup(func() {
		_ = caps.Close()
		_ = l.Close()
	})
	return caps, nil
}
