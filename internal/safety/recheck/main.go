// Command recheck checks again the histories that the safety tests saved
// when the checker did not finish them in its minute (keycap-safety-
// unfinished-SEED.json in the temporary directory), with as long as it is
// given for each:
//
//	go run ./internal/safety/recheck -time 10m -mem 8 /tmp/keycap-safety-unfinished-*.json
//
// It prints each history's outcome — linearizable, a violation (with the
// operations around it and porcupine's visualisation, written beside the
// file), or not finished again — and exits 1 when any is a violation. The
// checker's search of a long history with many calls of unknown outcome
// grows its memory by gigabytes a minute: past -mem GiB it gives up on
// that history (safety.MemoryLimit), which then counts as not finished.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/keycap/keycap/internal/safety"
)

func main() {
	budget := flag.Duration("time", 10*time.Minute, "how long the checker may take on each history")
	flag.Float64Var(&safety.MemoryLimit, "mem", safety.MemoryLimit, "GiB of memory the checker may use")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: recheck [-time 10m] [-mem 8] FILE...")
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		s, err := safety.Load(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		start := time.Now()
		err = safety.Check(s.Seed, s.History, s.Bounds, filepath.Dir(path), *budget)
		took := time.Since(start).Round(time.Millisecond)
		var v *safety.Violation
		switch {
		case errors.As(err, &v):
			failed = true
			fmt.Printf("%s: %d operations: VIOLATION after %s\n%v\n", path, len(s.History), took, err)
		case err != nil:
			fmt.Printf("%s: not finished: %v\n", path, err)
		default:
			fmt.Printf("%s: seed %d, %d operations: linearizable, checked in %s\n", path, s.Seed, len(s.History), took)
		}
		debug.FreeOSMemory() // the last search's memory, before the next
	}
	if failed {
		os.Exit(1)
	}
}
