// Command keycap-image builds keycap's OCI image without a container
// daemon, as an OCI image layout:
//
//	go run ./deploy/cmd/keycap-image [-out dist/image] [-arch amd64,arm64]
//
// then push it with crane (go run github.com/google/go-containerregistry/cmd/crane@v0.22.1
// push --index dist/image REGISTRY/keycap:TAG), or run it with podman (podman
// run oci:dist/image:TAG). The image is the static binary alone, FROM
// scratch, run as 65532:65532; docs/operations.md describes it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/image"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "keycap-image:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "dist/image", "the OCI image layout to write (replaced)")
	archs := flag.String("arch", "amd64,arm64", "the architectures, comma-separated")
	flag.Parse()
	root, stamp, dir, err := build.Checkout(*out)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "keycap-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o := image.Options{Binaries: map[string]string{}, Version: stamp.Version, Revision: stamp.Revision, Created: stamp.Time}
	for _, arch := range strings.Split(*archs, ",") {
		bin := filepath.Join(tmp, "keycap-"+arch)
		if err := build.Keycap(root, "linux", arch, stamp, bin); err != nil {
			return err
		}
		o.Binaries[arch] = bin
	}
	idx, err := image.Build(o)
	if err != nil {
		return err
	}
	if err := image.WriteLayout(dir, idx, stamp.Version); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("keycap %s: %s, index %s\n", stamp.Version, dir, digest)
	sizes, err := image.Sizes(idx)
	if err != nil {
		return err
	}
	for _, s := range sizes {
		fmt.Printf("  linux/%s: %s, %.1f MB compressed, %.1f MB unpacked\n", s.Arch, s.Digest, float64(s.Compressed)/1e6, float64(s.Unpacked)/1e6)
	}
	return nil
}
