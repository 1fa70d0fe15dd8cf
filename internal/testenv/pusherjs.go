package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Node is a Node.js script of pusherjs/ running real pusher-js clients; its
// stdout is JSON lines.
type Node struct {
	cmd   *exec.Cmd
	lines chan map[string]json.RawMessage
}

// JSDir returns the directory of the JavaScript harness (scripts/test runs
// npm ci there).
func JSDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "pusherjs")
}

// RunNode runs script (a file of pusherjs/) with one argument, cfg as JSON. It needs
// node and the harness's node_modules: without them the test fails or skips,
// as testenv says.
func RunNode(t testing.TB, script string, cfg any) *Node {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(JSDir(), "node_modules", "pusher-js")); err != nil {
		Missing(t, "pusher-js: run npm ci in %s (scripts/test does)", JSDir())
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

// ClientState is what cap.mjs reports of one pusher-js client.
type ClientState struct {
	States     []string          `json:"states"`
	Errors     []json.RawMessage `json:"errors"`
	Subscribed bool              `json:"subscribed"`
	Events     []json.RawMessage `json:"events"`
	Connecting int               `json:"connecting"` // reconnects: the first connect starts before the script listens
}

func (c ClientState) String() string {
	errs := make([]string, len(c.Errors))
	for i, e := range c.Errors {
		errs[i] = string(e)
	}
	return fmt.Sprintf("states %v errors %v subscribed %v events %d reconnects %d", c.States, errs, c.Subscribed, len(c.Events), c.Connecting)
}

// Got reports whether the client received a pusher:error with code.
func (c ClientState) Got(code int) bool {
	for _, e := range c.Errors {
		var v struct{ Code int }
		if json.Unmarshal(e, &v) == nil && v.Code == code {
			return true
		}
	}
	return false
}

// CapResult is cap.mjs's final report.
type CapResult struct {
	A, B, C, Forged                     ClientState
	CState, ForgedState, AState, BState string
}

// Result reads cap.mjs's final report.
func (n *Node) Result(t testing.TB, timeout time.Duration) CapResult {
	t.Helper()
	var res struct{ Result CapResult }
	raw, _ := json.Marshal(n.Next(t, timeout))
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res.Result
}

// CheckCapResult checks cap.mjs's report for a cap of 2: a and b kept
// working, c got code 4301 and never reconnected, and the forged client was
// left alone by the cap.
func CheckCapResult(t testing.TB, r CapResult) {
	t.Helper()
	for name, c := range map[string]ClientState{"a": r.A, "b": r.B} {
		if !c.Subscribed || len(c.Events) == 0 || c.Got(4301) {
			t.Errorf("client %s should have kept working: %s", name, c)
		}
	}
	if r.AState != "connected" || r.BState != "connected" {
		t.Errorf("a and b: %s, %s; want connected", r.AState, r.BState)
	}
	if !r.C.Got(4301) || r.C.Subscribed || r.C.Connecting != 0 || r.CState == "connected" {
		t.Errorf("client c: state %s, %s; want the 4301 error, no subscription, no reconnect", r.CState, r.C)
	}
	if r.Forged.Got(4301) || r.Forged.Subscribed || r.ForgedState != "connected" {
		t.Errorf("forged client: state %s, %s; want it untouched by the cap and refused by the server", r.ForgedState, r.Forged)
	}
}
