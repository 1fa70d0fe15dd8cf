package caddykeycap_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run Caddy as users do: a binary built from cmd/caddy (the main
// package xcaddy generates), one process per instance, configured by a
// Caddyfile.

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// caddyBin returns the path of a caddy binary with the module, built once per
// test process (within 10 minutes).
func caddyBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "caddykeycap-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "caddy")
		buildErr = goBuild(buildBin, "./cmd/caddy", ".")
	})
	if buildErr != nil {
		t.Fatalf("building caddy: %v", buildErr)
	}
	return buildBin
}

// goBuild builds pkg, in dir, to out, within 10 minutes.
func goBuild(out, pkg, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// caddyEnv is the environment of a Caddy run by a test: its data and
// configuration under dir, nothing of the user's.
func caddyEnv(dir string, extra ...string) []string {
	return append(os.Environ(), append([]string{
		"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir,
	}, extra...)...)
}

// caddyCmd runs the caddy binary with args (caddy adapt, caddy validate) and
// returns its combined output, within 30 seconds; env adds to its
// environment.
func caddyCmd(t testing.TB, env []string, args ...string) (string, error) {
	t.Helper()
	bin := caddyBin(t) // built once, perhaps now: not within the command's 30 s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = caddyEnv(t.TempDir(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startCaddy runs "caddy run" on caddyfile, stopped when t ends, and returns
// once Caddy says it serves its configuration (within 30 seconds), with
// what Caddy logs.
func startCaddy(t testing.TB, caddyfile string, env ...string) *caddyLog {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(caddyBin(t), "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = caddyEnv(dir, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// Caddy logs to stderr; "serving initial configuration" comes once
	// every server listens.
	ready := make(chan struct{})
	log := newCaddyLog()
	go func() {
		defer close(exited)
		defer log.end()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		said := false
		for sc.Scan() {
			log.add(sc.Text())
			if !said && strings.Contains(sc.Text(), "serving initial configuration") {
				said = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
	}()
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("caddy exited before serving:\n%s", log)
	case <-time.After(30 * time.Second):
		t.Fatalf("caddy did not serve within 30s:\n%s", log)
	}
	return log
}

// caddyLog is what a Caddy of startCaddy logged, line by line (JSON, as
// Caddy logs when its output is not a terminal).
type caddyLog struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed, and replaced, at each line and at the end
	ended bool
}

func newCaddyLog() *caddyLog { return &caddyLog{more: make(chan struct{})} }

func (l *caddyLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	close(l.more)
	l.more = make(chan struct{})
}

// end says Caddy logs no more.
func (l *caddyLog) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	close(l.more)
	l.more = make(chan struct{})
}

// line returns the i-th line (from 0), waiting for it until deadline; false
// when Caddy did not log it by then.
func (l *caddyLog) line(i int, deadline time.Time) (string, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		l.mu.Lock()
		if i < len(l.lines) {
			defer l.mu.Unlock()
			return l.lines[i], true
		}
		more, ended := l.more, l.ended
		l.mu.Unlock()
		if ended {
			return "", false
		}
		select {
		case <-more:
		case <-timer.C:
			return "", false
		}
	}
}

// String returns the whole log.
func (l *caddyLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
