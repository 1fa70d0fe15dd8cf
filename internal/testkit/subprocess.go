package testkit

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv names the role a test binary runs as when a test starts it as a
// helper process.
const helperEnv = "KEYCAP_TEST_HELPER"

// HelperRole returns the role this process was started for by StartHelper, or
// "" in a normal test run. Call it from TestMain: a helper does its work and
// exits without running the tests.
func HelperRole() string { return os.Getenv(helperEnv) }

// Helper is a copy of the test binary running as a helper process: a worker
// that a test can kill as a crash would.
type Helper struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// StartHelper starts the test binary again as a helper for role, with env
// added to the environment, and returns once the helper has printed a line
// starting with ready. The helper is killed when t ends.
func StartHelper(t testing.TB, role, ready string, env ...string) *Helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &Helper{cmd: cmd, in: in, lines: make(chan string, 100)}
	t.Cleanup(h.Kill)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<20) // a line may carry a run's results
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	if _, ok := h.WaitLine(ready, time.Minute); !ok {
		t.Fatalf("helper %s never printed %q", role, ready)
	}
	return h
}

// WaitLine waits for the helper to print a line starting with prefix, and
// returns the line.
func (h *Helper) WaitLine(prefix string, timeout time.Duration) (string, bool) {
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				return "", false
			}
			if strings.HasPrefix(l, prefix) {
				return l, true
			}
		case <-deadline:
			return "", false
		}
	}
}

// Send writes line to the helper's standard input. A helper that reads it
// sees it end when the helper is killed.
func (h *Helper) Send(line string) {
	_, _ = io.WriteString(h.in, line+"\n")
}

// Pid returns the helper's process ID.
func (h *Helper) Pid() int { return h.cmd.Process.Pid }

// Lines returns the lines the helper prints, as it prints them.
func (h *Helper) Lines() <-chan string { return h.lines }

// Kill kills the helper with SIGKILL, as a crash would, and waits for it.
func (h *Helper) Kill() {
	if h.cmd.Process == nil || h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	_ = h.cmd.Wait()
}
