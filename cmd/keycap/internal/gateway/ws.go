package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/pushercap"
)

// wsProxy relays Pusher-protocol WebSockets to the upstream, both ways and
// unchanged, except that it learns each connection's socket id from the
// upstream's pusher:connection_established and puts the client's frames
// through the pushercap gate.
type wsProxy struct {
	g          *Gateway
	gate       *pushercap.Gate
	upstream   *url.URL
	cip        httplimit.ClientIP
	maxMessage int64   // a client frame's largest size
	rate       float64 // client frames a second; 0: no limit
	burst      int
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
	"X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true, "Forwarded": true,
}

// upstreamMaxMessage bounds a frame from the upstream, which is trusted more
// than a client but not without bound.
const upstreamMaxMessage = 1 << 20

// ServeHTTP serves every request whose canonical path is, in any case,
// /app or under /app/. Only the exact form /app/{key}, with the key of a
// configured app, is a Pusher connection; everything else is refused, so
// that no spelling of the path reaches the upstream uncapped. The client's
// handshake is checked before the upstream is dialled.
func (p *wsProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.URL.Path, "/app/")
	if !ok || key == "" || strings.Contains(key, "/") {
		httplimit.WriteError(w, r, http.StatusNotFound, "Not Found")
		return
	}
	gc, err := p.gate.Open(key)
	if err != nil {
		p.g.log.Debug("keycap: websocket for an unknown app key refused", "route", "pusher", "key", key,
			"request_id", r.Header.Get("X-Request-Id"))
		httplimit.WriteError(w, r, http.StatusNotFound, "Not Found: unknown app key")
		return
	}
	if status, msg := checkHandshake(r); status != 0 {
		if status == http.StatusUpgradeRequired {
			w.Header().Set("Upgrade", "websocket")
			w.Header().Set("Sec-WebSocket-Version", "13")
		}
		if status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodGet)
		}
		httplimit.WriteError(w, r, status, msg)
		return
	}
	target := *p.upstream
	target.Path = strings.TrimSuffix(p.upstream.Path, "/") + "/app/" + key
	target.RawPath = ""
	target.RawQuery = r.URL.RawQuery
	hdr := http.Header{}
	for k, vs := range r.Header {
		if !hopHeaders[http.CanonicalHeaderKey(k)] {
			hdr[k] = vs
		}
	}
	if xff := p.cip.ForwardedFor(r); xff != "" {
		hdr.Set("X-Forwarded-For", xff)
	}
	hdr.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	hdr.Set("X-Forwarded-Proto", proto)
	dialCtx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, _, err := websocket.Dial(dialCtx, target.String(), &websocket.DialOptions{HTTPHeader: hdr})
	cancel()
	if err != nil {
		p.g.log.Warn("keycap: websocket upstream failed", "route", "pusher", "upstream", target.Redacted(),
			"request_id", r.Header.Get("X-Request-Id"), "error", err.Error())
		httplimit.WriteError(w, r, http.StatusBadGateway, "Bad Gateway")
		return
	}
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		_ = up.CloseNow()
		return
	}
	client.SetReadLimit(p.maxMessage)
	up.SetReadLimit(upstreamMaxMessage)
	p.g.ws.add(client)
	defer p.g.ws.remove(client)
	defer gc.Close() // leaves the cap, whichever side closed
	var lim *rate.Limiter
	if p.rate > 0 {
		lim = rate.NewLimiter(rate.Limit(p.rate), p.burst)
	}
	relay(client, up, gc, lim, func(ref *pushercap.Refusal) {
		p.g.log.Debug("keycap: websocket refused", "route", "pusher", "app", ref.App, "socket_id", ref.SocketID,
			"channel", ref.Channel, "code", ref.CloseCode, "reason", ref.Err.Error(),
			"request_id", r.Header.Get("X-Request-Id"))
	})
}

// checkHandshake validates a client's WebSocket opening handshake (RFC 6455
// §4.2.1) and returns the status and message of its refusal, or 0.
func checkHandshake(r *http.Request) (int, string) {
	switch {
	case r.Method != http.MethodGet:
		return http.StatusMethodNotAllowed, "Method Not Allowed"
	case !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket"):
		return http.StatusUpgradeRequired, "Upgrade Required: this is a WebSocket endpoint"
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return http.StatusUpgradeRequired, "Upgrade Required: WebSocket version 13"
	}
	key, err := base64.StdEncoding.DecodeString(r.Header.Get("Sec-WebSocket-Key"))
	if err != nil || len(key) != 16 {
		return http.StatusBadRequest, "Bad Request: invalid Sec-WebSocket-Key"
	}
	return 0, ""
}

// headerHasToken reports whether a comma-separated header holds token, in
// any case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// relay copies frames both ways until either side closes, then closes the
// other with the same code. The client's frames go through the gate (which
// may refuse the connection) and, with lim, at most at its rate: a client
// sending faster is read more slowly. A text frame that is not UTF-8 closes
// both sides (1007).
func relay(client, up *websocket.Conn, gc *pushercap.Conn, lim *rate.Limiter, refused func(*pushercap.Refusal)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closeClient, closeUp sync.Once
	shut := func(once *sync.Once, c *websocket.Conn, code websocket.StatusCode, reason string) {
		once.Do(func() { _ = c.Close(code, reason) })
	}
	invalid := func() {
		shut(&closeClient, client, websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
		shut(&closeUp, up, websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
	}
	done := make(chan struct{}, 2)
	// Upstream to client.
	go func() {
		defer func() { done <- struct{}{} }()
		established := false
		for {
			typ, data, err := up.Read(ctx)
			if err != nil {
				code, reason := closeOf(err)
				shut(&closeClient, client, code, reason)
				return
			}
			if typ == websocket.MessageText && !utf8.Valid(data) {
				invalid()
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
			if lim != nil {
				if err := lim.Wait(ctx); err != nil {
					return
				}
			}
			typ, data, err := client.Read(ctx)
			if err != nil {
				code, reason := closeOf(err)
				shut(&closeUp, up, code, reason)
				return
			}
			if typ == websocket.MessageText {
				if !utf8.Valid(data) {
					invalid()
					return
				}
				if ref := gc.Inspect(ctx, data); ref != nil {
					refused(ref)
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
