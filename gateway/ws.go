package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/keycap/keycap/pushercap"
)

// wsProxy relays Pusher-protocol WebSockets to the upstream, both ways and
// unchanged, except that it learns each connection's socket id from the
// upstream's pusher:connection_established and puts the client's frames
// through the pushercap gate.
type wsProxy struct {
	g        *Gateway
	gate     *pushercap.Gate
	upstream *url.URL
}

// wsTarget turns the Pusher upstream's URL into a WebSocket URL.
func wsTarget(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("pusher.upstream: %w", err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	return u, nil
}

// hopHeaders are not forwarded: the handshake is the proxy's own, each way.
var hopHeaders = map[string]bool{
	"Connection": true, "Upgrade": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Proxy-Connection": true, "Sec-Websocket-Key": true,
	"Sec-Websocket-Version": true, "Sec-Websocket-Extensions": true, "Sec-Websocket-Accept": true,
}

func (p *wsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/app/")
	gc, err := p.gate.Open(key)
	if err != nil {
		gc = nil // an app the gateway does not know: relayed uncapped; the upstream decides
		p.g.log.Debug("keycap: websocket for an unknown app key, relayed uncapped", "key", key)
	}
	target := *p.upstream
	target.Path = path.Join("/", p.upstream.Path, r.URL.Path)
	target.RawQuery = r.URL.RawQuery
	hdr := http.Header{}
	for k, vs := range r.Header {
		if !hopHeaders[k] {
			hdr[k] = vs
		}
	}
	hdr.Set("X-Forwarded-For", forwardedFor(r))
	dialCtx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, _, err := websocket.Dial(dialCtx, target.String(), &websocket.DialOptions{HTTPHeader: hdr})
	cancel()
	if err != nil {
		p.g.log.Warn("keycap: websocket upstream failed", "upstream", target.String(), "error", err)
		http.Error(w, "Bad Gateway", http.StatusBadGateway)
		return
	}
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		_ = up.CloseNow()
		return
	}
	client.SetReadLimit(1 << 20)
	up.SetReadLimit(1 << 20)
	p.g.ws.add(client)
	defer p.g.ws.remove(client)
	if gc != nil {
		defer gc.Close() // leaves the cap, whichever side closed
	}
	relay(client, up, gc)
}

// relay copies frames both ways until either side closes, then closes the
// other with the same code.
func relay(client, up *websocket.Conn, gc *pushercap.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closeClient, closeUp sync.Once
	shut := func(once *sync.Once, c *websocket.Conn, code websocket.StatusCode, reason string) {
		once.Do(func() { _ = c.Close(code, reason) })
	}
	done := make(chan struct{}, 2)
	// Upstream to client.
	go func() {
		defer func() { done <- struct{}{} }()
		established := gc == nil
		for {
			typ, data, err := up.Read(ctx)
			if err != nil {
				code, reason := closeOf(err)
				shut(&closeClient, client, code, reason)
				return
			}
			if !established {
				if id, ok := socketIDOf(data); ok {
					gc.Established(id)
					established = true
				}
			}
			if err := client.Write(ctx, typ, data); err != nil {
				shut(&closeUp, up, websocket.StatusGoingAway, "client gone")
				return
			}
		}
	}()
	// Client to upstream, through the gate.
	go func() {
		defer func() { done <- struct{}{} }()
		for {
			typ, data, err := client.Read(ctx)
			if err != nil {
				code, reason := closeOf(err)
				shut(&closeUp, up, code, reason)
				return
			}
			if gc != nil && typ == websocket.MessageText {
				if ref := gc.Inspect(ctx, data); ref != nil {
					_ = client.Write(ctx, websocket.MessageText, ref.Frame)
					shut(&closeClient, client, websocket.StatusCode(ref.CloseCode), ref.Reason)
					shut(&closeUp, up, websocket.StatusNormalClosure, "")
					return
				}
			}
			if err := up.Write(ctx, typ, data); err != nil {
				shut(&closeClient, client, websocket.StatusGoingAway, "upstream gone")
				return
			}
		}
	}()
	<-done
	cancel()
	<-done
	_ = client.CloseNow()
	_ = up.CloseNow()
}

// closeOf returns the close code and reason of a read error, to pass on to
// the other side: the peer's own when it sent one.
func closeOf(err error) (websocket.StatusCode, string) {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case websocket.StatusNoStatusRcvd, websocket.StatusAbnormalClosure, websocket.StatusTLSHandshake:
			return websocket.StatusGoingAway, ""
		}
		return ce.Code, ce.Reason
	}
	return websocket.StatusGoingAway, ""
}

// socketIDOf reads the socket id of a pusher:connection_established frame.
func socketIDOf(frame []byte) (string, bool) {
	var f struct {
		Event string `json:"event"`
		Data  string `json:"data"`
	}
	if json.Unmarshal(frame, &f) != nil || f.Event != "pusher:connection_established" {
		return "", false
	}
	var d struct {
		SocketID string `json:"socket_id"`
	}
	if json.Unmarshal([]byte(f.Data), &d) != nil || d.SocketID == "" {
		return "", false
	}
	return d.SocketID, true
}

// forwardedFor returns the X-Forwarded-For to send upstream: the incoming
// one with the client's address appended.
func forwardedFor(r *http.Request) string {
	host := r.RemoteAddr
	if i := strings.LastIndexByte(host, ':'); i > 0 {
		host = strings.Trim(host[:i], "[]")
	}
	if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
		return prior + ", " + host
	}
	return host
}

// wsConns tracks the open client WebSockets, to close them on shutdown.
type wsConns struct {
	mu    sync.Mutex
	conns map[*websocket.Conn]struct{}
}

func (w *wsConns) add(c *websocket.Conn) {
	w.mu.Lock()
	if w.conns == nil {
		w.conns = map[*websocket.Conn]struct{}{}
	}
	w.conns[c] = struct{}{}
	w.mu.Unlock()
}

func (w *wsConns) remove(c *websocket.Conn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// closeAll closes every open WebSocket with 1001, going away: pusher-js
// reconnects, to another gateway.
func (w *wsConns) closeAll() {
	w.mu.Lock()
	conns := make([]*websocket.Conn, 0, len(w.conns))
	for c := range w.conns {
		conns = append(conns, c)
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { _ = c.Close(websocket.StatusGoingAway, "gateway shutting down") })
	}
	wg.Wait()
}
