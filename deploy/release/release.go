// Package release builds keycap's release files: an archive of the static
// binary for each platform, a CycloneDX SBOM of each binary, and the
// SHA256SUMS of them all — byte for byte the same for the same commit, on
// any machine (fixed file times, owners and order; the binaries built by
// package build).
package release

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"

	"github.com/keycap/keycap/deploy/build"
)

// Platform is a target: GOOS and GOARCH.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// Platforms are the targets a release ships.
var Platforms = []Platform{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// ChecksumsFile lists the SHA-256 of every other file of a release, in the
// format sha256sum -c reads.
const ChecksumsFile = "SHA256SUMS"

// Docs are the files beside the binary in each archive, relative to the
// repository's root.
var Docs = []string{"LICENSE", "README.md"}

// Name is the base name of a platform's files: keycap_<version>_<os>_<arch>.
func Name(version string, p Platform) string {
	return fmt.Sprintf("keycap_%s_%s_%s", version, p.OS, p.Arch)
}

// Build writes the release of the repository at root into out (which it
// creates; files there are replaced) for the given platforms, and returns
// the names of the files written, SHA256SUMS last.
func Build(root, out string, s build.Stamp, platforms []Platform) ([]string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "keycap-release")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var files []string
	for _, p := range platforms {
		exe := "keycap"
		if p.OS == "windows" {
			exe += ".exe"
		}
		binary := filepath.Join(tmp, p.OS+"-"+p.Arch, exe)
		if err := build.Keycap(root, p.OS, p.Arch, s, binary); err != nil {
			return nil, err
		}
		name := Name(s.Version, p)
		entries := []entry{{name + "/" + exe, binary, 0o755}}
		for _, d := range Docs {
			entries = append(entries, entry{name + "/" + d, filepath.Join(root, d), 0o644})
		}
		archive := name + ".tar.gz"
		write := writeTarGz
		if p.OS == "windows" {
			archive, write = name+".zip", writeZip
		}
		if err := write(filepath.Join(out, archive), entries, s.Time); err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		sbom := name + ".cdx.json"
		if err := writeSBOM(filepath.Join(out, sbom), binary, s); err != nil {
			return nil, fmt.Errorf("%s: %w", sbom, err)
		}
		files = append(files, archive, sbom)
	}
	if err := writeChecksums(out, files); err != nil {
		return nil, err
	}
	return append(files, ChecksumsFile), nil
}

// entry is a file of an archive: its name there, where it is read from, its
// mode.
type entry struct {
	name, path string
	mode       int64
}

func writeTarGz(file string, entries []entry, mtime time.Time) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		b, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg,
			Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

func writeZip(file string, entries []entry, mtime time.Time) error {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		b, err := os.ReadFile(e.path)
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(os.FileMode(e.mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// writeSBOM writes binary's CycloneDX SBOM: keycap's module and every module
// linked into it, the Go standard library included, from the build
// information the Go linker records in the binary. The serial number is
// derived from the binary's hash and the timestamp is the commit's, so that
// the same binary gives the same SBOM.
func writeSBOM(file, binary string, s build.Stamp) error {
	g, err := bin.NewGenerator(binary, bin.WithIncludeStdlib(true), bin.WithVersionOverride(s.Version), bin.WithLogger(zerolog.Nop()))
	if err != nil {
		return err
	}
	bom, err := g.Generate()
	if err != nil {
		return err
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	id := sum
	id[6] = id[6]&0x0f | 0x50 // a name-based UUID (version 5 layout), from the binary
	id[8] = id[8]&0x3f | 0x80
	u := hex.EncodeToString(id[:16])
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", u[:8], u[8:12], u[12:16], u[16:20], u[20:32])
	bom.Metadata.Timestamp = s.Time.UTC().Format(time.RFC3339)
	bom.Metadata.Component.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}}
	var out bytes.Buffer
	enc := cdx.NewBOMEncoder(&out, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return err
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}

func writeChecksums(dir string, files []string) error {
	sorted := append([]string(nil), files...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, f := range sorted {
		sum, err := FileSHA256(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, f)
	}
	return os.WriteFile(filepath.Join(dir, ChecksumsFile), []byte(b.String()), 0o644)
}

// FileSHA256 is the hex SHA-256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReader(f)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
