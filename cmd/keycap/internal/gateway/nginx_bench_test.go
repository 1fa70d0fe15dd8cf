package gateway_test

import (
	"net/http/httptest"
	"testing"

	"github.com/keycap/keycap/internal/testenv"
)

// BenchmarkProxyVsNginx sets the gateway beside nginx with limit_conn, the
// per-instance cap most sites put in front of an application, and nginx
// beside the bare Go proxy: the same upstreams (instant, and 5 ms), the same
// keep-alive clients (one X-User each), alternating rounds. nginx runs one
// worker, as the gateway runs in one process; KEYCAP_NGINX names its binary
// (default: nginx on PATH; the benchmark is skipped without one).
func BenchmarkProxyVsNginx(b *testing.B) {
	bin := testenv.Nginx()
	if bin == "" {
		b.Skip("nginx not installed (apt-get install nginx-light, or set KEYCAP_NGINX)")
	}
	upstream := benchUpstream(b)
	bare := httptest.NewServer(bareProxy(b, upstream.URL))
	defer bare.Close()
	nginx := testenv.StartNginx(b, bin, upstream.Listener.Addr().String())

	// limit_conn below has room for every request, as the gateway's limit.
	g, gw := benchGateway(b, "store: {type: redis, url: 'redis://"+testenv.RedisAddr()+"', prefix: '"+testenv.Prefix(b, testenv.Redis(b))+"'}\n", upstream.URL)
	defer g.Close()
	defer gw.Close()
	for _, path := range []string{"", "/io"} {
		name := "upstream=0"
		if path != "" {
			name = "upstream=5ms"
		}
		b.Run("nginx-vs-bare/clients=16/"+name, func(b *testing.B) {
			benchVs(b, 16, "bare", bare.URL+path, "nginx", nginx+path)
		})
		b.Run("gateway-redis-vs-nginx/clients=16/"+name, func(b *testing.B) {
			benchVs(b, 16, "nginx", nginx+path, "gateway", gw.URL+path)
		})
	}
}
