// Command wsflood is the load of TestWebSocketFloodLeavesOthersServed, run
// as a process of its own, without the race detector, so that the test's
// own process measures the victim's requests and little else: an upstream
// (a WebSocket server that sends pusher:connection_established and discards
// what it reads; a plain "ok" to any other request) and the flooders.
//
// It prints "upstream URL", then reads "flood ADDR" from its standard input,
// floods ADDR from the address -from, prints "flooding" once every flooder
// has connected, and "result JSON" after -for more.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Result is what the flood saw.
type Result struct {
	// RefusedAfter is, for each connection refused for its 1 MiB frames,
	// the time from its first frame to the gateway closing it.
	RefusedAfter []time.Duration
	// SmallFrames is how many 60 KB frames were written.
	SmallFrames int64
	// Failures are dials or handshakes that failed, the first few.
	Failures []string
}

func main() {
	big := flag.Int("big", 50, "connections sending 1 MiB frames, reconnecting when refused")
	small := flag.Int("small", 50, "connections sending 60 KB frames as fast as they are read")
	dur := flag.Duration("for", 5*time.Second, "how long to flood")
	from := flag.String("from", "127.0.0.2", "the flooders' address")
	flag.Parse()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, http.HandlerFunc(upstream)) }()
	fmt.Printf("upstream http://%s\n", ln.Addr())

	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() {
		os.Exit(1)
	}
	addr, ok := strings.CutPrefix(sc.Text(), "flood ")
	if !ok {
		fmt.Fprintf(os.Stderr, "want flood ADDR, got %q\n", sc.Text())
		os.Exit(1)
	}
	res := flood(addr, &net.TCPAddr{IP: net.ParseIP(*from)}, *big, *small, *dur)
	b, _ := json.Marshal(res)
	fmt.Printf("result %s\n", b)
}

func upstream(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/app/") {
		_, _ = io.WriteString(w, "ok")
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(-1)
	_ = ws.Write(r.Context(), websocket.MessageText, []byte(`{"event":"pusher:connection_established","data":"{\"socket_id\":\"1.1\"}"}`))
	for {
		_, rd, err := ws.Reader(r.Context())
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return
		}
	}
}

func flood(addr string, from net.Addr, big, small int, dur time.Duration) *Result {
	bigFrame := maskedFrame(0x2, bytes.Repeat([]byte{'x'}, 1<<20))
	smallFrame := maskedFrame(0x1, []byte(`{"event":"client-flood","channel":"private-x","data":"`+strings.Repeat("x", 60_000)+`"}`))
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var (
		mu    sync.Mutex
		res   Result
		conns sync.Map // the open connections, closed at the end
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if len(res.Failures) < 5 {
			res.Failures = append(res.Failures, err.Error())
		}
		mu.Unlock()
	}
	var smallFrames atomic.Int64
	var connected sync.WaitGroup // every flooder's first connection
	connected.Add(big + small)
	for range big {
		wg.Go(func() {
			first := true
			for !stopped() {
				c, br, err := handshake(addr, from)
				if err != nil {
					fail(err)
					continue
				}
				if first {
					connected.Done()
					first = false
				}
				conns.Store(c, true)
				closed := make(chan time.Time, 1)
				go func() {
					// The gateway's close frame, then the end of the
					// connection (or the deadline, which the test fails).
					_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
					_, _ = io.Copy(io.Discard, br)
					closed <- time.Now()
				}()
				start := time.Now()
				for !stopped() {
					if _, err := c.Write(bigFrame); err != nil {
						break
					}
				}
				var end time.Time
				select {
				case end = <-closed:
				case <-stop:
				}
				c.Close()
				conns.Delete(c)
				if !end.IsZero() {
					mu.Lock()
					res.RefusedAfter = append(res.RefusedAfter, end.Sub(start))
					mu.Unlock()
				}
			}
		})
	}
	for range small {
		wg.Go(func() {
			c, br, err := handshake(addr, from)
			if err != nil {
				fail(err)
				connected.Done()
				return
			}
			connected.Done()
			conns.Store(c, true)
			go func() { _, _ = io.Copy(io.Discard, br) }()
			for !stopped() {
				if _, err := c.Write(smallFrame); err != nil {
					return
				}
				smallFrames.Add(1)
			}
		})
	}
	connected.Wait()
	fmt.Println("flooding")
	time.Sleep(dur)
	close(stop)
	conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
	wg.Wait()
	res.SmallFrames = smallFrames.Load()
	return &res
}

// maskedFrame is a client frame of payload, masked with the key 0 (which
// leaves the payload as it is: the frames cost the flooder no masking).
func maskedFrame(opcode byte, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteByte(0x80 | opcode) // FIN
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(0x80 | byte(n))
	case n < 1<<16:
		b.Write([]byte{0x80 | 126, byte(n >> 8), byte(n)})
	default:
		b.WriteByte(0x80 | 127)
		for i := 7; i >= 0; i-- {
			b.WriteByte(byte(uint64(n) >> (8 * i)))
		}
	}
	b.Write([]byte{0, 0, 0, 0}) // the masking key
	b.Write(payload)
	return b.Bytes()
}

// handshake opens a WebSocket to addr's /app/app-key from from, by hand,
// and returns the connection after the 101.
func handshake(addr string, from net.Addr) (net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: from}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "GET /app/app-key?protocol=7 HTTP/1.1\r\nHost: gateway\r\nConnection: Upgrade\r\n"+
		"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	br := bufio.NewReader(c)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, nil)
	}
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		err = fmt.Errorf("handshake answered %s", resp.Status)
	}
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, nil
}
