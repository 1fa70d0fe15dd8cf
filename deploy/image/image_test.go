package image_test

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/image"
)

// maxSize bounds the image of one architecture, pulled (compressed) and
// unpacked: 20 MB. The binary alone is 15 MB; linking text/template back
// in (html/template, which cmd/keycap/internal/gateway/html.go replaces)
// brings it to 23 MB.
const maxSize = 20_000_000

// TestImage builds the image for amd64 and arm64 from this checkout, checks
// what is in it — the binary alone, non-root, its entrypoint, labels and
// size — and that two builds of the same binaries are the same image; then
// runs the unpacked entrypoint against a configuration, and the image
// itself under podman.
func TestImage(t *testing.T) {
	root, err := build.Repo()
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	stamp := build.Stamp{Version: "v0.0.0-test-" + hex.EncodeToString(suffix), Revision: "0123456789abcdef0123456789abcdef01234567",
		Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	o := image.Options{Binaries: map[string]string{}, Version: stamp.Version, Revision: stamp.Revision, Created: stamp.Time}
	for _, arch := range []string{"amd64", "arm64"} {
		o.Binaries[arch] = filepath.Join(dir, "keycap-"+arch)
		if err := build.Keycap(root, "linux", arch, stamp, o.Binaries[arch]); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := image.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	again, err := image.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same binaries: %s and %s, want the same image", d1, d2)
	}

	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
	}
	sizes, err := image.Sizes(idx)
	if err != nil {
		t.Fatal(err)
	}
	var amd64 v1.Image
	for i, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if d.Platform.Architecture == "amd64" {
			amd64 = img
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if uid, _, _ := strings.Cut(c.User, ":"); uid == "" || uid == "0" || uid == "root" {
			t.Errorf("%s: runs as %q, want a non-root user", d.Platform, c.User)
		}
		if strings.Join(c.Entrypoint, " ") != image.Binary || strings.Join(c.Cmd, " ") != "serve -watch "+image.ConfigFile {
			t.Errorf("%s: entrypoint %q, command %q", d.Platform, c.Entrypoint, c.Cmd)
		}
		if c.Labels["org.opencontainers.image.version"] != stamp.Version || c.Labels["org.opencontainers.image.revision"] != stamp.Revision ||
			c.Labels["org.opencontainers.image.source"] == "" {
			t.Errorf("%s: labels %v", d.Platform, c.Labels)
		}
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: the config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if files := filesOf(t, img); strings.Join(files, " ") != "keycap" {
			t.Errorf("%s: the image holds %v, want the binary alone (no shell, no package manager)", d.Platform, files)
		}
		s := sizes[i]
		t.Logf("%s: %.1f MB compressed (pulled), %.1f MB unpacked", d.Platform, float64(s.Compressed)/1e6, float64(s.Unpacked)/1e6)
		if s.Compressed > maxSize || s.Unpacked > maxSize {
			t.Errorf("%s: %d bytes compressed, %d unpacked: more than %d", d.Platform, s.Compressed, s.Unpacked, maxSize)
		}
	}

	// The entrypoint, unpacked, as the container runs it.
	fs := t.TempDir()
	extract(t, amd64, fs)
	out, err := exec.Command(filepath.Join(fs, "keycap"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), stamp.Version) || !strings.Contains(string(out), stamp.Revision) {
		t.Errorf("keycap version: %v\n%s, want %s and %s", err, out, stamp.Version, stamp.Revision)
	}
	cfgDir, proxy, admin := configDir(t)
	cmd := exec.Command(filepath.Join(fs, "keycap"), "serve", "-watch", filepath.Join(cfgDir, "keycap.yaml"))
	cmd.Stderr = io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := waitReady(t, admin)
	t.Logf("the unpacked binary: process start → /readyz 200 in %s", ready.Sub(start).Round(time.Millisecond))
	checkServes(t, proxy)
	if out, err := exec.Command(filepath.Join(fs, "keycap"), "health", "-url", "http://"+admin+"/readyz").CombinedOutput(); err != nil {
		t.Errorf("keycap health: %v\n%s", err, out)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := waitExit(cmd, 15*time.Second); err != nil {
		t.Errorf("the binary's exit on SIGTERM: %v", err)
	}

	runPodman(t, idx, stamp.Version)
}

// runPodman runs the image under podman, where a container runtime can run:
// in CI it must (KEYCAP_REQUIRE_SERVICES), elsewhere a missing podman skips
// this part.
func runPodman(t *testing.T, idx v1.ImageIndex, tag string) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		if os.Getenv("KEYCAP_REQUIRE_SERVICES") != "" {
			t.Fatal("podman is not installed: scripts/test installs it (apt-get install podman runc)")
		}
		t.Log("podman is not installed: the image was checked, not run")
		return
	}
	// podman names the image after the folder: lower case only.
	layoutDir, err := os.MkdirTemp("", "keycap-image-layout")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(layoutDir) })
	if err := image.WriteLayout(layoutDir, idx, tag); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		// Each podman call bounded: a wedged runtime fails the test, not CI.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, podman, args...)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := run("pull", "-q", "oci:"+layoutDir+":"+tag)
	if err != nil {
		t.Fatalf("podman pull: %v\n%s", err, out)
	}
	lines := strings.Split(out, "\n")
	id := lines[len(lines)-1]
	t.Cleanup(func() { _, _ = run("rmi", "-f", id) })
	name := "keycap-test-" + tag
	cfgDir, proxy, admin := configDir(t)
	// As the chart runs it: a read-only root, no capabilities, no new
	// privileges. runc, and limits no higher than a sandbox lets a container
	// set: those flags change nothing on an ordinary machine.
	start := time.Now()
	out, err = run("run", "-d", "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges", "--name", name, "--runtime", "runc", "--network", "host",
		"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "-v", cfgDir+":/etc/keycap:ro", id)
	t.Cleanup(func() { _, _ = run("rm", "-f", "-t", "0", name) })
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	ready := waitReady(t, admin)
	t.Logf("podman: run → /readyz 200 in %s", ready.Sub(start).Round(time.Millisecond))
	checkServes(t, proxy)
	if out, err := run("top", name, "user", "args"); err != nil || !strings.Contains(out, "65532") || strings.Contains(out, "root") {
		t.Errorf("podman top: %v\n%s, want the process run as 65532", err, out)
	}
	if out, err := run("stop", "-t", "15", name); err != nil {
		t.Errorf("podman stop: %v\n%s", err, out)
	}
	if out, _ := run("inspect", name, "--format", "{{.State.ExitCode}}"); out != "0" {
		logs, _ := run("logs", name)
		t.Errorf("the container exited %s on SIGTERM, want 0:\n%s", out, logs)
	}
}

// configDir writes a configuration a container reads at
// /etc/keycap/keycap.yaml, on two free loopback ports, and returns its
// folder and the proxy's and admin listener's addresses.
func configDir(t *testing.T) (dir, proxy, admin string) {
	t.Helper()
	proxy, admin = freePort(t), freePort(t)
	dir = t.TempDir()
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "upstream") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })
	config := fmt.Sprintf("listen: %q\nadmin: %q\nupstream: http://%s\nshutdown_timeout: 5s\nroutes: [{name: r, path: /, limits: [{max: 2}]}]\n", proxy, admin, ln.Addr())
	if err := os.WriteFile(filepath.Join(dir, "keycap.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the container's user
		t.Fatal(err)
	}
	return dir, proxy, admin
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady polls /readyz until it answers 200, for up to 30 s, and
// returns when it did.
func waitReady(t *testing.T, admin string) time.Time {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := c.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Now()
			}
		}
		time.Sleep(5 * time.Millisecond) // polling a process we do not control: no event to wait on
	}
	t.Fatalf("%s/readyz never answered 200 in 30 s", admin)
	return time.Time{}
}

func checkServes(t *testing.T, proxy string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + proxy + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "upstream" {
		t.Errorf("through the gateway: %d %q", resp.StatusCode, body)
	}
}

func waitExit(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		return errors.New("still running: killed")
	}
}

func filesOf(t *testing.T, img v1.Image) []string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	var files []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
	}
}

func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(bufio.NewReader(rc))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, filepath.Base(h.Name)), os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
