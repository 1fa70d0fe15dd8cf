// Package build compiles the keycap binary the way a release ships it:
// static (no cgo), stripped, with paths trimmed and the build ID cleared,
// so that the same commit gives the same bytes on any machine.
package build

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Stamp is what a release build writes into the binary and its packaging.
type Stamp struct {
	Version  string    // keycap version prints it: a tag (v1.2.3) or a snapshot name
	Revision string    // the commit
	Time     time.Time // the commit's time: every file's time in archives and images
}

// Repo returns the root of the repository holding the working directory
// (the folder with go.work).
func Repo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work above the working directory: run from the keycap repository")
		}
		dir = parent
	}
}

// GitStamp reads the stamp of the checkout at root: the commit, its time,
// and as version the tag on it (git describe), else a snapshot name built
// from the commit ("v0.0.0-snapshot-<commit>", "-dirty" with changes).
func GitStamp(root string) (Stamp, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	rev, err := git("rev-parse", "HEAD")
	if err != nil {
		return Stamp{}, fmt.Errorf("git rev-parse: %w", err)
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return Stamp{}, fmt.Errorf("git log: %w", err)
	}
	var secs int64
	if _, err := fmt.Sscan(ct, &secs); err != nil {
		return Stamp{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	version, err := git("describe", "--tags", "--exact-match", "--match", "v*")
	if err != nil || version == "" {
		version = "v0.0.0-snapshot-" + rev[:12]
	}
	if status, _ := git("status", "--porcelain", "--untracked-files=no"); status != "" {
		version += "-dirty"
	}
	return Stamp{Version: version, Revision: rev, Time: time.Unix(secs, 0).UTC()}, nil
}

// Checkout is what the deploy commands start from: the repository's root,
// the stamp of its checkout, and out made absolute under the root when it
// is relative (a command's -out flag).
func Checkout(out string) (root string, s Stamp, dir string, err error) {
	if root, err = Repo(); err != nil {
		return "", Stamp{}, "", err
	}
	if s, err = GitStamp(root); err != nil {
		return "", Stamp{}, "", err
	}
	dir = out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	return root, s, dir, nil
}

// Keycap builds cmd/keycap of the repository at root for goos/goarch into
// out.
func Keycap(root, goos, goarch string, s Stamp, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -buildid= -X main.version="+s.Version+" -X main.revision="+s.Revision,
		"-o", out, ".")
	cmd.Dir = filepath.Join(root, "cmd", "keycap")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build keycap for %s/%s: %v\n%s", goos, goarch, err, b)
	}
	return nil
}
