// Package image builds keycap's OCI image without a container daemon: the
// static keycap binary as the one layer over an empty base (FROM scratch),
// run as a non-root user, one image per architecture under one index.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts, which the chart and the docs rely on.
const (
	Binary     = "/keycap"                 // the entrypoint
	User       = "65532:65532"             // non-root ("nonroot" in distroless images); no /etc/passwd needed
	ConfigFile = "/etc/keycap/keycap.yaml" // where the default command reads the configuration
	Source     = "https://github.com/keycap/keycap"
)

// Ports are the ports the image declares: the proxy and the admin listener
// (/metrics, /healthz, /readyz), as a configuration for a container sets
// them (listen: ":8080", admin: ":9091").
var Ports = []string{"8080/tcp", "9091/tcp"}

// Options is what Build puts in the image.
type Options struct {
	// Binaries maps an architecture (amd64, arm64) to the path of a static
	// linux keycap binary built for it.
	Binaries map[string]string
	Version  string    // org.opencontainers.image.version; keycap version says the same
	Revision string    // the commit
	Created  time.Time // the commit's time: the image's and every file's, for a reproducible image
}

// Build returns the image index: one image per architecture, each the
// binary alone at /keycap.
func Build(o Options) (v1.ImageIndex, error) {
	if len(o.Binaries) == 0 {
		return nil, fmt.Errorf("image: no binaries")
	}
	archs := make([]string, 0, len(o.Binaries))
	for a := range o.Binaries {
		archs = append(archs, a)
	}
	sort.Strings(archs)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		img, err := archImage(arch, o.Binaries[arch], o)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx, nil
}

func archImage(arch, binary string, o Options) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	layer, err := binaryLayer(bin, o.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "deploy/cmd/keycap-image: " + Binary, Comment: "the static keycap binary"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: o.Created}
	ports := map[string]struct{}{}
	for _, p := range Ports {
		ports[p] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   []string{Binary},
		Cmd:          []string{"serve", "-watch", ConfigFile},
		WorkingDir:   "/",
		ExposedPorts: ports,
		StopSignal:   "SIGTERM",
		Labels:       Labels(o),
	}
	return mutate.ConfigFile(img, cf)
}

// Labels returns the image's OCI annotations, as labels.
func Labels(o Options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "keycap",
		"org.opencontainers.image.description": "A gateway that caps requests in flight per key and WebSockets per user, across servers",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// binaryLayer returns a layer holding the binary at Binary, owned by root
// and executable by all (the non-root user runs it, and cannot change it).
func binaryLayer(bin []byte, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Name: Binary[1:], Mode: 0o555, Size: int64(len(bin)), Typeflag: tar.TypeReg,
		ModTime: mtime, Uid: 0, Gid: 0, Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compressed once, here: the layer is read several times (digest,
	// layout, sizes), and given gzip it uses these bytes as they are.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(buf.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	raw := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes the index as an OCI image layout at dir, tagged tag
// (podman pull oci:DIR:TAG, skopeo copy, crane push --index DIR REF).
func WriteLayout(dir string, idx v1.ImageIndex, tag string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// Size is one architecture's image: its digest, what a registry stores and
// a node pulls (manifest, config and compressed layers), and what the
// unpacked files take.
type Size struct {
	Arch       string
	Digest     v1.Hash
	Compressed int64
	Unpacked   int64
}

// Sizes returns the size of each image of the index.
func Sizes(idx v1.ImageIndex) ([]Size, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Size
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		s := Size{Arch: d.Platform.Architecture, Digest: d.Digest}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		raw, err := img.RawManifest()
		if err != nil {
			return nil, err
		}
		s.Compressed = int64(len(raw)) + m.Config.Size
		layers, err := img.Layers()
		if err != nil {
			return nil, err
		}
		for _, l := range layers {
			n, err := l.Size()
			if err != nil {
				return nil, err
			}
			s.Compressed += n
			rc, err := l.Uncompressed()
			if err != nil {
				return nil, err
			}
			u, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			s.Unpacked += u
		}
		out = append(out, s)
	}
	return out, nil
}
