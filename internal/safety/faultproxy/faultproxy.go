// Package faultproxy is a TCP proxy that injects network faults between
// clients and a server on loopback: latency on every chunk forwarded,
// connections reset, and partitions, during which nothing is forwarded and
// what was sent is held — and delivered when the partition heals, as TCP
// would retransmit it, even after the client gave up and closed. It is the
// fault injector of keycap's history checker (package safety).
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards the connections made to Addr to the upstream address.
type Proxy struct {
	ln       net.Listener
	upstream string
	latency  atomic.Int64 // ns added before each chunk is forwarded

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every link
	healed chan struct{}         // nil: not partitioned; closed when the partition heals
	closed bool
	wg     sync.WaitGroup
}

// New starts a proxy to upstream on a loopback port of its own.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency makes every chunk wait d before it is forwarded, each way.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Reset resets every connection (both ends, with RST): what was in flight
// is lost.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// Partition starts a partition: nothing is forwarded, and new connections
// are accepted but not connected upstream, until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed == nil {
		p.healed = make(chan struct{})
	}
}

// Heal ends the partition: what was held is forwarded.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Heal()
	p.Reset()
	p.wg.Wait()
	return err
}

// pass waits out a partition; false when the proxy closed meanwhile.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	h, closed := p.healed, p.closed
	p.mu.Unlock()
	if h != nil {
		<-h
	}
	return !closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.link(c)
	}
}

// link connects client c upstream, once no partition stands in the way,
// and forwards both ways until both are done.
func (p *Proxy) link(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if !p.pass() {
		return
	}
	u, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil || !p.track(u) {
		return
	}
	defer p.untrack(u)
	done := make(chan struct{}, 2)
	go p.forward(u, c, done)
	go p.forward(c, u, done)
	<-done
	<-done
}

// forward copies src to dst chunk by chunk, each after the latency and any
// partition; at src's end it closes dst's writing side, after what it read.
func (p *Proxy) forward(dst, src net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
	}
}
