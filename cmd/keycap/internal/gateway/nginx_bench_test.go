package gateway_test

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
)

// BenchmarkProxyVsNginx sets the gateway beside nginx with limit_conn, the
// per-instance cap most sites put in front of an application, and nginx
// beside the bare Go proxy: the same upstreams (instant, and 5 ms), the same
// keep-alive clients (one X-User each), alternating rounds. nginx runs one
// worker, as the gateway runs in one process; KEYCAP_NGINX names its binary
// (default: nginx on PATH; the benchmark is skipped without one).
func BenchmarkProxyVsNginx(b *testing.B) {
	bin := os.Getenv("KEYCAP_NGINX")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("nginx"); err != nil {
			b.Skip("nginx not installed (apt-get install nginx-light, or set KEYCAP_NGINX)")
		}
	}
	upstream := benchUpstream(b)
	bare := httptest.NewServer(bareProxy(b, upstream.URL))
	defer bare.Close()
	nginx := startNginx(b, bin, upstream.Listener.Addr().String())

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

// startNginx runs nginx in the foreground with one worker, proxying to
// upstream (host:port) with limit_conn per X-User, and returns its URL.
func startNginx(b *testing.B, bin, upstream string) string {
	dir := b.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  limit_conn_zone $http_x_user zone=users:10m;
  upstream app {
    server %[2]s;
    keepalive 256;
  }
  server {
    listen %[3]s;
    location / {
      limit_conn users 1000;
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }
  }
}
`, dir, upstream, addr)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			b.Fatalf("nginx did not listen on %s within 10s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
