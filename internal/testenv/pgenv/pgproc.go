package pgenv

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.Port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

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

// Kill stops the server and every backend at once (SIGKILL to its process
// group), as a crash of the machine's database would, and waits for the
// group to be gone (5 s at most): a backend the postmaster was forking as
// the signal went out escapes it, and holds the shared memory the next
// start needs. The next Start recovers from the WAL, which empties the
// unlogged tables. Killing a stopped server does nothing.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = p.cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			break
		}
	}
	p.cmd = nil
}

// URL returns the server's connection string, for the postgres database.
func (p *Process) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=1", p.Port)
}
