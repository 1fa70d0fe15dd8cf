package caddykeycap_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// BenchmarkCaddy sets Caddy with the keycap handler (on memory, on Redis)
// beside Caddy without it, keycap's own gateway (cmd/keycap, on memory and
// on Redis) and nginx with limit_conn, each a process of its own in front of
// the same upstream (instant, and 5 ms), in alternating rounds of the same
// keep-alive clients (one X-User each). The limits have room for every
// request: the rows measure the cost of the slots, not refusals. Each row
// reports its requests per second and its p50/p99 latency, and every
// proxy's speed over bare Caddy's (x/caddy). nginx runs one worker
// (KEYCAP_NGINX names its binary; without one, its row is left out).
//
//	cd caddykeycap && go test -run '^$' -bench BenchmarkCaddy -benchtime 20000x .
func BenchmarkCaddy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/io" {
			time.Sleep(5 * time.Millisecond) // the upstream's work
		}
		_, _ = io.WriteString(w, "hello")
	}))
	b.Cleanup(upstream.Close)
	up := upstream.Listener.Addr().String()
	prefix := testenv.Prefix(b, testenv.Redis(b))

	type proxy struct{ name, url string }
	caddy := func(name, handler string) proxy {
		addr := testenv.FreeAddr(b)
		startCaddy(b, fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}
http://%s {
	%s
	reverse_proxy %s
}
`, addr, handler, up), "TEST_REDIS_ADDR="+testenv.RedisAddr())
		return proxy{name, "http://" + addr}
	}
	proxies := []proxy{
		caddy("caddy", ""),
		caddy("caddy+keycap-memory", "keycap api 1000 {header.X-User}"),
		caddy("caddy+keycap-redis", "keycap api 1000 {header.X-User} {\n\t\tstore redis {env.TEST_REDIS_ADDR} {\n\t\t\tprefix "+prefix+"caddy:\n\t\t}\n\t}"),
		startGateway(b, "memory", "", upstream.URL),
		startGateway(b, "redis", "store: {type: redis, url: 'redis://"+testenv.RedisAddr()+"', prefix: '"+prefix+"gw:'}\n", upstream.URL),
	}
	if bin := testenv.Nginx(); bin != "" {
		proxies = append(proxies, proxy{"nginx-limit_conn", testenv.StartNginx(b, bin, up)})
	}

	const workers = 16
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for _, path := range []string{"", "/io"} {
		name := "upstream=0"
		if path != "" {
			name = "upstream=5ms"
		}
		b.Run(name+"/clients=16", func(b *testing.B) {
			lat := make([][][]time.Duration, len(proxies)) // proxy → worker → latencies
			ops := make([]func(int) error, len(proxies))
			for i, p := range proxies {
				lat[i] = make([][]time.Duration, workers)
				ops[i] = func(w int) error {
					start := time.Now()
					if err := testkit.GetOK(hc, p.url+path, "X-User", fmt.Sprint(w)); err != nil {
						return fmt.Errorf("%s: %w", p.name, err)
					}
					lat[i][w] = append(lat[i][w], time.Since(start))
					return nil
				}
			}
			times := testkit.Alternate(b, workers, 500, 200, ops...)
			for i, p := range proxies {
				b.ReportMetric(float64(b.N)/times[i].Seconds(), p.name+"-req/s")
				if i > 0 {
					b.ReportMetric(float64(times[0])/float64(times[i]), p.name+"/caddy")
				}
				v := slices.Concat(lat[i]...)
				slices.Sort(v)
				b.ReportMetric(float64(v[len(v)/2].Microseconds()), p.name+"-p50-us")
				b.ReportMetric(float64(v[len(v)*99/100].Microseconds()), p.name+"-p99-us")
			}
		})
	}
}

// startGateway builds cmd/keycap and runs it on storeYAML in front of
// upstream with a limit per X-User with room for every request.
func startGateway(b *testing.B, name, storeYAML, upstream string) struct{ name, url string } {
	dir := b.TempDir()
	bin := filepath.Join(dir, "keycap")
	if err := goBuild(bin, "./cmd/keycap", ".."); err != nil {
		b.Fatal(err)
	}
	addr := testenv.FreeAddr(b)
	cfg := fmt.Sprintf(`listen: %s
admin: %s
log: {level: error}
upstream: %s
%sroutes:
  - name: api
    path: /
    limits:
      - max: 1000
        key: header:X-User
`, addr, testenv.FreeAddr(b), upstream, storeYAML)
	path := filepath.Join(dir, "keycap.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitListen(b, addr, "the gateway")
	return struct{ name, url string }{"gateway-" + name, "http://" + addr}
}

// waitListen waits, at most 30 seconds, until something accepts
// connections on addr.
func waitListen(b *testing.B, addr, what string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not listen on %s within 30s: %v", what, addr, err)
		}
		time.Sleep(10 * time.Millisecond) // a readiness probe, before measuring
	}
}

// BenchmarkServeHTTP is the handler's own cost, in this process: one
// request through ServeHTTP to a next handler that answers at once, on the
// memory store, with the request's replacer in its context as Caddy puts
// it there, for a limit alone, of a fixed parent, and of an adaptive
// parent (whose handler reads the response's status). Its allocs/op are
// the handler's.
//
//	cd caddykeycap && go test -run '^$' -bench BenchmarkServeHTTP -count 5 .
func BenchmarkServeHTTP(b *testing.B) {
	for _, tc := range []struct{ name, limit string }{
		{"plain", `{"name":"bench-plain","key":"k","max":1000}`},
		{"parent", `{"name":"bench-parent","key":"k","max":1000,"parent":{"name":"bench-parent","max":1000}}`},
		{"adaptive", `{"name":"bench-adaptive","key":"k","max":1000,"parent":{"name":"bench-adaptive","max":1000,"adaptive":{"floor":1,"ceiling":1000}}}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, err := provision(b, `{"limits":[`+tc.limit+`],"store":{"prefix":"bench-serve-http"}}`)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Cleanup() })
			ctx := context.WithValue(context.Background(), caddy.ReplacerCtxKey, caddy.NewReplacer())
			r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				if err := h.ServeHTTP(w, r, ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
