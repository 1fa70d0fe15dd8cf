package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Nginx returns the nginx binary the benchmarks compare with: KEYCAP_NGINX,
// else nginx on PATH, else "" (apt-get install nginx-light).
func Nginx() string {
	if bin := os.Getenv("KEYCAP_NGINX"); bin != "" {
		return bin
	}
	bin, _ := exec.LookPath("nginx")
	return bin
}

// StartNginx runs nginx (bin) in the foreground with one worker, as a proxy
// in one process is compared with it, proxying to upstream (host:port) with
// limit_conn per X-User and room for every request (1,000), and returns its
// URL once it accepts connections. It is stopped when tb ends.
func StartNginx(tb testing.TB, bin, upstream string) string {
	tb.Helper()
	dir := tb.TempDir()
	addr := FreeAddr(tb)
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
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nginx did not listen on %s within 30s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // a readiness probe, before measuring
	}
}
