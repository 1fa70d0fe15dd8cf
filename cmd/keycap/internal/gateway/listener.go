package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener bounds the connections a listener holds: at most total at
// once (Accept waits for one to close, as a full backlog would), and at most
// perIP from one peer address. The per-address bound is fair to the clients
// that share an address (a NAT, an office): a new connection from an address
// at its bound closes that address's longest-unused connection — idle
// between keep-alive requests, or never used (a client that connected and
// sent nothing: a slowloris holder) — and takes its place; only when every
// connection of the address is in use (a request in flight, a WebSocket) is
// the newcomer refused, closed at once. So one client holding the address's
// bound of idle connections cannot lock the others out. Peers that are
// trusted proxies are exempt from the per-address bound: every client behind
// them shares their address. The server's ConnState (connState) tells which
// connections are idle.
type limitListener struct {
	net.Listener
	total   chan struct{} // a token per open connection; nil: no bound
	perIP   int           // 0: no bound
	trusted func(netip.Addr) bool
	refused atomic.Int64 // connections closed at once for being over perIP
	evicted atomic.Int64 // idle connections closed to make room for a newcomer of their address
	open    atomic.Int64 // connections accepted and not closed (total also holds Accept's own token)

	mu    sync.Mutex
	byIP  map[netip.Addr]*ipConns
	done  chan struct{}
	close sync.Once
}

// ipConns is an address's connections, under limitListener.mu.
type ipConns struct {
	n int // connections counted against the address
	// The address's connections that a newcomer may close (never used, or
	// idle), in the order they became so: the head has been unused longest.
	head, tail *limitConn
}

func (a *ipConns) push(c *limitConn) {
	c.prev, c.next = a.tail, nil
	if a.tail != nil {
		a.tail.next = c
	} else {
		a.head = c
	}
	a.tail = c
	c.listed = true
}

func (a *ipConns) remove(c *limitConn) {
	if !c.listed {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		a.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		a.tail = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
}

func newLimitListener(ln net.Listener, total, perIP int, trusted func(netip.Addr) bool) *limitListener {
	l := &limitListener{Listener: ln, perIP: perIP, trusted: trusted, byIP: map[netip.Addr]*ipConns{}, done: make(chan struct{})}
	if total > 0 {
		l.total = make(chan struct{}, total)
	}
	return l
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		if l.total != nil {
			select {
			case l.total <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.releaseTotal()
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, ip: peerIP(c)}
		evict, ok := l.take(lc)
		if !ok {
			l.refused.Add(1)
			_ = c.Close()
			l.releaseTotal()
			continue
		}
		l.open.Add(1)
		if evict != nil {
			l.evicted.Add(1)
			_ = evict.Close()
		}
		return lc, nil
	}
}

func (l *limitListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limitListener) releaseTotal() {
	if l.total != nil {
		<-l.total
	}
}

// take counts c against its address. When the address is at its bound, c
// takes the place of the address's longest-unused connection, returned to
// be closed; with none unused, c is refused (ok false).
func (l *limitListener) take(c *limitConn) (evict *limitConn, ok bool) {
	if l.perIP <= 0 || !c.ip.IsValid() || (l.trusted != nil && l.trusted(c.ip)) {
		return nil, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.byIP[c.ip]
	if a == nil {
		a = &ipConns{}
		l.byIP[c.ip] = a
	}
	if a.n >= l.perIP {
		if evict = a.head; evict == nil {
			return nil, false
		}
		a.remove(evict)
		evict.counted = false // its place is c's: its Close gives nothing back
		a.n--
	}
	a.n++
	c.tracked, c.counted = true, true
	a.push(c) // never used yet
	return evict, true
}

// give uncounts a connection that closed.
func (l *limitListener) give(c *limitConn) {
	if !c.tracked {
		return
	}
	l.mu.Lock()
	if a := l.byIP[c.ip]; a != nil && c.counted {
		a.remove(c)
		c.counted = false
		if a.n--; a.n <= 0 {
			delete(l.byIP, c.ip)
		}
	}
	l.mu.Unlock()
}

// connState is the server's http.Server.ConnState: a connection that goes
// idle may be closed for a newcomer of its address, after those idle longer;
// one in use (a request in flight, a WebSocket) may not.
func (l *limitListener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok || !c.tracked || st == http.StateNew { // a new connection is listed by take
		return
	}
	l.mu.Lock()
	if a := l.byIP[c.ip]; a != nil && c.counted {
		a.remove(c)
		if st == http.StateIdle {
			a.push(c)
		}
	}
	l.mu.Unlock()
}

func peerIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// limitConn is a connection of a limitListener. Its list fields are the
// listener's, under its mu: no allocation per connection beyond this.
type limitConn struct {
	net.Conn
	l    *limitListener
	ip   netip.Addr
	once sync.Once

	tracked    bool // counted against its address when accepted (immutable after take)
	counted    bool // still counted (not closed, not evicted); under l.mu
	listed     bool // in its address's list of unused connections; under l.mu
	prev, next *limitConn
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.give(c)
		c.l.releaseTotal()
	})
	return err
}

// bodyTimeout bounds how a request body may arrive. No read waits more than
// d for the next bytes (nginx's client_body_timeout), and, after a first d of
// grace, the body must keep up an average of minRate bytes a second since it
// started (as Kestrel's MinRequestBodyDataRate does): a client that trickles
// a byte a second, which a between-reads timeout alone never cuts off, falls
// behind and is answered 408, its connection closed. The deadline is lifted
// once the body has been read, so a long response is not affected. A gRPC
// call's body is a stream of messages that may pause for as long as the
// call lasts (a bidirectional stream waits on its user): its deadline and
// the upstream bound it instead.
func bodyTimeout(d time.Duration, minRate int64, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 && !isGRPC(r) {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), d: d, rate: minRate, start: time.Now()}
		}
		next.ServeHTTP(w, r)
	})
}

// errBodyTimeout is a request body that stopped coming, or came too slowly.
var errBodyTimeout = errors.New("the client sent its request body too slowly (body_read_timeout, min_body_rate)")

type deadlineBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	d     time.Duration
	rate  int64 // bytes a second; 0: no minimum
	start time.Time
	n     int64 // bytes read
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	now := time.Now()
	dl := now.Add(b.d)
	if b.rate > 0 {
		// When the next byte is due at the minimum rate, after the grace.
		due := b.start.Add(b.d + time.Duration(float64(b.n+1)/float64(b.rate)*float64(time.Second)))
		if due.Before(dl) {
			dl = due
		}
	}
	_ = b.rc.SetReadDeadline(dl)
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if err != nil {
		b.done = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errBodyTimeout
		}
		if err == io.EOF {
			// Read in full: lift the deadline. After any other error the
			// deadline stays, so that the server, reading what is left of
			// the body before it reuses the connection, fails at once and
			// closes it instead of waiting for bytes that do not come.
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}
