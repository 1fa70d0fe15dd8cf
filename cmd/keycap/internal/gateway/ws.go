package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
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
		writeError(w, r, http.StatusNotFound, "Not Found")
		return
	}
	gc, err := p.gate.Open(key)
	if err != nil {
		p.g.log.Debug("keycap: websocket for an unknown app key refused", "route", "pusher", "key", key,
			"request_id", r.Header.Get("X-Request-Id"))
		writeError(w, r, http.StatusNotFound, "Not Found: unknown app key")
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
		writeError(w, r, status, msg)
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
		writeError(w, r, http.StatusBadGateway, "Bad Gateway")
		return
	}
	hw := &wsHijacker{ResponseWriter: w}
	client, err := websocket.Accept(hw, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil || hw.conn == nil {
		if err == nil {
			_ = client.CloseNow()
		}
		_ = up.CloseNow()
		return
	}
	cc := &clientConn{ws: client, raw: hw.conn}
	client.SetReadLimit(p.maxMessage)
	up.SetReadLimit(upstreamMaxMessage)
	p.g.ws.add(cc)
	defer p.g.ws.remove(cc)
	defer gc.Close() // leaves the cap, whichever side closed
	var lim *rate.Limiter
	if p.rate > 0 {
		lim = rate.NewLimiter(rate.Limit(p.rate), p.burst)
	}
	relay(cc, up, gc, lim, func(ref *pushercap.Refusal) {
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

// messageUnit is the size of a frame that counts as one message of
// messages_per_second: a larger frame counts once per messageUnit begun (up
// to the burst), so that the limit bounds the bytes a client has the gateway
// read, check (pushercap parses a text frame's JSON until the connection has
// a user) and relay, not only its frames. Pusher's own client events are at
// most 10 KB.
const messageUnit = 4 << 10

// frameCost is what a frame of n bytes costs of a limiter of burst.
func frameCost(n, burst int) int {
	return min(max(1, (n+messageUnit-1)/messageUnit), max(1, burst))
}

// relay copies frames both ways until either side closes, then closes the
// other with the same code. The client's frames go through the gate (which
// may refuse the connection) and, with lim, at most at its rate, a frame
// counting once per messageUnit: the next frame is not read before the
// limiter allows it, so a client sending faster is read more slowly, and
// what it sends meanwhile waits in its connection's buffers, costing the
// gateway nothing. A text frame that is not UTF-8 closes both sides (1007).
// The client is closed first, reading no more than a close frame's worth of
// it (clientConn.close): a refused client is not read on while the upstream
// is told.
func relay(client *clientConn, up *websocket.Conn, gc *pushercap.Conn, lim *rate.Limiter, refused func(*pushercap.Refusal)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var closeUp sync.Once
	shutUp := func(code websocket.StatusCode, reason string) {
		closeUp.Do(func() { _ = up.Close(code, reason) })
	}
	invalid := func() {
		client.close(websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
		shutUp(websocket.StatusInvalidFramePayloadData, "invalid UTF-8")
	}
	done := make(chan struct{}, 2)
	// Upstream to client.
	go func() {
		defer func() { done <- struct{}{} }()
		established := false
		for {
			typ, data, err := up.Read(ctx)
			if err != nil {
				client.close(closeOf(err))
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
			if err := client.ws.Write(ctx, typ, data); err != nil {
				client.close(websocket.StatusGoingAway, "")
				shutUp(websocket.StatusGoingAway, "client gone")
				return
			}
		}
	}()
	// Client to upstream, through the gate.
	go func() {
		defer func() { done <- struct{}{} }()
		cost := 1 // of the frame read last, paid before the next is read
		for {
			if lim != nil {
				if err := lim.WaitN(ctx, cost); err != nil {
					return
				}
			}
			typ, buf, err := readMessage(ctx, client.ws)
			if err != nil {
				putBuffer(buf)
				// A client's close frame the library has answered; over
				// max_message it has sent 1009, in the middle of the
				// client's frame, so that no close frame can come before
				// the rest of it: read nothing more. Either way the client
				// is done with: close it before telling the upstream.
				code, reason := closeOf(err)
				budget := int64(closeReadBudget)
				if errors.Is(err, websocket.ErrMessageTooBig) {
					budget = 0
				}
				client.closeWith(budget, code, reason)
				shutUp(code, reason)
				return
			}
			data := buf.Bytes()
			if typ == websocket.MessageText {
				if !utf8.Valid(data) {
					putBuffer(buf)
					invalid()
					return
				}
				if ref := gc.Inspect(ctx, data); ref != nil {
					putBuffer(buf)
					refused(ref)
					_ = client.ws.Write(ctx, websocket.MessageText, ref.Frame)
					client.close(websocket.StatusCode(ref.CloseCode), ref.Reason)
					shutUp(websocket.StatusNormalClosure, "")
					return
				}
			}
			err = up.Write(ctx, typ, data)
			n := len(data)
			putBuffer(buf)
			if err != nil {
				client.close(websocket.StatusGoingAway, "upstream gone")
				return
			}
			if lim != nil {
				cost = frameCost(n, lim.Burst())
			}
		}
	}()
	<-done
	cancel()
	<-done
	_ = client.ws.CloseNow()
	_ = up.CloseNow()
}

// buffers hold client messages while they are relayed: a buffer is taken
// once a message has begun, not while a connection waits for one, so that
// an idle WebSocket holds none, and a message costs no allocation once the
// pool holds a buffer of its size.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readMessage reads c's next message into a buffer of the pool; put it
// back with putBuffer once the message is relayed (the buffer is returned
// with an error too).
func readMessage(ctx context.Context, c *websocket.Conn) (websocket.MessageType, *bytes.Buffer, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return typ, buf, err
}

func putBuffer(b *bytes.Buffer) {
	if b != nil {
		buffers.Put(b)
	}
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
	conns map[*clientConn]struct{}
}

func (w *wsConns) add(c *clientConn) {
	w.mu.Lock()
	if w.conns == nil {
		w.conns = map[*clientConn]struct{}{}
	}
	w.conns[c] = struct{}{}
	w.mu.Unlock()
}

func (w *wsConns) remove(c *clientConn) {
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}

// closeAll closes every open WebSocket with 1001, going away: pusher-js
// reconnects, to another gateway.
func (w *wsConns) closeAll() {
	w.mu.Lock()
	conns := make([]*clientConn, 0, len(w.conns))
	for c := range w.conns {
		conns = append(conns, c)
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { c.close(websocket.StatusGoingAway, "gateway shutting down") })
	}
	wg.Wait()
}

// clientConn is a client's WebSocket and the connection under it.
type clientConn struct {
	ws   *websocket.Conn
	raw  *stoppableConn
	once sync.Once
}

// Bounds of a close that the gateway starts. The library's Close waits 5 s
// for the peer's close frame, reading and discarding whatever comes before
// it: a client flooding frames would be read at full speed for those 5 s,
// after being refused. The gateway reads at most closeReadBudget bytes more,
// within closeGrace, enough for the close frame of a client that answers it,
// and then closes the connection.
const (
	closeGrace      = time.Second
	closeReadBudget = 4 << 10
)

// close sends the client a close frame with code (unless one was sent
// already, as for 1009) and closes the connection, reading no more than a
// close frame's worth of it, within closeGrace. Only the first call closes;
// the others return at once.
func (c *clientConn) close(code websocket.StatusCode, reason string) {
	c.closeWith(closeReadBudget, code, reason)
}

// closeWith is close reading at most budget bytes more.
func (c *clientConn) closeWith(budget int64, code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		c.raw.stop(closeGrace, budget)
		_ = c.ws.Close(code, reason)
		_ = c.ws.CloseNow() // when Close failed before closing the connection
	})
}

// wsHijacker hands websocket.Accept the client's connection wrapped in a
// stoppableConn.
type wsHijacker struct {
	http.ResponseWriter
	conn *stoppableConn
}

func (w *wsHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &stoppableConn{Conn: c}
	return w.conn, brw, nil
}

func (w *wsHijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// stoppableConn is a connection whose reading can be bounded once its
// WebSocket is being closed.
type stoppableConn struct {
	net.Conn
	stopped atomic.Bool
	left    atomic.Int64 // bytes it may still read, once stopped
}

// errReadStopped is a read past a closing connection's budget.
var errReadStopped = errors.New("websocket closing: read no further")

func (c *stoppableConn) Read(p []byte) (int, error) {
	if !c.stopped.Load() {
		return c.Conn.Read(p)
	}
	left := c.left.Load()
	if left <= 0 {
		return 0, errReadStopped
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.Conn.Read(p)
	c.left.Add(-int64(n))
	return n, err
}

// stop bounds what is read and written from now on: budget bytes read,
// and neither past grace (a read in progress ends then too).
func (c *stoppableConn) stop(grace time.Duration, budget int64) {
	c.left.Store(budget)
	c.stopped.Store(true)
	dl := time.Now().Add(grace)
	_ = c.Conn.SetReadDeadline(dl)
	_ = c.Conn.SetWriteDeadline(dl)
}
