// Command keycap-release builds keycap's release files from the checkout:
//
//	go run ./deploy/cmd/keycap-release [-out dist/release] [-platforms linux/amd64,…]
//
// For each platform (linux, darwin and windows on amd64 and arm64 unless
// told) an archive of the static binary with LICENSE and README.md (.tar.gz,
// .zip for Windows), the binary's CycloneDX SBOM (.cdx.json), and
// SHA256SUMS over them all. The version is the tag on the commit (git
// describe), else a snapshot name; the files are the same bytes for the
// same commit on any machine. It publishes nothing.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/release"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "keycap-release:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "dist/release", "the folder to write the release into")
	only := flag.String("platforms", "", "comma-separated os/arch to build (default: every platform a release ships)")
	flag.Parse()
	platforms := release.Platforms
	if *only != "" {
		platforms = nil
		for _, s := range strings.Split(*only, ",") {
			goos, arch, ok := strings.Cut(strings.TrimSpace(s), "/")
			if !ok || goos == "" || arch == "" {
				return fmt.Errorf("-platforms: %q is not os/arch", s)
			}
			platforms = append(platforms, release.Platform{OS: goos, Arch: arch})
		}
	}
	root, stamp, dir, err := build.Checkout(*out)
	if err != nil {
		return err
	}
	files, err := release.Build(root, dir, stamp, platforms)
	if err != nil {
		return err
	}
	fmt.Printf("keycap %s (%s) in %s:\n", stamp.Version, stamp.Revision, dir)
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Printf("  %-48s %7.1f MB\n", f, float64(st.Size())/1e6)
	}
	return nil
}
