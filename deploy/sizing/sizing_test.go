package sizing_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/internal/pusherserver"
	"github.com/keycap/keycap/internal/testenv"
)

// The Pusher app the gateway caps and the upstream serves.
var app = pusherserver.App{ID: "1", Key: "app-key", Secret: "app-secret"}

const (
	users       = 1000             // the X-User values the load spreads over
	warmUp      = 2 * time.Second  // load before the measured window
	loadFor     = 10 * time.Second // the measured window of a rate
	idleFor     = 5 * time.Second  // the measured window of N idle connections
	baselineFor = 2 * time.Second  // the idle window of a gateway just started
	dialers     = 64               // connections opened at a time
	quietWait   = 10 * time.Second // the longest wait for other programs to leave the cores
)

// BenchmarkSizing measures what a keycap gateway needs: run it with
//
//	go test ./deploy/sizing -run '^$' -bench Sizing -benchtime 1x -timeout 20m
//
// from the repository's root (see the package's documentation). Every
// sub-benchmark starts a gateway process of its own, built from the working
// tree, with a route /api/ capped at 100 requests in flight per X-User
// header and a Pusher app capped at 5 connections per user, listeners
// without connection bounds (server.max_connections and
// max_connections_per_ip 0, so that one address can open thousands), and
// reads the gateway's CPU time and resident memory (VmRSS, VmHWM) from /proc.
// The load generator, the upstreams and Redis share the machine's cores with
// it: bench-cores and redis-cores say how much they took, other-cores how
// much the rest of the machine's programs did, and steal-cores what the
// hypervisor took from this virtual machine. Before an HTTP load, it waits
// (up to 10 s) for other programs to leave the cores, and logs it.
//
//   - http/{memstore,redis}/rate=R, R 1,000, 2,000 and 4,000: after 2 s
//     idle (RSS-idle-MiB, idle-mcores) and 2 s of warm-up, an open-loop load
//     of R requests/s for 10 s — each request started on its schedule
//     whatever the others are doing, from keep-alive connections, spread
//     over 1,000 users — against an upstream that answers at once. A request
//     due while 512 are in flight is not sent (shed), so that an overloaded
//     run ends in time instead of drowning in timed-out requests. It reports
//     the rate achieved (req/s: answers 200 per second; failed: the others),
//     the latency from each request's scheduled start (p50-ms, p99-ms;
//     lag-ms, the worst lateness of a start, shows a load generator starved
//     of CPU), the gateway's cores and cores per 1,000 requests/s, its RSS in
//     the window's second half (median of samples every 250 ms), its peak,
//     and the RSS above the idle baseline per 1,000 requests/s. The log says
//     whether the machine sustained the rate (97% of it answered 200, none
//     shed or failed, p99 under 100 ms); the figures of a rate it did not
//     sustain are an overloaded gateway's. Redis is a redis-server of its
//     own.
//   - idle-http/memstore: N keep-alive HTTP/1.1 connections, each having
//     made one request, left idle for 5 s, for growing N (1,000, 4,000 and
//     up to 16,000, as the open-files limit allows): B/idle-conn is the
//     slope of the gateway's RSS between the smallest and the largest N.
//   - websocket/memstore: N Pusher WebSockets (1,000, 3,000, and as many as
//     the open-files limit allows, about 9,000 at 20,000: each WebSocket
//     holds two descriptors in the gateway, the client's and the upstream's,
//     and two in this process), connected (pusher:connection_established)
//     and left idle for 5 s. B/ws is the slope of RSS between the smallest
//     and the largest N; MiB/10k-ws and RSS-MiB@10k-ws extrapolate it to
//     10,000 WebSockets, which the open-files limit does not allow here;
//     idle-mcores/10k-ws the idle CPU above the gateway's own, likewise.
//   - websocket-presence/redis: the same with each WebSocket subscribed to
//     a presence channel of its own as a user (two WebSockets per user), so
//     that each counts against its user's cap, on Redis; the Pusher
//     heartbeat is 5 s (the default is 30 s) so that each idle window holds
//     one renewal of every connection: its idle CPU is an upper bound, about
//     six renewals' worth of what the default costs.
func BenchmarkSizing(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads the gateway's CPU time and memory from Linux's /proc")
	}
	bin := keycapBinary(b)
	for _, store := range []string{"memstore", "redis"} {
		for _, rate := range []int{1000, 2000, 4000} {
			b.Run(fmt.Sprintf("http/%s/rate=%d", store, rate), func(b *testing.B) { benchHTTP(b, bin, store, rate) })
		}
	}
	b.Run("idle-http/memstore", func(b *testing.B) { benchIdleHTTP(b, bin) })
	b.Run("websocket/memstore", func(b *testing.B) { benchWebSockets(b, bin, "memstore", false) })
	b.Run("websocket-presence/redis", func(b *testing.B) { benchWebSockets(b, bin, "redis", true) })
}

// gatewayConfig is the gateway's configuration: upstream for HTTP, the store
// section, and lines added to the pusher section.
func gatewayConfig(upstream, store, pusher string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
upstream: %s
shutdown_timeout: 5s
log: {level: info, format: json}
server: {max_connections: 0, max_connections_per_ip: 0, idle_timeout: 10m}
%sroutes:
  - name: api
    path: /api/
    limits: [{max: 100, key: "header:X-User"}]
pusher:
%s  default_cap: 5
  apps: [{id: %q, key: %q, secret: %q}]
`, upstream, store, pusher, app.ID, app.Key, app.Secret)
}

// storeConfig returns the store section for store (memstore or redis) and,
// for redis, the pid of the redis-server it starts for b.
func storeConfig(b *testing.B, store string) (string, int) {
	b.Helper()
	if store == "memstore" {
		return "store: {type: memory}\n", 0
	}
	p := testenv.StartRedis(b)
	c := redis.NewClient(p.Options())
	b.Cleanup(func() { _ = c.Close() })
	prefix := testenv.Prefix(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	pid := 0
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		b.Fatalf("no process_id in INFO server: %q", info)
	}
	return fmt.Sprintf("store: {type: redis, url: %q, prefix: %q}\n", "redis://"+p.Addr, prefix), pid
}

// fdLimit is this process's open-files limit, which the gateway inherits.
func fdLimit(b *testing.B) int {
	b.Helper()
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		b.Fatal(err)
	}
	return int(l.Cur)
}

// upstreamHTTP is an application that answers at once with a small body;
// conns counts the connections it accepts.
func upstreamHTTP(b *testing.B, conns *atomic.Int64) *httptest.Server {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	b.Cleanup(s.Close)
	return s
}

func benchHTTP(b *testing.B, bin, store string, rate int) {
	var upConns, dials atomic.Int64
	up := upstreamHTTP(b, &upConns)
	st, redisPID := storeConfig(b, store)
	g := startGateway(b, bin, gatewayConfig(up.URL, st, ""))
	waitQuiet(b, quietWait, g.pid, os.Getpid())
	base := g.idle(b, 0, baselineFor)
	b.Logf("idle:     %v", base)

	dialer := &net.Dialer{Timeout: 5 * time.Second}
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return dialer.DialContext(ctx, network, addr)
			},
			MaxIdleConns:        maxInFlight,
			MaxIdleConnsPerHost: maxInFlight,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
	b.Cleanup(client.CloseIdleConnections)
	url := "http://" + g.proxy + "/api/report"
	pids := []int{g.pid, os.Getpid()}
	if redisPID != 0 {
		pids = append(pids, redisPID)
	}
	waitQuiet(b, quietWait, pids...)
	if w := runLoad(client, url, rate, warmUp); w.ok == 0 {
		b.Fatalf("warm-up: no request answered 200 (%s):\n%s", w.firstErr, g.logTail())
	}
	g.alive(b)

	// RSS every 250 ms while the load runs.
	var (
		samples []int64
		stop    = make(chan struct{})
		sampled = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if s, err := readProc(g.pid); err == nil {
					samples = append(samples, s.rss)
				}
			}
		}
	}()
	dials0, upConns0 := dials.Load(), upConns.Load()
	gw0, self0, m0 := mustProc(b, g.pid), mustProc(b, os.Getpid()), mustMachine(b)
	var redis0 procStat
	if redisPID != 0 {
		redis0 = mustProc(b, redisPID)
	}
	r := runLoad(client, url, rate, loadFor)
	gw1, self1, m1 := mustProc(b, g.pid), mustProc(b, os.Getpid()), mustMachine(b)
	var redisCPU time.Duration
	if redisPID != 0 {
		redisCPU = mustProc(b, redisPID).cpu - redis0.cpu
	}
	perSecond := func(d time.Duration) float64 { return d.Seconds() / r.wall.Seconds() }
	redisCores := perSecond(redisCPU)
	// The machine's busy CPU that is neither the gateway, nor this process,
	// nor its redis-server: other programs competing for the cores.
	otherCores := perSecond((m1.busy - m0.busy) - (gw1.cpu - gw0.cpu) - (self1.cpu - self0.cpu) - redisCPU)
	stealCores := perSecond(m1.steal - m0.steal)
	close(stop)
	<-sampled
	g.alive(b)
	if len(samples) < 4 {
		b.Fatalf("%d RSS samples", len(samples))
	}
	// The peak: VmHWM, or a sample above it (Linux updates VmHWM lazily).
	peak := max(gw1.hwm, slices.Max(samples))
	steady := samples[len(samples)/2:]
	slices.Sort(steady)
	rss := steady[len(steady)/2]

	achieved := float64(r.ok) / r.wall.Seconds()
	cores := perSecond(gw1.cpu - gw0.cpu)
	benchCores := perSecond(self1.cpu - self0.cpu)
	p50, p99 := r.percentile(0.50), r.percentile(0.99)
	b.Logf("load:     target %d req/s for %v: %d due, %d shed (%d in flight already), %d answered 200, %d failed (%s); %.0f req/s achieved over %.2fs; latency p50 %v p99 %v max %v; worst start lag %v; %d client connections opened (%d in all, warm-up included), %d gateway-to-upstream connections",
		rate, loadFor, r.planned, r.shed, maxInFlight, r.ok, r.failed, r.firstErr, achieved, r.wall.Seconds(), p50, p99, r.percentile(1), r.lag, dials.Load()-dials0, dials.Load(), upConns.Load()-upConns0)
	b.Logf("gateway:  %.3f cores (%.3f per 1,000 req/s; %.0f%% of it system time); RSS %.1f MiB steady (idle %.1f MiB), peak %.1f MiB; load generator and upstream %.3f cores, redis-server %.3f cores, the rest of the machine %.3f cores, stolen %.3f cores",
		cores, cores/(achieved/1000), 100*(gw1.sys-gw0.sys).Seconds()/(gw1.cpu-gw0.cpu).Seconds(), mib(rss), mib(base.rss), mib(peak), benchCores, redisCores, otherCores, stealCores)
	if sustained := achieved >= 0.97*float64(rate) && r.failed == 0 && r.shed == 0 && p99 < 100*time.Millisecond; sustained {
		b.Logf("verdict:  the machine sustained %d req/s", rate)
	} else {
		b.Logf("verdict:  the machine did NOT sustain %d req/s (achieved %.0f, %d shed, %d failed, p99 %v): the gateway, the load generator and the upstream share %d cores; its figures are those of an overloaded gateway",
			rate, achieved, r.shed, r.failed, p99, runtime.NumCPU())
	}

	b.ReportMetric(0, "ns/op") // one run of seconds: not a figure
	b.ReportMetric(float64(rate), "target-req/s")
	b.ReportMetric(achieved, "req/s")
	b.ReportMetric(float64(r.failed), "failed")
	b.ReportMetric(float64(r.shed), "shed")
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(ms(r.lag), "lag-ms")
	b.ReportMetric(cores, "cores")
	b.ReportMetric(cores/(achieved/1000), "cores/1k-req/s")
	b.ReportMetric(1000*base.cores, "idle-mcores")
	b.ReportMetric(mib(base.rss), "RSS-idle-MiB")
	b.ReportMetric(mib(rss), "RSS-MiB")
	b.ReportMetric(mib(peak), "HWM-MiB")
	b.ReportMetric(mib(rss-base.rss)/(achieved/1000), "RSS-MiB/1k-req/s")
	b.ReportMetric(benchCores, "bench-cores")
	if redisPID != 0 {
		b.ReportMetric(redisCores, "redis-cores")
	}
	b.ReportMetric(otherCores, "other-cores")
	b.ReportMetric(stealCores, "steal-cores")
}

func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// loadResult is an open-loop load's outcome.
type loadResult struct {
	planned, ok, failed int
	shed                int             // not sent: due while maxInFlight were in flight
	wall                time.Duration   // from the first scheduled start to the last answer
	lat                 []time.Duration // the 200s' latencies from their scheduled start, sorted
	lag                 time.Duration   // the worst lateness of a start
	firstErr            string
}

// percentile returns the latency at q (0 to 1) of the requests answered 200.
func (r loadResult) percentile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))]
}

// maxInFlight bounds an overloaded run: past it, a request that is due is
// shed (not sent, counted) rather than piling up until the machine spends
// its time on thousands of timed-out requests and new connections.
const maxInFlight = 512

// runLoad starts rate requests a second for d at url, each at its scheduled
// time (i/rate after the start) whatever the others are doing — an open
// loop: a slow gateway gets more requests in flight, not fewer requests,
// up to maxInFlight — and waits for every answer (each bounded by the
// client's timeout). Requests are started by a 1 ms ticker: those whose
// time has come.
func runLoad(client *http.Client, url string, rate int, d time.Duration) loadResult {
	n := rate * int(d/time.Second)
	const shed = -2 * time.Nanosecond
	lat := make([]time.Duration, n)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr string
		lag      time.Duration
		inFlight atomic.Int64
	)
	fail := func(i int, msg string) {
		lat[i] = -1
		errOnce.Do(func() { firstErr = msg })
	}
	hdr := make([]string, users)
	for u := range hdr {
		hdr[u] = "u" + strconv.Itoa(u)
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	for next := 0; next < n; {
		<-tick.C
		due := min(n, int(time.Since(start)*time.Duration(rate)/time.Second)+1)
		for ; next < due; next++ {
			at := start.Add(time.Duration(next) * time.Second / time.Duration(rate))
			lag = max(lag, time.Since(at))
			if inFlight.Load() >= maxInFlight {
				lat[next] = shed
				continue
			}
			inFlight.Add(1)
			wg.Add(1)
			go func(i int, at time.Time) {
				defer wg.Done()
				defer inFlight.Add(-1)
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-User", hdr[i%users])
				resp, err := client.Do(req)
				if err != nil {
					fail(i, err.Error())
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				switch {
				case err != nil:
					fail(i, err.Error())
				case resp.StatusCode != http.StatusOK:
					fail(i, resp.Status)
				default:
					lat[i] = time.Since(at)
				}
			}(next, at)
		}
	}
	tick.Stop()
	wg.Wait()
	r := loadResult{planned: n, wall: time.Since(start), lag: lag, firstErr: firstErr}
	for _, l := range lat {
		switch {
		case l == shed:
			r.shed++
		case l < 0:
			r.failed++
		default:
			r.ok++
			r.lat = append(r.lat, l)
		}
	}
	slices.Sort(r.lat)
	return r
}

// steps returns 1,000, mid and the largest multiple of 1,000 up to most
// that the open-files limit allows when each connection holds perConn
// descriptors in each process, keeping reserve for the rest.
func steps(b *testing.B, mid, most, perConn, reserve int) []int {
	b.Helper()
	top := min(most, (fdLimit(b)-reserve)/perConn/1000*1000)
	if top <= mid {
		b.Fatalf("an open-files limit of %d allows %d connections: too few", fdLimit(b), top)
	}
	return []int{1000, mid, top}
}

// report logs the idle samples and reports the slope of RSS per connection
// between the first and the last (and between each pair), and its
// extrapolation to per connections.
func report(b *testing.B, unit string, base idleSample, s []idleSample, per int) {
	b.Helper()
	b.Logf("idle:     %v", base)
	for _, x := range s {
		b.Logf("open:     %v; opened %d in %v", x, x.n-x.prev, x.opened.Round(time.Millisecond))
	}
	slope := func(a, z idleSample) float64 { return float64(z.rss-a.rss) / float64(z.n-a.n) }
	first, last := s[0], s[len(s)-1]
	perConn := slope(first, last)
	runtimeSlope := (last.heap + last.stack - first.heap - first.stack) / float64(last.n-first.n)
	var pairs []string
	for i := 1; i < len(s); i++ {
		pairs = append(pairs, fmt.Sprintf("%d→%d %.0f B", s[i-1].n, s[i].n, slope(s[i-1], s[i])))
	}
	b.Logf("slope:    %d→%d: %.0f B RSS per connection (%s; Go heap in use + stacks: %.0f B)",
		first.n, last.n, perConn, strings.Join(pairs, ", "), runtimeSlope)
	atPer := float64(last.rss) + perConn*float64(per-last.n)
	idleCPU := (last.cores - base.cores) / float64(last.n) * float64(per)
	if per > last.n {
		b.Logf("per %d: %.1f MiB above an idle gateway, %.1f MiB RSS in all, %.1f mcores idle: extrapolated from the slope, as the open-files limit (%d) allows only %d here",
			per, perConn*float64(per)/(1<<20), atPer/(1<<20), 1000*idleCPU, fdLimit(b), last.n)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(perConn, "B/"+unit)
	b.ReportMetric(runtimeSlope, "heap+stack-B/"+unit)
	for i := 1; i < len(s); i++ {
		b.ReportMetric(slope(s[i-1], s[i]), fmt.Sprintf("B/%s-%dk-%dk", unit, s[i-1].n/1000, s[i].n/1000))
	}
	b.ReportMetric(mib(base.rss), "RSS-idle-MiB")
	for _, x := range s {
		b.ReportMetric(mib(x.rss), fmt.Sprintf("RSS-MiB@%dk", x.n/1000))
	}
	b.ReportMetric(1000*base.cores, "idle-mcores")
	b.ReportMetric(1000*last.cores, fmt.Sprintf("idle-mcores@%dk", last.n/1000))
	b.ReportMetric(perConn*float64(per)/(1<<20), fmt.Sprintf("MiB/%dk-%s", per/1000, unit))
	b.ReportMetric(atPer/(1<<20), fmt.Sprintf("RSS-MiB@%dk-%s", per/1000, unit))
	b.ReportMetric(1000*idleCPU, fmt.Sprintf("idle-mcores/%dk-%s", per/1000, unit))
}

// openParallel opens connections from to to-1 with open, dialers at a time,
// and fails b on the first error; it returns how long it took.
func openParallel(b *testing.B, from, to int, open func(i int) error) time.Duration {
	b.Helper()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	next.Store(int64(from))
	start := time.Now()
	for range dialers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := open(i); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("connection %d: %w", i, err) })
					next.Store(int64(to)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
	return time.Since(start)
}

func benchIdleHTTP(b *testing.B, bin string) {
	up := upstreamHTTP(b, new(atomic.Int64))
	st, _ := storeConfig(b, "memstore")
	g := startGateway(b, bin, gatewayConfig(up.URL, st, ""))
	base := g.idle(b, 0, baselineFor)
	// One descriptor per connection in each process.
	ns := steps(b, 4000, 16000, 1, 2000)
	conns := make([]net.Conn, ns[len(ns)-1])
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	var samples []idleSample
	have := 0
	for _, n := range ns {
		opened := openParallel(b, have, n, func(i int) error {
			c, err := net.DialTimeout("tcp", g.proxy, 10*time.Second)
			if err != nil {
				return err
			}
			conns[i] = c
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(c, "GET /api/idle HTTP/1.1\r\nHost: %s\r\nX-User: u%d\r\n\r\n", g.proxy, i%users); err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK || resp.Close {
				return fmt.Errorf("%s, close %v", resp.Status, resp.Close)
			}
			return c.SetDeadline(time.Time{})
		})
		s := g.idle(b, n, idleFor)
		s.prev, s.opened = have, opened
		have = n
		if s.conns < float64(n) {
			b.Fatalf("the gateway holds %.0f connections, not %d", s.conns, n)
		}
		samples = append(samples, s)
	}
	report(b, "idle-conn", base, samples, 10000)
}

// wsClient is a Pusher client: a WebSocket whose frames a goroutine reads.
type wsClient struct {
	ws   *websocket.Conn
	done chan struct{}
}

// dialPusher connects to the gateway's Pusher app as pusher-js does and
// waits for pusher:connection_established; with presence, it then joins
// presence-s{i} as user u{i/2} and waits for the subscription to succeed.
func dialPusher(proxy string, i int, presence bool, frames *atomic.Int64) (*wsClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+proxy+"/app/"+app.Key+"?protocol=7&client=js&version=8.4.0&flash=false", nil)
	if err != nil {
		return nil, err
	}
	read := func(want string) (json.RawMessage, error) {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		var ev struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(data, &ev); err != nil || ev.Event != want {
			return nil, fmt.Errorf("want %s, got %q", want, data)
		}
		return ev.Data, nil
	}
	data, err := read("pusher:connection_established")
	if err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	if presence {
		var est struct {
			SocketID string `json:"socket_id"`
		}
		var s string
		_ = json.Unmarshal(data, &s)
		if err := json.Unmarshal([]byte(s), &est); err != nil || est.SocketID == "" {
			_ = ws.CloseNow()
			return nil, fmt.Errorf("no socket id in %s", data)
		}
		channel, cd := fmt.Sprintf("presence-s%d", i), fmt.Sprintf(`{"user_id":"u%d"}`, i/2)
		f, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
			"channel": channel, "channel_data": cd,
			"auth": pusherserver.Sign(app, est.SocketID+":"+channel+":"+cd),
		}})
		if err := ws.Write(ctx, websocket.MessageText, f); err != nil {
			_ = ws.CloseNow()
			return nil, err
		}
		if _, err := read("pusher_internal:subscription_succeeded"); err != nil {
			_ = ws.CloseNow()
			return nil, err
		}
	}
	c := &wsClient{ws: ws, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
			frames.Add(1) // an idle connection should get none
		}
	}()
	return c, nil
}

func benchWebSockets(b *testing.B, bin, store string, presence bool) {
	ps := pusherserver.New(nil, app)
	up := httptest.NewServer(ps)
	b.Cleanup(up.Close)
	st, _ := storeConfig(b, store)
	pusher := "  upstream: " + up.URL + "\n"
	if presence {
		pusher += "  heartbeat: 5s\n  ttl: 15s\n"
	}
	g := startGateway(b, bin, gatewayConfig(up.URL, st, pusher))
	base := g.idle(b, 0, baselineFor)
	// Two descriptors per WebSocket in each process: the gateway's client
	// and upstream sides, this process's client and upstream sides.
	ns := steps(b, 3000, 9000, 2, 1500)
	clients := make([]*wsClient, ns[len(ns)-1])
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.ws.CloseNow()
			}
		}
		timeout := time.NewTimer(10 * time.Second)
		defer timeout.Stop()
		for _, c := range clients {
			if c == nil {
				continue
			}
			select {
			case <-c.done:
			case <-timeout.C:
				b.Errorf("a WebSocket's reader did not end within 10 s of closing")
				return
			}
		}
	}()
	var (
		frames  atomic.Int64
		samples []idleSample
	)
	have := 0
	for _, n := range ns {
		opened := openParallel(b, have, n, func(i int) error {
			c, err := dialPusher(g.proxy, i, presence, &frames)
			clients[i] = c
			return err
		})
		if got := ps.Sockets(); got != n {
			b.Fatalf("the upstream holds %d WebSockets, not %d", got, n)
		}
		before := frames.Load()
		s := g.idle(b, n, idleFor)
		s.prev, s.opened = have, opened
		have = n
		if s.conns < float64(n) {
			b.Fatalf("the gateway holds %.0f connections, not %d", s.conns, n)
		}
		if presence && s.slots != float64(n) {
			b.Fatalf("the gateway counts %.0f connections against their users' caps, not %d", s.slots, n)
		}
		if d := frames.Load() - before; d != 0 {
			b.Logf("idle:     %d frames reached idle clients during the window", d)
		}
		samples = append(samples, s)
	}
	report(b, "ws", base, samples, 10000)
}
