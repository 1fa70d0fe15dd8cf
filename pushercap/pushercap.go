// Package pushercap caps, across a whole cluster, the Pusher-protocol
// WebSocket connections each user holds. It is a gate on inbound frames that
// any Go Pusher-protocol server can call, and that the keycap gateway calls
// for proxied connections.
//
//	gate, err := pushercap.New(caps, []pushercap.App{{ID: "1", Key: "app-key", Secret: "app-secret"}})
//	conn, err := gate.Open("app-key")
//	conn.Established(socketID)              // once the socket id is known
//	defer conn.Close()                      // leaves the cap
//	for each frame the client sends {
//		if r := conn.Inspect(ctx, frame); r != nil {
//			send(r.Frame)                   // the pusher:error frame
//			closeWith(r.CloseCode, r.Reason) // 4301: pusher-js does not reconnect
//			return                          // the frame is consumed
//		}
//		handle(frame)                       // untouched
//	}
//
// # Identity
//
// A connection is anonymous until a pusher:subscribe to a presence- channel
// whose auth verifies: HMAC-SHA256 over "socket_id:channel:channel_data" with
// the app's secret, compared in constant time. Its channel_data's user_id
// (a string, or a number as written: 10 → "10"; a boolean names nobody) is
// the connection's user, and the first one wins. Optionally (WithSignin) a verified pusher:signin
// ("socket_id::user::user_data", user_data's id) gives it too. Everything
// else — a subscribe that does not verify (the server refuses it itself), a
// public or private subscribe, a ping, a client event, a malformed frame —
// passes untouched, writes nothing and is never counted: nobody can spend
// another user's slots by claiming their identity.
//
// # Over the cap
//
// The frame that gives the identity is checked against the cap before the
// server sees it. Over the cap, Inspect returns a Refusal: send its
// pusher:error frame (code 4301, "Too many connections for this user", both
// configurable), close the WebSocket with its close code, and drop the frame.
// The client never joins the channel, never sees the member list, and nobody
// is told it arrived. 4301 makes pusher-js stay disconnected: close codes
// 4000–4099 and 4300–4999 end its reconnect loop, other codes do not, so New
// refuses them.
package pushercap

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/keycap/keycap/conncap"
)

// Defaults of an App.
const (
	DefaultErrorCode    = 4301
	DefaultErrorMessage = "Too many connections for this user"
)

// Defaults of a refusal because the store could not answer (failing
// closed): a code in 4100–4199, from which pusher-js reconnects after a
// back-off, so that clients come back once the store does.
const (
	DefaultStoreErrorCode    = 4100
	DefaultStoreErrorMessage = "Connection limits are unavailable, reconnect later"
)

// App is one Pusher application.
type App struct {
	ID     string // the app id; caps are per app id (conncap.WithAppCap)
	Key    string // the app key, in the connection URL /app/{key}
	Secret string // signs channel authorizations
	// ErrorCode is the pusher:error code and the WebSocket close code of a
	// refusal. Default DefaultErrorCode. It must stop pusher-js from
	// reconnecting: 4000–4099 or 4300–4999.
	ErrorCode int
	// ErrorMessage is the refusal's message. Default DefaultErrorMessage.
	ErrorMessage string
}

// Gate applies conncap to Pusher-protocol connections. It is safe for
// concurrent use.
type Gate struct {
	caps       *conncap.Cap
	apps       map[string]App // by key
	signin     bool
	onRefuse   func(Refusal)
	storeCode  int
	storeError string
}

// An Option configures a Gate.
type Option struct{ apply func(*Gate) }

// WithSignin also takes a connection's identity from a verified
// pusher:signin (user authentication). Off by default.
func WithSignin() Option { return Option{func(g *Gate) { g.signin = true }} }

// WithOnRefuse calls fn for each refusal, after Inspect decided it.
func WithOnRefuse(fn func(Refusal)) Option { return Option{func(g *Gate) { g.onRefuse = fn }} }

// WithStoreError sets the pusher:error code, close code and message of a
// refusal because the store could not answer (default DefaultStoreErrorCode
// and DefaultStoreErrorMessage). New refuses a code outside 4100–4199: the
// client must reconnect once the store is back, after a back-off.
func WithStoreError(code int, message string) Option {
	return Option{func(g *Gate) { g.storeCode, g.storeError = code, message }}
}

// New returns a gate for apps, counting on caps.
func New(caps *conncap.Cap, apps []App, opts ...Option) (*Gate, error) {
	if caps == nil {
		return nil, errors.New("pushercap: caps is nil")
	}
	if len(apps) == 0 {
		return nil, errors.New("pushercap: no app")
	}
	g := &Gate{caps: caps, apps: map[string]App{}, storeCode: DefaultStoreErrorCode, storeError: DefaultStoreErrorMessage}
	for i, a := range apps {
		switch {
		case a.ID == "":
			return nil, fmt.Errorf("pushercap: app %d: id is empty", i+1)
		case a.Key == "":
			return nil, fmt.Errorf("pushercap: app %q: key is empty", a.ID)
		case a.Secret == "":
			return nil, fmt.Errorf("pushercap: app %q: secret is empty", a.ID)
		}
		if _, dup := g.apps[a.Key]; dup {
			return nil, fmt.Errorf("pushercap: app %q: key %q is used twice", a.ID, a.Key)
		}
		if a.ErrorCode == 0 {
			a.ErrorCode = DefaultErrorCode
		}
		if !StopsReconnect(a.ErrorCode) {
			return nil, fmt.Errorf("pushercap: app %q: invalid error code %d: pusher-js reconnects after it; use 4000-4099 or 4300-4999", a.ID, a.ErrorCode)
		}
		if a.ErrorMessage == "" {
			a.ErrorMessage = DefaultErrorMessage
		}
		g.apps[a.Key] = a
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(g)
		}
	}
	if !Reconnects(g.storeCode) {
		return nil, fmt.Errorf("pushercap: invalid store error code %d: pusher-js would not reconnect once the store is back; use 4100-4199", g.storeCode)
	}
	if g.storeError == "" {
		g.storeError = DefaultStoreErrorMessage
	}
	return g, nil
}

// StopsReconnect reports whether a WebSocket close code stops pusher-js from
// reconnecting (its getCloseAction: 4000–4099 refuse, 4300 and above unknown
// error, refuse).
func StopsReconnect(code int) bool {
	return (code >= 4000 && code <= 4099) || (code >= 4300 && code <= 4999)
}

// Reconnects reports whether a WebSocket close code makes pusher-js reconnect
// after a back-off (4100–4199): the codes for "try again later".
func Reconnects(code int) bool { return code >= 4100 && code <= 4199 }

// App returns the app of key.
func (g *Gate) App(key string) (App, bool) {
	a, ok := g.apps[key]
	return a, ok
}

// Conn is the gate's view of one connection.
type Conn struct {
	g   *Gate
	app App

	mu       sync.Mutex
	socketID string
	user     string
	closed   bool
}

// Open returns the gate's view of a new connection to the app of key.
func (g *Gate) Open(key string) (*Conn, error) {
	a, ok := g.apps[key]
	if !ok {
		return nil, fmt.Errorf("pushercap: no app with key %q", key)
	}
	return &Conn{g: g, app: a}, nil
}

// Established records the connection's socket id, which the server sends in
// pusher:connection_established. Until then no frame can be verified, and all
// pass.
func (c *Conn) Established(socketID string) {
	c.mu.Lock()
	c.socketID = socketID
	c.mu.Unlock()
}

// User returns the connection's user, "" while it has none.
func (c *Conn) User() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.user
}

// Refusal is what to do with a connection over its user's cap: send Frame,
// close the WebSocket with CloseCode and Reason, and drop the frame that
// asked.
type Refusal struct {
	Frame     []byte
	CloseCode int
	Reason    string

	App      string // the app id
	User     string
	SocketID string
	Channel  string // the presence channel asked for ("" for a signin)
	Err      error  // a *conncap.OverCapError, or the store's failure (failing closed)
}

// frame is an inbound Pusher frame; data stays raw until needed.
type frame struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// Inspect reads one frame the client sent. It returns nil to let it through
// untouched, or a Refusal when the frame makes the connection's user one over
// the cap. A frame that cannot be parsed passes.
func (c *Conn) Inspect(ctx context.Context, raw []byte) *Refusal {
	c.mu.Lock()
	done := c.user != "" || c.closed
	c.mu.Unlock()
	if done {
		return nil // the first identity wins: nothing left to read
	}
	var f frame
	if json.Unmarshal(raw, &f) != nil {
		return nil
	}
	var user, channel string
	switch {
	case f.Event == "pusher:subscribe":
		user, channel = c.presenceUser(f.Data)
	case f.Event == "pusher:signin" && c.g.signin:
		user = c.signinUser(f.Data)
	default:
		return nil
	}
	if user == "" {
		return nil
	}
	c.mu.Lock()
	if c.user != "" || c.closed {
		c.mu.Unlock()
		return nil // the first identity wins
	}
	socketID := c.socketID
	c.mu.Unlock()

	err := c.g.caps.Admit(ctx, c.app.ID, user, socketID)
	if err == nil {
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.user = user
		}
		c.mu.Unlock()
		if closed { // the connection closed while it was admitted
			c.g.caps.Leave(c.app.ID, socketID)
		}
		return nil
	}
	if ctx.Err() != nil {
		return nil // the connection is going away; nothing to refuse
	}
	code, message := c.app.ErrorCode, c.app.ErrorMessage
	if !errors.Is(err, conncap.ErrOverCap) {
		code, message = c.g.storeCode, c.g.storeError // the store could not say
	}
	r := &Refusal{
		Frame:     ErrorFrame(code, message),
		CloseCode: code,
		Reason:    message,
		App:       c.app.ID, User: user, SocketID: socketID, Channel: channel, Err: err,
	}
	if c.g.onRefuse != nil {
		c.g.onRefuse(*r)
	}
	return r
}

// Close leaves the cap, if the connection was counted. Call it when the
// connection closes, whichever side closed it.
func (c *Conn) Close() {
	c.mu.Lock()
	user, socketID := c.user, c.socketID
	c.closed = true
	c.mu.Unlock()
	if user != "" {
		c.g.caps.Leave(c.app.ID, socketID)
	}
}

// presenceUser returns the user of a presence subscribe whose auth verifies,
// and its channel; "" otherwise.
func (c *Conn) presenceUser(data json.RawMessage) (user, channel string) {
	var d struct {
		Channel     *string `json:"channel"`
		Auth        *string `json:"auth"`
		ChannelData *string `json:"channel_data"`
	}
	if json.Unmarshal(data, &d) != nil || d.Channel == nil || d.Auth == nil || d.ChannelData == nil {
		return "", ""
	}
	if !strings.HasPrefix(*d.Channel, "presence-") {
		return "", ""
	}
	c.mu.Lock()
	socketID := c.socketID
	c.mu.Unlock()
	if socketID == "" || !c.verify(*d.Auth, socketID+":"+*d.Channel+":"+*d.ChannelData) {
		return "", ""
	}
	var cd struct {
		UserID json.RawMessage `json:"user_id"`
	}
	if json.Unmarshal([]byte(*d.ChannelData), &cd) != nil {
		return "", ""
	}
	return scalar(cd.UserID), *d.Channel
}

// signinUser returns the user of a pusher:signin whose auth verifies.
func (c *Conn) signinUser(data json.RawMessage) string {
	var d struct {
		Auth     *string `json:"auth"`
		UserData *string `json:"user_data"`
	}
	if json.Unmarshal(data, &d) != nil || d.Auth == nil || d.UserData == nil {
		return ""
	}
	c.mu.Lock()
	socketID := c.socketID
	c.mu.Unlock()
	if socketID == "" || !c.verify(*d.Auth, socketID+"::user::"+*d.UserData) {
		return ""
	}
	var ud struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal([]byte(*d.UserData), &ud) != nil {
		return ""
	}
	var id string
	if json.Unmarshal(ud.ID, &id) != nil {
		return "" // Pusher requires a string id
	}
	return id
}

// verify checks auth ("<key>:<hex signature>") against message, in constant
// time. Only the part after the first ':' is compared.
func (c *Conn) verify(auth, message string) bool {
	_, sig, ok := strings.Cut(auth, ":")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(c.app.Secret))
	mac.Write([]byte(message))
	return hmac.Equal(got, mac.Sum(nil))
}

// Sign returns the auth of message for secret and key, as a Pusher app's
// authorization endpoint computes it.
func Sign(key, secret, message string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(message))
	return key + ":" + hex.EncodeToString(mac.Sum(nil))
}

// scalar returns a JSON scalar as a string: a string unquoted, a number as
// written; "" for booleans, null, objects, arrays and invalid JSON, which
// name nobody.
func scalar(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return ""
}

// ErrorFrame returns a pusher:error frame, its data an object, as the
// protocol documents it and as soketi and Reverb send it:
//
//	{"event":"pusher:error","data":{"code":4301,"message":"…"}}
func ErrorFrame(code int, message string) []byte {
	f, _ := json.Marshal(struct {
		Event string `json:"event"`
		Data  struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
	}{Event: "pusher:error", Data: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	return f
}
