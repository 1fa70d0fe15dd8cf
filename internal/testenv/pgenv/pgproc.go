package pgenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keycap/keycap/internal/testenv"
)

// Process is a PostgreSQL server of a test's own, on a loopback port, that
// the test can kill and start again: a crash and its recovery, which the
// shared server of the suite cannot be put through.
type Process struct {
	t    testing.TB
	Port int
	bin  string // the directory of initdb and postgres
	dir  string // the data directory's parent, owned by the server's user
	cred *syscall.Credential
	cmd  *exec.Cmd
}

// StartProcess initialises a database cluster in a directory of t's own,
// starts its server on a free loopback port, and kills it when t ends. It
// needs PostgreSQL's initdb and postgres (scripts/services.sh installs
// them); run as root, the server runs as the postgres user, which
// PostgreSQL requires.
func StartProcess(t testing.TB) *Process {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		testenv.Missing(t, "PostgreSQL's initdb and postgres: %v", err)
	}
	p := &Process{t: t, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "the postgres user, to run PostgreSQL as root: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are the test user's alone, and the server
	// may run as another.
	p.dir, err = os.MkdirTemp("", "keycap-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(p.dir) })
	if p.cred != nil {
		if err := os.Chown(p.dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	p.Port = testenv.FreePort(t)

	initdb := p.command("initdb", "-D", p.data(), "-A", "trust", "-U", "postgres", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// binDir finds initdb and postgres: on the PATH, or in the newest
// /usr/lib/postgresql/*/bin (Debian's packages).
func binDir() (string, error) {
	if pg, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(pg); err == nil {
			dir := filepath.Dir(real)
			if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("neither on the PATH nor in /usr/lib/postgresql/*/bin")
}

// version reads the major version of /usr/lib/postgresql/N/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func (p *Process) data() string { return filepath.Join(p.dir, "data") }

// command returns a command of the server's binaries, as the server's user.
func (p *Process) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.SysProcAttr = testenv.ServerAttr()
	cmd.SysProcAttr.Credential = p.cred
	return cmd
}

// Start starts the server (again) and waits until it answers: after a
// kill, once it has recovered from the crash.
func (p *Process) Start() {
	p.t.Helper()
	if err := p.Restart(); err != nil {
		p.t.Fatal(err)
	}
}

// Restart is Start for any goroutine: it returns what went wrong rather
// than failing the test.
func (p *Process) Restart() error {
	logf, err := os.OpenFile(filepath.Join(p.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	p.cmd = p.command("postgres", "-D", p.data(), "-p", strconv.Itoa(p.Port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "fsync=on")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, p.URL())
		if err == nil {
			err = c.Ping(ctx)
			_ = c.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
			return fmt.Errorf("postgres on port %d did not answer: %w\n%s", p.Port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server and every backend at once, as a crash of the
// machine's database would, and waits for them to be gone (5 s at most).
// PostgreSQL's children each start a session of their own (setsid), so a
// signal to the postmaster's process group misses them, and a backend left
// alive holds the shared memory the next start needs ("pre-existing shared
// memory block is still in use"): the postmaster is stopped first, so that
// it forks no more, then it and each of its children are killed. The next
// Start recovers from the WAL, which empties the unlogged tables. Killing a
// stopped server does nothing.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	kids := children(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = p.cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		alive := !errors.Is(syscall.Kill(-pid, syscall.SIGKILL), syscall.ESRCH)
		for _, k := range kids {
			alive = alive || running(k)
		}
		if !alive {
			break
		}
	}
	p.cmd = nil
}

// children returns the processes whose parent is pid (from /proc; none
// where it cannot be read).
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := stat(k); ok && ppid == pid {
			kids = append(kids, k)
		}
	}
	return kids
}

// running reports whether process pid is alive: a zombie, which holds
// nothing, is not.
func running(pid int) bool {
	_, state, ok := stat(pid)
	return ok && state != 'Z' && state != 'X'
}

// stat returns process pid's parent and state, from /proc/pid/stat.
func stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+4 > len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return ppid, f[0][0], err == nil
}

// URL returns the server's connection string, for the postgres database.
func (p *Process) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=1", p.Port)
}
