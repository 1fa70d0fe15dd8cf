// Command keycap-manifests renders deploy/manifests/keycap.yaml from the
// Helm chart with its default values, for those who apply plain manifests:
//
//	go run ./deploy/cmd/keycap-manifests
//
// The test suite fails when the file and the chart disagree.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/chart"
)

func main() {
	root, err := build.Repo()
	if err == nil {
		err = write(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keycap-manifests:", err)
		os.Exit(1)
	}
}

func write(root string) error {
	out, err := chart.Manifests(chart.Path(root))
	if err != nil {
		return err
	}
	file := filepath.Join(root, filepath.FromSlash(chart.ManifestsFile))
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", file)
	return nil
}
