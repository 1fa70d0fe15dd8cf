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
// perIP from one peer address (a connection over it is closed at once).
// Peers that are trusted proxies are exempt from the per-address bound: every
// client behind them shares their address.
type limitListener struct {
	net.Listener
	total   chan struct{} // a token per open connection; nil: no bound
	perIP   int           // 0: no bound
	trusted func(netip.Addr) bool
	refused atomic.Int64 // connections closed for being over perIP
	open    atomic.Int64 // connections accepted and not closed (total also holds Accept's own token)

	mu    sync.Mutex
	byIP  map[netip.Addr]int
	done  chan struct{}
	close sync.Once
}

func newLimitListener(ln net.Listener, total, perIP int, trusted func(netip.Addr) bool) *limitListener {
	l := &limitListener{Listener: ln, perIP: perIP, trusted: trusted, byIP: map[netip.Addr]int{}, done: make(chan struct{})}
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
		ip := peerIP(c)
		if !l.take(ip) {
			l.refused.Add(1)
			_ = c.Close()
			l.releaseTotal()
			continue
		}
		l.open.Add(1)
		return &limitConn{Conn: c, l: l, ip: ip}, nil
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

// take counts a connection from ip, unless ip is at its bound.
func (l *limitListener) take(ip netip.Addr) bool {
	if l.perIP <= 0 || !ip.IsValid() || (l.trusted != nil && l.trusted(ip)) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byIP[ip] >= l.perIP {
		return false
	}
	l.byIP[ip]++
	return true
}

func (l *limitListener) give(ip netip.Addr) {
	if l.perIP <= 0 || !ip.IsValid() || (l.trusted != nil && l.trusted(ip)) {
		return
	}
	l.mu.Lock()
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	l.mu.Unlock()
}

func peerIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

type limitConn struct {
	net.Conn
	l    *limitListener
	ip   netip.Addr
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.give(c.ip)
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
// once the body has been read, so a long response is not affected.
func bodyTimeout(d time.Duration, minRate int64, next http.Handler) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
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
