package gateway_test

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testkit"
)

// kubeletWrite writes files into dir the way the kubelet updates a mounted
// ConfigMap or Secret (its AtomicWriter): the files go into a new
// timestamped folder, a symbolic link ..data_tmp to it is renamed onto
// ..data in one step, each file name is a link into ..data, and the old
// folder is removed. It returns when the rename is done.
func kubeletWrite(t *testing.T, dir string, files map[string]string) time.Time {
	t.Helper()
	ts := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), time.Now().UnixNano())
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	swapped := time.Now()
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
	return swapped
}

// TestWatchFollowsAConfigMap: with -watch, a gateway whose configuration is
// a mounted ConfigMap reloads when the kubelet swaps it — within 2 s — and
// only then: a change beside it reloads nothing, and a bad file keeps the
// configuration in force, as SIGHUP does.
func TestWatchFollowsAConfigMap(t *testing.T) {
	t.Parallel()
	upstream := func(name string) string {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, name) }))
		t.Cleanup(up.Close)
		return up.URL
	}
	config := func(up string) string {
		return "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nlog: {level: debug}\nupstream: " + up + "\n" +
			"routes: [{name: r, path: /, limits: [{max: 2}]}]\n"
	}
	a, b, c := upstream("A"), upstream("B"), upstream("C")
	dir := t.TempDir()
	kubeletWrite(t, dir, map[string]string{"keycap.yaml": config(a)})
	g := runGateway(t, filepath.Join(dir, "keycap.yaml"), "-watch")
	g.waitLog(t, "keycap: watching the configuration for changes")
	serving := func() string {
		_, _, body := get(t, g.proxy+"/")
		return body
	}
	if got := serving(); got != "A" {
		t.Fatalf("serving %q, want A", got)
	}

	// A file beside it changes: read, not reloaded.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m := g.waitLog(t, "keycap: configuration unchanged"); m["file"] == nil {
		t.Errorf("no file in %v", m)
	}

	swapped := kubeletWrite(t, dir, map[string]string{"keycap.yaml": config(b)})
	testkit.WaitUntil(t, 10*time.Second, "the new configuration serving", func() bool { return serving() == "B" })
	latency := time.Since(swapped)
	g.waitLog(t, "keycap: configuration reloaded")
	t.Logf("from the kubelet's swap to the new configuration serving: %s", latency.Round(time.Millisecond))
	if latency > 2*time.Second {
		t.Errorf("the reload took %s, more than 2 s", latency)
	}

	// A bad file: refused, B keeps serving.
	kubeletWrite(t, dir, map[string]string{"keycap.yaml": config(b) + "shutdown_delay: -1s\n"})
	m := g.waitLog(t, "keycap: reload failed, keeping the current configuration")
	if e, _ := m["error"].(string); !strings.Contains(e, "shutdown_delay") {
		t.Errorf("the failure names no field: %v", m)
	}
	if got := serving(); got != "B" {
		t.Errorf("after a bad file, serving %q, want B", got)
	}

	// A good one after it is taken.
	kubeletWrite(t, dir, map[string]string{"keycap.yaml": config(c)})
	testkit.WaitUntil(t, 10*time.Second, "the third configuration serving", func() bool { return serving() == "C" })

	// SIGHUP still reloads, and the process stops cleanly with its watch.
	g.signal(t, syscall.SIGHUP)
	g.waitLog(t, "keycap: configuration reloaded")
	g.signal(t, syscall.SIGTERM)
	if err := g.wait(15 * time.Second); err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestDrainAnswersNotReady: on SIGTERM the gateway answers /readyz with 503
// at once and keeps serving — without keep-alive — for shutdown_delay, then
// stops; a second signal stops it without the rest of the delay.
func TestDrainAnswersNotReady(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(up.Close) // after the parallel subtests
	for _, tc := range []struct {
		name  string
		delay time.Duration
		again bool
	}{
		{"delay runs out", 700 * time.Millisecond, false},
		{"second signal", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, fmt.Sprintf("upstream: %s\nshutdown_delay: %s\nroutes: [{name: r, path: /, limits: [{max: 2}]}]\n", up.URL, tc.delay))
			if out, err := runBinary(t, "health", "-url", g.admin+"/readyz"); err != nil {
				t.Fatalf("keycap health before: %v\n%s", err, out)
			}
			signalled := time.Now()
			g.signal(t, syscall.SIGTERM)
			g.waitLog(t, "keycap: draining: /readyz answers 503, requests are still served")
			code, _, body := get(t, g.admin+"/readyz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, `"draining":true`) {
				t.Errorf("readyz while draining: %d %s", code, body)
			}
			if out, err := runBinary(t, "health", "-url", g.admin+"/readyz"); err == nil || !strings.Contains(out, "503") {
				t.Errorf("keycap health while draining: %v\n%s", err, out)
			}
			if code, _, _ := get(t, g.admin+"/healthz"); code != 200 {
				t.Errorf("healthz while draining: %d (a liveness probe must not restart a draining pod)", code)
			}
			resp, err := testClient.Get(g.proxy + "/")
			if err != nil {
				t.Fatalf("a request while draining: %v", err)
			}
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !resp.Close {
				t.Errorf("a request while draining: %d, Connection: close %v; want 200 and close", resp.StatusCode, resp.Close)
			}
			if tc.again {
				g.signal(t, syscall.SIGTERM)
				g.waitLog(t, "keycap: a second signal: stopping without the rest of shutdown_delay")
			}
			if err := g.wait(15 * time.Second); err != nil {
				t.Fatalf("exit: %v", err)
			}
			took := time.Since(signalled)
			if !tc.again && took < tc.delay {
				t.Errorf("stopped %s after the signal, before shutdown_delay (%s)", took, tc.delay)
			}
			t.Logf("signal → exit: %s", took.Round(time.Millisecond))
		})
	}
}

// TestWatchFollowsASecret: with -watch, a change of a key file the
// configuration names (a JWKS mounted from a Secret) reloads it too.
func TestWatchFollowsASecret(t *testing.T) {
	t.Parallel()
	secret := t.TempDir()
	jwks := func() string {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(writeJWKS(t, "k1", &k.PublicKey))
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	kubeletWrite(t, secret, map[string]string{"jwks.json": jwks()})
	file := filepath.Join(t.TempDir(), "keycap.yaml")
	config := fmt.Sprintf("listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nupstream: http://127.0.0.1:1\njwt: {jwks_file: %q}\n"+
		"routes: [{name: r, path: /, limits: [{max: 1, key: \"claim:sub\"}]}]\n", filepath.Join(secret, "jwks.json"))
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	w := runGateway(t, file, "-watch")
	w.waitLog(t, "keycap: watching the configuration for changes")
	kubeletWrite(t, secret, map[string]string{"jwks.json": jwks()})
	w.waitLog(t, "keycap: configuration changed, reloading")
	w.waitLog(t, "keycap: configuration reloaded")
}
