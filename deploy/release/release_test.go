package release_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/release"
)

// TestSnapshot builds a snapshot release for every platform, as the release
// command does (publishing nothing), and checks what a user downloads: the
// checksums, each archive's files, times and modes, that each binary is for
// its platform, static and stamped, each SBOM, and that a second build of
// the same commit gives the same bytes.
func TestSnapshot(t *testing.T) {
	root, err := build.Repo()
	if err != nil {
		t.Fatal(err)
	}
	stamp := build.Stamp{Version: "v0.0.0-snapshot-test", Revision: "89abcdef0123456789abcdef0123456789abcdef",
		Time: time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)}
	out := t.TempDir()
	start := time.Now()
	files, err := release.Build(root, out, stamp, release.Platforms)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d platforms in %v", len(release.Platforms), time.Since(start).Round(time.Second))
	if len(files) != 2*len(release.Platforms)+1 || files[len(files)-1] != release.ChecksumsFile {
		t.Fatalf("files %v: want an archive and an SBOM per platform, then %s", files, release.ChecksumsFile)
	}

	// SHA256SUMS: every other file, once, with its hash.
	sums, err := os.ReadFile(filepath.Join(out, release.ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("%s: bad line %q", release.ChecksumsFile, line)
		}
		listed[name] = sum
	}
	for _, f := range files[:len(files)-1] {
		got, err := release.FileSHA256(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if listed[f] != got {
			t.Errorf("%s: SHA256SUMS says %q, the file hashes to %s", f, listed[f], got)
		}
	}
	if len(listed) != len(files)-1 {
		t.Errorf("SHA256SUMS lists %d files, want %d", len(listed), len(files)-1)
	}

	for _, p := range release.Platforms {
		name := release.Name(stamp.Version, p)
		exe := "keycap"
		if p.OS == "windows" {
			exe = "keycap.exe"
		}
		arch := filepath.Join(out, name+".tar.gz")
		if p.OS == "windows" {
			arch = filepath.Join(out, name+".zip")
		}
		got := unpack(t, arch, stamp.Time)
		var names []string
		for n := range got {
			names = append(names, n)
		}
		slices.Sort(names)
		want := []string{name + "/LICENSE", name + "/README.md", name + "/" + exe}
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s holds %v, want %v", filepath.Base(arch), names, want)
			continue
		}
		bin := got[name+"/"+exe]
		if bin.mode&0o111 == 0 {
			t.Errorf("%s: %s is not executable (%o)", p, exe, bin.mode)
		}
		checkBinary(t, p, bin.data, stamp)
		if p.OS == runtime.GOOS && p.Arch == runtime.GOARCH {
			path := filepath.Join(t.TempDir(), exe)
			if err := os.WriteFile(path, bin.data, 0o755); err != nil {
				t.Fatal(err)
			}
			v, err := exec.Command(path, "version").CombinedOutput()
			if err != nil || !strings.Contains(string(v), stamp.Version) || !strings.Contains(string(v), stamp.Revision) {
				t.Errorf("%s version: %v %q, want %s and %s", p, err, v, stamp.Version, stamp.Revision)
			}
		}
		checkSBOM(t, filepath.Join(out, name+".cdx.json"), stamp, bin.data)
		t.Logf("%s: %s %.1f MB", p, filepath.Base(arch), float64(size(t, arch))/1e6)
	}

	// Reproducible: the same commit, built again, gives the same bytes.
	again := t.TempDir()
	host := release.Platform{OS: "linux", Arch: "amd64"}
	if _, err := release.Build(root, again, stamp, []release.Platform{host}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{release.Name(stamp.Version, host) + ".tar.gz", release.Name(stamp.Version, host) + ".cdx.json"} {
		a, _ := release.FileSHA256(filepath.Join(out, f))
		b, _ := release.FileSHA256(filepath.Join(again, f))
		if a != b {
			t.Errorf("%s: two builds of the same commit differ (%s, %s)", f, a, b)
		}
	}
}

type file struct {
	data []byte
	mode int64
}

// unpack reads an archive's regular files, and checks each carries the
// commit's time.
func unpack(t *testing.T, path string, mtime time.Time) map[string]file {
	t.Helper()
	files := map[string]file{}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		for _, f := range zr.File {
			if !f.Modified.Equal(mtime) {
				t.Errorf("%s: %s dated %v, want the commit's %v", filepath.Base(path), f.Name, f.Modified, mtime)
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			files[f.Name] = file{b, int64(f.Mode().Perm())}
		}
		return files
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s: %s is not a regular file", filepath.Base(path), h.Name)
			continue
		}
		if !h.ModTime.Equal(mtime) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s dated %v, owned by %d:%d; want the commit's %v, 0:0", filepath.Base(path), h.Name, h.ModTime, h.Uid, h.Gid, mtime)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{b, h.Mode}
	}
	return files
}

// checkBinary: the executable format and machine of p, static (no cgo), and
// the stamp in its build information.
func checkBinary(t *testing.T, p release.Platform, b []byte, s build.Stamp) {
	t.Helper()
	r := bytes.NewReader(b)
	var machine string
	switch p.OS {
	case "linux":
		f, err := elf.NewFile(r)
		if err != nil {
			t.Errorf("%s: not ELF: %v", p, err)
			return
		}
		machine = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
		if f.Section(".interp") != nil {
			t.Errorf("%s: dynamically linked (has .interp)", p)
		}
	case "darwin":
		f, err := macho.NewFile(r)
		if err != nil {
			t.Errorf("%s: not Mach-O: %v", p, err)
			return
		}
		machine = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil {
			t.Errorf("%s: not PE: %v", p, err)
			return
		}
		machine = map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
	}
	if machine != p.Arch {
		t.Errorf("%s: the binary is for %q", p, machine)
	}
	bi, err := buildinfo.Read(r)
	if err != nil {
		t.Errorf("%s: no build information: %v", p, err)
		return
	}
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	if settings["GOOS"] != p.OS || settings["GOARCH"] != p.Arch || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("%s: built with %v", p, settings)
	}
	// -trimpath keeps -ldflags out of the build information: the -X
	// strings are in the binary's data.
	if !bytes.Contains(b, []byte(s.Version)) || !bytes.Contains(b, []byte(s.Revision)) {
		t.Errorf("%s: the binary holds no %s and %s", p, s.Version, s.Revision)
	}
}

// checkSBOM: a CycloneDX document for this binary — keycap at the stamp's
// version, its hash, and the modules linked into it with their purls.
func checkSBOM(t *testing.T, path string, s build.Stamp, binary []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Metadata == nil || bom.Metadata.Component == nil {
		t.Fatalf("%s: spec %v, metadata %+v", filepath.Base(path), bom.SpecVersion, bom.Metadata)
	}
	main := bom.Metadata.Component
	if main.Name != "github.com/keycap/keycap/cmd/keycap" || main.Version != s.Version {
		t.Errorf("%s: the main component is %s %s", filepath.Base(path), main.Name, main.Version)
	}
	if main.Hashes == nil || len(*main.Hashes) != 1 || (*main.Hashes)[0].Value != sha(binary) {
		t.Errorf("%s: the main component's hash %+v is not the binary's %s", filepath.Base(path), main.Hashes, sha(binary))
	}
	if bom.Metadata.Timestamp != s.Time.Format(time.RFC3339) {
		t.Errorf("%s: timestamp %s, want the commit's", filepath.Base(path), bom.Metadata.Timestamp)
	}
	purls := map[string]string{}
	if bom.Components != nil {
		for _, c := range *bom.Components {
			purls[c.Name] = c.PackageURL
		}
	}
	for _, m := range []string{"github.com/redis/go-redis/v9", "github.com/prometheus/client_golang", "go.yaml.in/yaml/v3", "std"} {
		if !strings.HasPrefix(purls[m], "pkg:golang/") {
			t.Errorf("%s: no component %s with a Go purl (%q)", filepath.Base(path), m, purls[m])
		}
	}
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
