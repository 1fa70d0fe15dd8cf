//go:build linux

package safety

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/keycap/keycap/store"
)

// Process is a client of the workload in a process of its own: the
// holder program (./holder), serving its store calls through a store
// client of its own. Pause stops the whole process — its runtime, its
// timers, its connections — as a holder is stopped by a GC pause, a
// frozen VM or SIGSTOP.
type Process struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	wmu  sync.Mutex // in
	mu   sync.Mutex // what follows
	next uint64
	wait map[uint64]chan Reply
	dead error // why the process stopped answering, once it has
	done chan struct{}
}

// ErrProcessGone is the error of a call to a Process that has exited.
var ErrProcessGone = errors.New("safety: the holder process is gone")

// StartProcess starts the holder program bin with args. The process is
// killed if the caller dies; Close ends it.
func StartProcess(bin string, args ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr // its complaints, in the test's output
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, in: in, wait: map[uint64]chan Reply{}, done: make(chan struct{})}
	go p.read(out)
	return p, nil
}

// read hands each reply to its caller, until the process's stdout ends.
func (p *Process) read(out io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var cause error
	for sc.Scan() {
		var rep Reply
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			cause = fmt.Errorf("a reply %.200q: %w", sc.Bytes(), err)
			break
		}
		p.mu.Lock()
		ch := p.wait[rep.ID]
		delete(p.wait, rep.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- rep // buffered: a caller that gave up never blocks this
		}
	}
	if cause == nil {
		cause = sc.Err()
	}
	p.mu.Lock()
	p.dead = ErrProcessGone
	if cause != nil {
		p.dead = fmt.Errorf("%w: %v", ErrProcessGone, cause)
	}
	for id, ch := range p.wait {
		close(ch)
		delete(p.wait, id)
	}
	p.mu.Unlock()
}

// do sends req and waits for its reply, or for ctx: the call's outcome is
// then unknown, and its late reply is dropped.
func (p *Process) do(ctx context.Context, req Request) (Reply, error) {
	ch := make(chan Reply, 1)
	p.mu.Lock()
	if p.dead != nil {
		p.mu.Unlock()
		return Reply{}, p.dead
	}
	p.next++
	req.ID = p.next
	p.wait[req.ID] = ch
	p.mu.Unlock()
	// A deadline on the host's clock, which both processes read: a holder
	// stopped before it reads the request gives up when the caller did.
	req.Deadline = time.Now().Add(time.Minute)
	if d, ok := ctx.Deadline(); ok {
		req.Deadline = d
	}
	forget := func() {
		p.mu.Lock()
		delete(p.wait, req.ID)
		p.mu.Unlock()
	}
	b, err := json.Marshal(req)
	if err != nil {
		forget()
		return Reply{}, err
	}
	p.wmu.Lock()
	_, err = p.in.Write(append(b, '\n'))
	p.wmu.Unlock()
	if err != nil {
		forget()
		return Reply{}, fmt.Errorf("safety: a request to the holder process: %w", err)
	}
	select {
	case rep, ok := <-ch:
		if !ok {
			p.mu.Lock()
			defer p.mu.Unlock()
			return Reply{}, p.dead
		}
		if rep.Err != "" {
			return rep, errors.New(rep.Err)
		}
		return rep, nil
	case <-ctx.Done():
		forget()
		return Reply{}, ctx.Err()
	}
}

// Acquire is store.Store.Acquire, in the process.
func (p *Process) Acquire(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand) (store.Grant, error) {
	rep, err := p.do(ctx, Request{Call: "acquire", Pool: pool, Owner: owner, Demand: d})
	return rep.Grant, err
}

// Release is store.Store.Release, in the process.
func (p *Process) Release(ctx context.Context, pool store.PoolID, owner store.Owner, d store.Demand, leave bool) (bool, error) {
	rep, err := p.do(ctx, Request{Call: "release", Pool: pool, Owner: owner, Demand: d, Leave: leave})
	return rep.Kept, err
}

// Renew is store.Store.Renew, in the process.
func (p *Process) Renew(ctx context.Context, batch []store.Renewal) error {
	req := Request{Call: "renew", Batch: make([]Renewal, len(batch))}
	for i, r := range batch {
		req.Batch[i] = Renewal{Pool: r.Pool, Owner: r.Owner, TTL: r.TTL, Weight: r.Weight, Parent: r.Parent}
	}
	rep, err := p.do(ctx, req)
	if err != nil {
		return err
	}
	if len(rep.Batch) != len(batch) {
		return fmt.Errorf("safety: the holder process renewed %d leases of %d", len(rep.Batch), len(batch))
	}
	for i, r := range rep.Batch {
		batch[i].Lost = r.Lost
		if r.Err != "" {
			batch[i].Err = errors.New(r.Err)
		}
	}
	return nil
}

// Pause stops the process (SIGSTOP) for d, then lets it go on (SIGCONT),
// or at once when ctx ends.
func (p *Process) Pause(ctx context.Context, d time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return p.cmd.Process.Signal(syscall.SIGCONT)
}

// Close ends the process: its stdin closed, then killed if it has not
// exited within a second (a stopped process never reads its stdin).
func (p *Process) Close() error {
	_ = p.in.Close()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done // stdout ends with the process: Wait only after the reads
	}
	err := p.cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && !exit.Exited() {
		return nil // killed
	}
	return err
}
