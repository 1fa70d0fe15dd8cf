// Package pusherserver is a small Pusher-protocol (v7) server for keycap's
// tests, its examples and the gateway's demo upstream: enough of the protocol for pusher-js to connect,
// subscribe to public, private and presence channels (whose authorizations it
// verifies), ping, send client events and receive broadcasts. With a
// pushercap.Gate it is a Go Pusher-protocol endpoint that caps connections
// per user; without one, it is the upstream behind the keycap gateway.
package pusherserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/keycap/keycap/pushercap"
)

// App is one Pusher application the server serves.
type App struct{ ID, Key, Secret string }

// Server is a Pusher-protocol server; serve it with an httptest.Server or
// an http.Server. Connections are at /app/{key}.
type Server struct {
	apps map[string]App
	gate *pushercap.Gate

	mu       sync.Mutex
	sockets  map[string]*socket
	channels map[string]map[string]*socket // channel → socket id → socket

	upgrades atomic.Int64
	refusals atomic.Int64
}

type socket struct {
	id  string
	app App
	ws  *websocket.Conn

	mu       sync.Mutex
	presence map[string]member // presence channel → this socket's member
}

type member struct {
	UserID   string          `json:"user_id"`
	UserInfo json.RawMessage `json:"user_info,omitempty"`
}

// New returns a server for apps. With a gate, every client frame goes through
// it first.
func New(gate *pushercap.Gate, apps ...App) *Server {
	s := &Server{apps: map[string]App{}, gate: gate, sockets: map[string]*socket{}, channels: map[string]map[string]*socket{}}
	for _, a := range apps {
		s.apps[a.Key] = a
	}
	return s
}

// Upgrades returns how many WebSocket connections the server accepted.
func (s *Server) Upgrades() int64 { return s.upgrades.Load() }

// Refusals returns how many connections the gate refused.
func (s *Server) Refusals() int64 { return s.refusals.Load() }

// Sockets returns how many connections are open.
func (s *Server) Sockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sockets)
}

// Subscribers returns how many connections are subscribed to channel.
func (s *Server) Subscribers(channel string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.channels[channel])
}

// Broadcast sends event with data (a string, as Pusher's HTTP API takes it)
// to every connection subscribed to channel.
func (s *Server) Broadcast(channel, event, data string) {
	msg := encode(event, channel, data)
	for _, sk := range s.subscribers(channel, "") {
		sk.send(msg)
	}
}

func (s *Server) subscribers(channel, except string) []*socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*socket
	for id, sk := range s.channels[channel] {
		if id != except {
			out = append(out, sk)
		}
	}
	return out
}

// encode builds a server-to-client frame; data is a string (double-encoded
// JSON, as the protocol wants).
func encode(event, channel, data string) []byte {
	f := map[string]string{"event": event, "data": data}
	if channel != "" {
		f["channel"] = channel
	}
	b, _ := json.Marshal(f)
	return b
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (sk *socket) send(msg []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = sk.ws.Write(ctx, websocket.MessageText, msg)
}

func socketID() string {
	n := func() string { v, _ := rand.Int(rand.Reader, big.NewInt(1_000_000_000)); return v.String() }
	return n() + "." + n()
}

// ServeHTTP serves the Pusher protocol at /app/{key}.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, "/app/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	s.upgrades.Add(1)
	app, ok := s.apps[key]
	if !ok {
		_ = ws.Close(4001, "App key "+key+" not in this cluster")
		return
	}
	sk := &socket{id: socketID(), app: app, ws: ws, presence: map[string]member{}}
	s.mu.Lock()
	s.sockets[sk.id] = sk
	s.mu.Unlock()
	defer s.drop(sk)

	var gc *pushercap.Conn
	if s.gate != nil {
		if gc, err = s.gate.Open(key); err != nil {
			_ = ws.Close(4001, err.Error())
			return
		}
		gc.Established(sk.id)
		defer gc.Close()
	}
	sk.send(encode("pusher:connection_established", "", jsonString(map[string]any{"socket_id": sk.id, "activity_timeout": 30})))
	ctx := r.Context()
	for {
		typ, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		if gc != nil {
			if ref := gc.Inspect(ctx, data); ref != nil {
				s.refusals.Add(1)
				sk.send(ref.Frame)
				_ = ws.Close(websocket.StatusCode(ref.CloseCode), ref.Reason)
				return
			}
		}
		s.handle(sk, data)
	}
}

type inbound struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

func (s *Server) handle(sk *socket, raw []byte) {
	var f inbound
	if json.Unmarshal(raw, &f) != nil {
		return
	}
	switch {
	case f.Event == "pusher:ping":
		sk.send(encode("pusher:pong", "", "{}"))
	case f.Event == "pusher:subscribe":
		var d struct {
			Channel     string `json:"channel"`
			Auth        string `json:"auth"`
			ChannelData string `json:"channel_data"`
		}
		if json.Unmarshal(f.Data, &d) != nil {
			return
		}
		s.subscribe(sk, d.Channel, d.Auth, d.ChannelData)
	case f.Event == "pusher:unsubscribe":
		var d struct {
			Channel string `json:"channel"`
		}
		if json.Unmarshal(f.Data, &d) == nil {
			s.unsubscribe(sk, d.Channel)
		}
	case strings.HasPrefix(f.Event, "client-"):
		if !strings.HasPrefix(f.Channel, "private-") && !strings.HasPrefix(f.Channel, "presence-") {
			return
		}
		s.mu.Lock()
		_, subscribed := s.channels[f.Channel][sk.id]
		s.mu.Unlock()
		if !subscribed {
			return
		}
		msg := encode(f.Event, f.Channel, string(f.Data))
		for _, other := range s.subscribers(f.Channel, sk.id) {
			other.send(msg)
		}
	}
}

// verify checks a channel authorization, as a real server does.
func verify(app App, auth, message string) bool {
	k, sig, ok := strings.Cut(auth, ":")
	if !ok || k != app.Key {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(app.Secret))
	mac.Write([]byte(message))
	return hmac.Equal(got, mac.Sum(nil))
}

func (s *Server) subscribe(sk *socket, channel, auth, channelData string) {
	var m member
	switch {
	case strings.HasPrefix(channel, "presence-"):
		if !verify(sk.app, auth, sk.id+":"+channel+":"+channelData) {
			sk.send(encode("pusher:error", "", jsonString(map[string]any{"code": nil, "message": "Invalid signature: presence authorization for " + channel})))
			return
		}
		var cd struct {
			UserID   json.RawMessage `json:"user_id"`
			UserInfo json.RawMessage `json:"user_info"`
		}
		if json.Unmarshal([]byte(channelData), &cd) != nil {
			return
		}
		m = member{UserID: strings.Trim(string(cd.UserID), `"`), UserInfo: cd.UserInfo}
	case strings.HasPrefix(channel, "private-"):
		if !verify(sk.app, auth, sk.id+":"+channel) {
			sk.send(encode("pusher:error", "", jsonString(map[string]any{"code": nil, "message": "Invalid signature: private authorization for " + channel})))
			return
		}
	}
	s.mu.Lock()
	subs := s.channels[channel]
	if subs == nil {
		subs = map[string]*socket{}
		s.channels[channel] = subs
	}
	subs[sk.id] = sk
	var others []*socket
	ids := []string{}
	hash := map[string]json.RawMessage{}
	present := false
	if m.UserID != "" {
		for id, o := range subs {
			o.mu.Lock()
			om, ok := o.presence[channel]
			o.mu.Unlock()
			if id == sk.id || !ok {
				continue
			}
			others = append(others, o)
			if om.UserID == m.UserID {
				present = true
			}
			if _, seen := hash[om.UserID]; !seen {
				ids = append(ids, om.UserID)
				hash[om.UserID] = om.UserInfo
			}
		}
		sk.mu.Lock()
		sk.presence[channel] = m
		sk.mu.Unlock()
		if _, seen := hash[m.UserID]; !seen {
			ids = append(ids, m.UserID)
			hash[m.UserID] = m.UserInfo
		}
	}
	s.mu.Unlock()
	data := "{}"
	if m.UserID != "" {
		data = jsonString(map[string]any{"presence": map[string]any{"ids": ids, "hash": hash, "count": len(ids)}})
	}
	sk.send(encode("pusher_internal:subscription_succeeded", channel, data))
	if m.UserID != "" && !present {
		added := encode("pusher_internal:member_added", channel, jsonString(m))
		for _, o := range others {
			o.send(added)
		}
	}
}

func (s *Server) unsubscribe(sk *socket, channel string) {
	s.mu.Lock()
	delete(s.channels[channel], sk.id)
	var others []*socket
	sk.mu.Lock()
	m, wasMember := sk.presence[channel]
	delete(sk.presence, channel)
	sk.mu.Unlock()
	stillPresent := false
	for _, o := range s.channels[channel] {
		others = append(others, o)
		o.mu.Lock()
		if om, ok := o.presence[channel]; ok && om.UserID == m.UserID {
			stillPresent = true
		}
		o.mu.Unlock()
	}
	if len(s.channels[channel]) == 0 {
		delete(s.channels, channel)
	}
	s.mu.Unlock()
	if wasMember && !stillPresent {
		removed := encode("pusher_internal:member_removed", channel, jsonString(map[string]string{"user_id": m.UserID}))
		for _, o := range others {
			o.send(removed)
		}
	}
}

func (s *Server) drop(sk *socket) {
	s.mu.Lock()
	var chans []string
	for ch, subs := range s.channels {
		if _, ok := subs[sk.id]; ok {
			chans = append(chans, ch)
		}
	}
	delete(s.sockets, sk.id)
	s.mu.Unlock()
	for _, ch := range chans {
		s.unsubscribe(sk, ch)
	}
	_ = sk.ws.CloseNow()
}

// Sign returns the authorization a Pusher app's auth endpoint would return for
// message.
func Sign(app App, message string) string {
	mac := hmac.New(sha256.New, []byte(app.Secret))
	mac.Write([]byte(message))
	return fmt.Sprintf("%s:%x", app.Key, mac.Sum(nil))
}
