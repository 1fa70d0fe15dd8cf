// Package chart lints and renders keycap's Helm chart (deploy/helm/keycap)
// with Helm's own Go packages, as `helm lint --strict` and `helm template`
// do, with no cluster and no helm binary.
package chart

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
)

// Dir is the chart's folder, relative to the repository's root.
const Dir = "deploy/helm/keycap"

// KubeVersion is the oldest Kubernetes the chart supports (its kubeVersion),
// the version it is rendered and linted for.
const KubeVersion = "v1.29.0"

// Lint runs helm lint --strict on the chart with vals over its values.yaml:
// any error or warning is an error.
func Lint(dir string, vals map[string]any) error {
	kv, err := common.ParseKubeVersion(KubeVersion)
	if err != nil {
		return err
	}
	l := action.NewLint()
	l.Strict = true
	l.Namespace = "keycap"
	l.KubeVersion = kv
	res := l.Run([]string{dir}, vals)
	var errs []error
	for _, m := range res.Messages {
		// Severity 1 is INFO (e.g. "icon is recommended"): advice, not a fault.
		if m.Severity > 1 {
			errs = append(errs, fmt.Errorf("%s", m))
		}
	}
	errs = append(errs, res.Errors...)
	return errors.Join(errs...)
}

// Render returns the manifests helm template renders from the chart for a
// release named name in namespace, with vals over its values.yaml.
func Render(dir, name, namespace string, vals map[string]any) (string, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", err
	}
	kv, err := common.ParseKubeVersion(KubeVersion)
	if err != nil {
		return "", err
	}
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.NewTextHandler(io.Discard, nil)))
	in := action.NewInstall(cfg)
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName = name
	in.Namespace = namespace
	in.Replace = true
	in.KubeVersion = kv
	in.DisableHooks = true
	r, err := in.Run(ch, vals)
	if err != nil {
		return "", err
	}
	rel, ok := r.(*release.Release)
	if !ok {
		return "", fmt.Errorf("helm returned a %T, not a release", r)
	}
	return strings.TrimSpace(rel.Manifest) + "\n", nil
}

// Path returns the chart's folder in the repository at root.
func Path(root string) string { return filepath.Join(root, filepath.FromSlash(Dir)) }

// ManifestsFile is the chart rendered with its default values, relative to
// the repository's root.
const ManifestsFile = "deploy/manifests/keycap.yaml"

// Manifests returns what ManifestsFile holds: the chart in dir rendered as
// release "keycap" with its default values, under a header saying so.
func Manifests(dir string) (string, error) {
	m, err := Render(dir, "keycap", "default", nil)
	if err != nil {
		return "", err
	}
	return "# keycap's gateway as plain manifests: deploy/helm/keycap rendered with its\n" +
		"# default values (go run ./deploy/cmd/keycap-manifests). Edit the ConfigMap's\n" +
		"# keycap.yaml (docs/gateway.md), then kubectl apply -f this file.\n" + m, nil
}
