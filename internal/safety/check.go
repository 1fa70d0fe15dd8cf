package safety

import (
	"fmt"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is a history the model cannot explain: the failing group's
// operations around the point where no order of them explains what the
// clients saw, and porcupine's visualisation of the whole history.
type Violation struct {
	Seed   int64
	Stuck  porcupine.Operation   // the earliest operation that no linearization reaches
	Around []porcupine.Operation // the failing group's operations overlapping the TTL before it, and it
	Visual string                // an HTML file of porcupine's visualisation ("" if none was written)
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: a history the model cannot explain at %q (visualisation: %s); the group's operations around it:\n",
		v.Seed, describe(v.Stuck.Input, v.Stuck.Output), v.Visual)
	for _, op := range v.Around {
		mark := " "
		if op == v.Stuck {
			mark = ">"
		}
		fmt.Fprintf(&b, " %s %s\n", mark, entry(op))
	}
	return b.String()
}

// MemoryLimit is the memory, in GiB, of the whole process's heap past which
// Check gives up on the history it checks, as unfinished: the checker's
// search of a long history with many calls of unknown outcome grows by
// gigabytes a minute (5 GiB in 26–63 s on the unacked failover's).
var MemoryLimit = 8.0

// watch sets abort once the process's memory passes MemoryLimit, looking
// at once and then every 100 ms until stop closes, and returns how to read
// the memory it saw last, in GiB.
func watch(abort *atomic.Bool, stop <-chan struct{}) func() float64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var last atomic.Uint64
	limit := MemoryLimit
	look := func() {
		metrics.Read(sample)
		used := sample[0].Value.Uint64() // live, and dead not yet swept
		last.Store(used)
		if float64(used)/(1<<30) > limit {
			abort.Store(true)
		}
	}
	look()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for !abort.Load() {
			select {
			case <-stop:
				return
			case <-t.C:
				look()
			}
		}
	}()
	return func() float64 { return float64(last.Load()) / (1 << 30) }
}

// Check checks history against the model. On a violation it returns a
// *Violation, with the visualisation written in dir when dir is set.
// Removing operations from a failing history to shrink it could make a
// failure of its own (a release taken out), so the violation shows the
// operations around the point where every order of them fails instead.
func Check(seed int64, history []porcupine.Operation, b Bounds, dir string, timeout time.Duration) error {
	if b.TTL <= 0 || b.Ticket <= 0 || b.Claim <= 0 {
		return fmt.Errorf("seed %d: bounds without the run's timings (TTL %s, ticket %s, claim %s): check with the Config.Bounds the run had", seed, b.TTL, b.Ticket, b.Claim)
	}
	if b.ServesLater {
		history = withServes(history)
	}
	model := Model(b)
	// Past MemoryLimit every step fails, which ends the search at once;
	// the history is then unfinished, not a violation.
	var abort atomic.Bool
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	used := watch(&abort, stop)
	step := model.Step
	guarded := model
	guarded.Step = func(st, in, out any) (bool, any) {
		if abort.Load() {
			return false, nil
		}
		return step(st, in, out)
	}
	res, info := porcupine.CheckOperationsVerbose(guarded, history, timeout)
	switch {
	case abort.Load():
		return fmt.Errorf("seed %d: the checker gave up at %.1f GiB of memory (MemoryLimit) after %s on %d operations",
			seed, used(), time.Since(start).Round(time.Millisecond), len(history))
	case res == porcupine.Ok:
		return nil
	case res == porcupine.Unknown:
		return fmt.Errorf("seed %d: the checker timed out after %s on %d operations", seed, timeout, len(history))
	}
	v := &Violation{Seed: seed}
	if dir != "" {
		v.Visual = filepath.Join(dir, fmt.Sprintf("keycap-safety-%d.html", seed))
		if err := porcupine.VisualizePath(model, info, v.Visual); err != nil {
			v.Visual = "not written: " + err.Error()
		}
	}
	parts, lins := partition(history), info.PartialLinearizationsOperations()
	for i, part := range parts {
		if i >= len(lins) || porcupine.CheckOperations(model, part) {
			continue
		}
		var longest []porcupine.Operation
		for _, l := range lins[i] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		reached := map[porcupine.Operation]bool{}
		for _, op := range longest {
			reached[op] = true
		}
		stuck := -1
		for j, op := range part {
			if !reached[op] && (stuck < 0 || op.Call < part[stuck].Call) {
				stuck = j
			}
		}
		if stuck < 0 {
			continue
		}
		v.Stuck = part[stuck]
		from, to := v.Stuck.Call-int64(b.TTL+b.Late), v.Stuck.Return
		if v.Stuck.Input.(Op).Return == Never {
			to = v.Stuck.Call + int64(b.TTL)
		}
		for _, op := range part {
			if op.Return >= from && op.Call <= to {
				v.Around = append(v.Around, op)
			}
		}
		slices.SortFunc(v.Around, func(x, y porcupine.Operation) int { return int(x.Call - y.Call) })
		break
	}
	return v
}

// withServes returns history with a Serve beside each release of a pool
// without a parent that does not leave a line (Bounds.ServesLater): in
// the release's interval, by the same client.
func withServes(history []porcupine.Operation) []porcupine.Operation {
	out := slices.Clip(history)
	for _, op := range history {
		in := op.Input.(Op)
		if in.Kind != Release || in.Parent > 0 || in.Line {
			continue
		}
		in.Kind = Serve
		out = append(out, porcupine.Operation{ClientId: op.ClientId, Input: in, Call: op.Call, Output: Result{}, Return: op.Return})
	}
	return out
}
