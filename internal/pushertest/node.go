package pushertest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testenv"
)

// Node is a Node.js script of js/ running real pusher-js clients; its stdout
// is JSON lines.
type Node struct {
	cmd   *exec.Cmd
	lines chan map[string]json.RawMessage
}

// JSDir returns the directory of the JavaScript harness (scripts/test runs
// npm ci there).
func JSDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "js")
}

// RunNode runs script (a file of js/) with one argument, cfg as JSON. It needs
// node and the harness's node_modules: without them the test fails or skips,
// as testenv says.
func RunNode(t testing.TB, script string, cfg any) *Node {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(JSDir(), "node_modules", "pusher-js")); err != nil {
		testenv.Missing(t, "pusher-js: run npm ci in %s (scripts/test does)", JSDir())
	}
	arg, _ := json.Marshal(cfg)
	cmd := exec.Command("node", filepath.Join(JSDir(), script), string(arg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &Node{cmd: cmd, lines: make(chan map[string]json.RawMessage, 100)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				n.lines <- m
			}
		}
		close(n.lines)
	}()
	return n
}

// Next returns the script's next JSON line, or fails t after timeout or when
// the script ends.
func (n *Node) Next(t testing.TB, timeout time.Duration) map[string]json.RawMessage {
	t.Helper()
	select {
	case m, ok := <-n.lines:
		if !ok {
			t.Fatal("the node script ended early")
		}
		if e, ok := m["error"]; ok {
			t.Fatalf("the node script failed: %s", e)
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no line from the node script within %s", timeout)
	}
	return nil
}
