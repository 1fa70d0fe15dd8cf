// Command recheck checks again the histories that the safety tests saved
// when the checker did not finish them in its minute (keycap-safety-
// unfinished-SEED.json in the temporary directory), with as long as it is
// given for each:
//
//	go run ./internal/safety/recheck -time 10m /tmp/keycap-safety-unfinished-*.json
//
// It prints each history's outcome — linearizable, a violation (with the
// operations around it and porcupine's visualisation, written beside the
// file), or not finished again — and exits 1 when any is a violation.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/keycap/keycap/internal/safety"
)

func main() {
	budget := flag.Duration("time", 10*time.Minute, "how long the checker may take on each history")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: recheck [-time 10m] FILE...")
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
			fmt.Printf("%s: seed %d, %d operations: VIOLATION after %s\n%v\n", path, s.Seed, len(s.History), took, err)
		case err != nil:
			fmt.Printf("%s: seed %d, %d operations: not finished in %s\n", path, s.Seed, len(s.History), *budget)
		default:
			fmt.Printf("%s: seed %d, %d operations: linearizable, checked in %s\n", path, s.Seed, len(s.History), took)
		}
	}
	if failed {
		os.Exit(1)
	}
}
