package chart_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/keycap/keycap/deploy/build"
	"github.com/keycap/keycap/deploy/chart"
	"github.com/keycap/keycap/internal/testenv"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := build.Repo()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The value sets the chart is linted, rendered and validated with: its
// defaults, and every optional part switched on.
var valueSets = map[string]map[string]any{
	"defaults": nil,
	"everything": {
		"image":               map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
		"adminToken":          map[string]any{"value": "an-admin-token-of-32-bytes-long!"},
		"store":               map[string]any{"type": "cluster", "addrs": []any{"redis-0:6379", "redis-1:6379"}, "password": "${REDIS_PASSWORD}", "passwordSecret": map[string]any{"name": "redis", "key": "pw"}},
		"serviceMonitor":      map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}},
		"autoscaling":         map[string]any{"enabled": true},
		"env":                 []any{map[string]any{"name": "JWT_SECRET", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "jwt", "key": "secret"}}}},
		"volumes":             []any{map[string]any{"name": "jwks", "secret": map[string]any{"secretName": "jwks"}}},
		"volumeMounts":        []any{map[string]any{"name": "jwks", "mountPath": "/etc/keycap-jwks", "readOnly": true}},
		"resources":           map[string]any{"limits": map[string]any{"cpu": "1", "memory": "256Mi"}},
		"tolerations":         []any{map[string]any{"key": "dedicated", "operator": "Exists"}},
		"podDisruptionBudget": map[string]any{"enabled": false},
	},
	"existing secret": {
		"adminToken": map[string]any{"existingSecret": "keycap-admin"},
		"watch":      false,
	},
}

// TestLint is helm lint --strict on every value set.
func TestLint(t *testing.T) {
	dir := chart.Path(root(t))
	for name, vals := range valueSets {
		if err := chart.Lint(dir, vals); err != nil {
			t.Errorf("%s: helm lint: %v", name, err)
		}
	}
}

// TestRejects: values the chart refuses, each with a message that names the
// value to change.
func TestRejects(t *testing.T) {
	dir := chart.Path(root(t))
	for _, c := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"config": map[string]any{"listen": ":9000"}}, "config.listen is set by the chart"},
		{map[string]any{"config": map[string]any{"store": map[string]any{"type": "memory"}}}, "config.store is set by the chart"},
		{map[string]any{"store": map[string]any{"type": "memory"}}, "store.type memory keeps each replica's caps apart"},
		{map[string]any{"adminToken": map[string]any{"value": "short"}}, "adminToken.value must be at least 16 bytes"},
	} {
		_, err := chart.Render(dir, "keycap", "default", c.vals)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("values %v: got %v, want an error with %q", c.vals, err, c.want)
		}
	}
	// One replica may keep its caps in memory.
	if _, err := chart.Render(dir, "keycap", "default", map[string]any{"replicaCount": 1, "store": map[string]any{"type": "memory", "url": nil}}); err != nil {
		t.Errorf("one replica on memory: %v", err)
	}
}

// TestManifestsRendered: deploy/manifests/keycap.yaml is the chart rendered
// with its defaults.
func TestManifestsRendered(t *testing.T) {
	r := root(t)
	want, err := chart.Manifests(chart.Path(r))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r, filepath.FromSlash(chart.ManifestsFile)))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the chart rendered: run go run ./deploy/cmd/keycap-manifests", chart.ManifestsFile)
	}
}

// objects is what a rendering holds, decoded strictly into the Kubernetes
// API types: an unknown field, a field of the wrong type or an unknown kind
// is an error.
type objects struct {
	deployments []appsv1.Deployment
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	services    []corev1.Service
	pdbs        []policyv1.PodDisruptionBudget
	hpas        []autoscalingv2.HorizontalPodAutoscaler
	monitors    []monitoringv1.ServiceMonitor
}

func decode(t *testing.T, manifests string) objects {
	t.Helper()
	var o objects
	for _, doc := range strings.Split(manifests, "\n---") {
		if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" || onlyComments(doc) {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		var into any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 Deployment":
			o.deployments = append(o.deployments, appsv1.Deployment{})
			into = &o.deployments[len(o.deployments)-1]
		case "v1 ConfigMap":
			o.configMaps = append(o.configMaps, corev1.ConfigMap{})
			into = &o.configMaps[len(o.configMaps)-1]
		case "v1 Secret":
			o.secrets = append(o.secrets, corev1.Secret{})
			into = &o.secrets[len(o.secrets)-1]
		case "v1 Service":
			o.services = append(o.services, corev1.Service{})
			into = &o.services[len(o.services)-1]
		case "policy/v1 PodDisruptionBudget":
			o.pdbs = append(o.pdbs, policyv1.PodDisruptionBudget{})
			into = &o.pdbs[len(o.pdbs)-1]
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o.hpas = append(o.hpas, autoscalingv2.HorizontalPodAutoscaler{})
			into = &o.hpas[len(o.hpas)-1]
		case "monitoring.coreos.com/v1 ServiceMonitor":
			o.monitors = append(o.monitors, monitoringv1.ServiceMonitor{})
			into = &o.monitors[len(o.monitors)-1]
		default:
			t.Fatalf("unexpected object %s %s", head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: %v\n%s", head.Kind, err, doc)
		}
	}
	return o
}

func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// TestManifestsValid renders every value set and the sidecar example and
// checks them as the API server and the kubelet would: strict decoding into
// the API types, then the references between objects — selectors that
// select the pods, probe and Service ports that name a container port,
// mounts of declared volumes, the ConfigMap and Secrets the pod reads.
func TestManifestsValid(t *testing.T) {
	r := root(t)
	sets := map[string]string{}
	for name, vals := range valueSets {
		m, err := chart.Render(chart.Path(r), "keycap", "default", vals)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sets[name] = m
	}
	sidecar, err := os.ReadFile(filepath.Join(r, "deploy", "manifests", "sidecar-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sets["sidecar example"] = string(sidecar)
	external := map[string]bool{"keycap-admin": true, "redis": true, "jwt": true, "jwks": true}
	for name, m := range sets {
		t.Run(name, func(t *testing.T) {
			o := decode(t, m)
			if len(o.deployments) != 1 || len(o.configMaps) != 1 || len(o.services) != 1 {
				t.Fatalf("want one Deployment, ConfigMap and Service: %d, %d, %d", len(o.deployments), len(o.configMaps), len(o.services))
			}
			checkDeployment(t, o, external)
			switch name {
			case "defaults":
				if len(o.pdbs) != 1 || len(o.hpas) != 0 || len(o.monitors) != 0 || len(o.secrets) != 0 {
					t.Errorf("defaults: want a PDB only beside the three, got %d PDB, %d HPA, %d ServiceMonitor, %d Secret", len(o.pdbs), len(o.hpas), len(o.monitors), len(o.secrets))
				}
			case "everything":
				if len(o.pdbs) != 0 || len(o.hpas) != 1 || len(o.monitors) != 1 || len(o.secrets) != 1 {
					t.Errorf("everything: got %d PDB, %d HPA, %d ServiceMonitor, %d Secret", len(o.pdbs), len(o.hpas), len(o.monitors), len(o.secrets))
				}
				if o.deployments[0].Spec.Replicas != nil {
					t.Error("with the HPA on, the Deployment must leave replicas to it")
				}
				if img := o.deployments[0].Spec.Template.Spec.Containers[0].Image; !strings.Contains(img, "@sha256:") {
					t.Errorf("image %q: the digest does not pin it", img)
				}
			}
			for _, h := range o.hpas {
				if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != o.deployments[0].Name {
					t.Errorf("the HPA scales %s %s", h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
				}
			}
			pod := o.deployments[0].Spec.Template.Labels
			for _, p := range o.pdbs {
				if !selects(p.Spec.Selector.MatchLabels, pod) {
					t.Errorf("the PDB's selector %v does not select the pods %v", p.Spec.Selector.MatchLabels, pod)
				}
			}
			for _, s := range o.services {
				if !selects(s.Spec.Selector, pod) {
					t.Errorf("the Service's selector %v does not select the pods %v", s.Spec.Selector, pod)
				}
				for _, p := range s.Spec.Ports {
					if !hasPort(keycapContainer(t, o.deployments[0]), p.TargetPort) {
						t.Errorf("Service port %s targets %s, which the keycap container does not declare", p.Name, p.TargetPort.String())
					}
				}
			}
			for _, sm := range o.monitors {
				if !selects(sm.Spec.Selector.MatchLabels, o.services[0].Labels) {
					t.Errorf("the ServiceMonitor's selector %v does not select the Service %v", sm.Spec.Selector.MatchLabels, o.services[0].Labels)
				}
				if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("the ServiceMonitor scrapes %+v, want /metrics on the admin port", sm.Spec.Endpoints)
				}
			}
		})
	}
}

// keycapContainer is the keycap container: the Deployment's own, or the
// sidecar example's native sidecar.
func keycapContainer(t *testing.T, d appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range append(slices.Clone(d.Spec.Template.Spec.InitContainers), d.Spec.Template.Spec.Containers...) {
		if c.Name == "keycap" {
			return c
		}
	}
	t.Fatal("no keycap container")
	return corev1.Container{}
}

func checkDeployment(t *testing.T, o objects, external map[string]bool) {
	t.Helper()
	d := o.deployments[0]
	spec := d.Spec.Template.Spec
	if d.Spec.Selector == nil || !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("the Deployment's selector does not select its pods")
	}
	c := keycapContainer(t, d)
	if len(spec.InitContainers) > 0 && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
		t.Error("the sidecar must be a native sidecar (restartPolicy: Always)")
	}
	// Non-root, read-only, nothing to escalate: what the image (user
	// 65532, the binary alone) allows.
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("keycap's securityContext %+v: want a read-only root, no privilege escalation, every capability dropped", sc)
	}
	nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) ||
		(spec.SecurityContext != nil && spec.SecurityContext.RunAsNonRoot != nil && *spec.SecurityContext.RunAsNonRoot)
	if !nonRoot {
		t.Error("keycap must run as non-root")
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" || c.Args[len(c.Args)-1] != "/etc/keycap/keycap.yaml" {
		t.Errorf("args %v: want serve … /etc/keycap/keycap.yaml", c.Args)
	}
	// Health on the admin port, readiness on /readyz (which drains).
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "admin" || !hasPort(c, p.probe.HTTPGet.Port) {
			t.Errorf("%s probe %s on %s: want %s on the admin port", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	// Mounts name volumes; volumes and env name objects that exist.
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s of no volume", m.Name)
		}
	}
	cfg, ok := vols["config"]
	if !ok {
		cfg = vols["keycap-config"]
	}
	if cfg.ConfigMap == nil || cfg.ConfigMap.Name != o.configMaps[0].Name {
		t.Errorf("the config volume %+v is not the ConfigMap %s", cfg, o.configMaps[0].Name)
	}
	if _, ok := o.configMaps[0].Data["keycap.yaml"]; !ok {
		t.Error("the ConfigMap holds no keycap.yaml")
	}
	secrets := map[string]bool{}
	for _, s := range o.secrets {
		secrets[s.Name] = true
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			if n := e.ValueFrom.SecretKeyRef.Name; !secrets[n] && !external[n] {
				t.Errorf("env %s reads Secret %s, which is neither rendered nor given", e.Name, n)
			}
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 15 {
		t.Errorf("terminationGracePeriodSeconds %v: too short for the drain", g)
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasPort(c corev1.Container, p intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return true
		}
	}
	return false
}

// TestChartRuns runs what the chart renders, without a cluster: keycap
// built as the image holds it, the rendered ConfigMap's keycap.yaml (with
// only its two listen addresses moved to free loopback ports), the
// Deployment's arguments and environment (the admin token from the rendered
// Secret), against a Redis of its own. The probes the Deployment declares
// answer, the route's cap holds through the proxy, the admin API takes the
// Secret's token, and on SIGTERM readiness turns 503 while the proxy still
// serves, for the rendered shutdown_delay.
func TestChartRuns(t *testing.T) {
	r := root(t)
	redis := testenv.StartRedis(t)
	held, arrived := make(chan struct{}), make(chan struct{}, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/hold" {
			arrived <- struct{}{}
			select {
			case <-held:
			case <-req.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "upstream\n")
	}))
	defer upstream.Close()
	defer close(held)

	token := "token-from-the-rendered-secret"
	m, err := chart.Render(chart.Path(r), "keycap", "default", map[string]any{
		"store":         map[string]any{"url": "redis://" + redis.Addr, "prefix": fmt.Sprintf("keycap-chart-%d:", time.Now().UnixNano())},
		"adminToken":    map[string]any{"value": token},
		"shutdownDelay": "2s",
		"config": map[string]any{
			"upstream": upstream.URL,
			"routes": []any{map[string]any{"name": "api", "path": "/", "limits": []any{
				map[string]any{"max": 1, "key": "header:X-User", "retry_after": "1s"},
			}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, m)
	c := o.deployments[0].Spec.Template.Spec.Containers[0]

	// The configuration as mounted, listen addresses moved off :8080/:9091.
	proxy, admin := freePort(t), freePort(t)
	conf := o.configMaps[0].Data["keycap.yaml"]
	for old, now := range map[string]string{`listen: ":8080"`: `listen: "` + proxy + `"`, `admin: ":9091"`: `admin: "` + admin + `"`} {
		if !strings.Contains(conf, old) {
			t.Fatalf("the rendered configuration has no %s:\n%s", old, conf)
		}
		conf = strings.Replace(conf, old, now, 1)
	}
	mount := t.TempDir()
	if err := os.WriteFile(filepath.Join(mount, "keycap.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.Args)
	for i, a := range args {
		args[i] = strings.Replace(a, "/etc/keycap", mount, 1)
	}
	env := os.Environ()
	for _, e := range c.Env {
		ref := e.ValueFrom.SecretKeyRef
		if ref == nil || ref.Name != o.secrets[0].Name {
			t.Fatalf("env %s: not from the rendered Secret", e.Name)
		}
		env = append(env, e.Name+"="+string(o.secrets[0].Data[ref.Key]))
	}

	bin := filepath.Join(t.TempDir(), "keycap")
	stamp, err := build.GitStamp(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := build.Keycap(r, runtime.GOOS, runtime.GOARCH, stamp, bin); err != nil {
		t.Fatal(err)
	}
	check := exec.Command(bin, "check", "-config", filepath.Join(mount, "keycap.yaml"))
	check.Env = env
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("keycap check on the rendered configuration: %v\n%s", err, out)
	}

	var logs bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("keycap's log:\n%s", logs.String())
		}
	}()

	hc := &http.Client{Timeout: 30 * time.Second} // the held request waits through the drain
	get := func(url string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, 30*time.Second, func() bool { s, _ := get("http://" + admin + c.StartupProbe.HTTPGet.Path); return s == 200 })
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if s, b := get("http://" + admin + p.HTTPGet.Path); s != 200 {
			t.Fatalf("probe %s: %d %s", p.HTTPGet.Path, s, b)
		}
	}
	if s, b := get("http://"+admin+"/admin/api/summary", "Authorization", "Bearer "+token); s != 200 {
		t.Errorf("the admin API with the Secret's token: %d %s", s, b)
	}

	// alice's one slot held; her second request refused, bob served.
	holdErr := make(chan error, 1)
	go func() {
		s, b := get("http://"+proxy+"/hold", "X-User", "alice")
		if s != 200 {
			holdErr <- fmt.Errorf("the held request: %d %s", s, b)
			return
		}
		holdErr <- nil
	}()
	select {
	case <-arrived:
	case err := <-holdErr:
		t.Fatalf("the held request ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not reach the upstream in 10 s")
	}
	if s, b := get("http://"+proxy+"/", "X-User", "alice"); s != 429 {
		t.Errorf("alice's second request: %d %s, want 429", s, b)
	}
	if s, b := get("http://"+proxy+"/", "X-User", "bob"); s != 200 {
		t.Errorf("bob: %d %s", s, b)
	}

	// SIGTERM: readiness 503 at once, the proxy still serving.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	waitFor(t, 5*time.Second, func() bool { s, _ := get("http://" + admin + c.ReadinessProbe.HTTPGet.Path); return s == 503 })
	notReady := time.Since(termAt)
	if s, b := get("http://"+proxy+"/", "X-User", "bob"); s != 200 {
		t.Errorf("while draining: %d %s", s, b)
	}
	if notReady > time.Second {
		t.Errorf("readiness turned 503 %v after SIGTERM", notReady)
	}
	t.Logf("SIGTERM → /readyz 503 in %v", notReady.Round(time.Millisecond))
	// The held request ends when its upstream answers; then the gateway exits 0.
	select {
	case held <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Error("the held request had left its upstream before it was let go")
	}
	if err := <-holdErr; err != nil {
		t.Error(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("keycap exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("keycap did not exit within 20 s of SIGTERM")
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("errors in the log:\n%s", logs.String())
	}
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

// waitFor polls a process the test does not control (there is no event to
// wait on) until ok, for at most d.
func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
