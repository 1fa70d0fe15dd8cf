package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/gateway"
)

func TestExampleConfigIsValid(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.LoadConfig("../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Check(cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[0].Pool != "reports" || *cfg.Routes[0].Limits[0].Max != 2 || cfg.Pusher == nil || cfg.Pusher.Upstream != cfg.Upstream {
		t.Fatalf("parsed %+v", cfg)
	}
}

// TestConfigErrorsNameLineAndField: every problem of a file is reported, with
// its line and the field's path.
func TestConfigErrorsNameLineAndField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"no upstream", "routes: []\n", []string{"line 1: upstream: required"}},
		{"bad upstream", "upstream: ftp://x\n", []string{"line 1: upstream: invalid URL"}},
		{"unknown field", "upstream: http://x\nupstreem: http://y\n", []string{"line 2: upstreem: unknown field"}},
		{"wrong type", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - max: lots\n", []string{"line 6: routes[0].limits[0].max:", "lots"}},
		{"bad duration", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - {max: 1, wait: soon}\n", []string{"line 6: routes[0].limits[0].wait: invalid duration \"soon\""}},
		{"decoding goes on", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - max: 1\n        wait: soon\n      - max: lots\n", []string{
			"line 7: routes[0].limits[0].wait: invalid duration",
			"line 8: routes[0].limits[1].max:",
		}},
		{"route problems", `upstream: http://x
routes:
  - name: a
    path: exports
    methods: [post]
    limits:
      - max: -1
        key: header
        fail_mode: maybe
      - max: 1
        ttl: 100us
`, []string{
			"line 4: routes[0].path: required, starting with /",
			"line 5: routes[0].methods[0]: invalid method \"post\"",
			"line 7: routes[0].limits[0].max: must be at least 0",
			"line 8: routes[0].limits[0].key: invalid key \"header\"",
			"line 9: routes[0].limits[0].fail_mode: invalid fail mode",
			"line 11: routes[0].limits[1].ttl: must be at least 1ms",
		}},
		{"missing max", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - key: ip\n", []string{"line 6: routes[0].limits[0].max: required"}},
		{"claim without jwt", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits: [{max: 1, key: \"claim:sub\"}]\n", []string{"needs the jwt section"}},
		{"shared pool, other limits", "upstream: http://x\nroutes:\n  - {name: a, path: /a, pool: p, limits: [{max: 1}]}\n  - {name: b, path: /b, pool: p, limits: [{max: 2}]}\n", []string{"line 4: routes[1].limits: routes \"a\" and \"b\" share pool \"p\""}},
		{"reserved pool", "upstream: http://x\nroutes:\n  - {name: job:x, path: /a, limits: [{max: 1}]}\n", []string{"reserved for job limits"}},
		{"store", "upstream: http://x\nstore:\n  type: redis\n  prefix: \"a{b\"\n", []string{"line 3: store.url: required for a redis store", "line 4: store.prefix: must not contain"}},
		{"store type", "upstream: http://x\nstore: {type: etcd}\n", []string{"line 2: store.type: invalid store \"etcd\""}},
		{"client ip", "upstream: http://x\nclient_ip:\n  trusted_proxies: [10.0.0.0/33]\n  header: X-Real-IP\n", []string{"line 3: client_ip.trusted_proxies[0]", "line 4: client_ip.header"}},
		{"pusher", `upstream: http://x
pusher:
  apps:
    - id: "1"
      key: k
      error_code: 4200
    - {id: "2", key: k, secret: s}
`, []string{"line 4: pusher.apps[0].secret: required", "line 6: pusher.apps[0].error_code: 4200 lets pusher-js reconnect", "line 7: pusher.apps[1].key: key \"k\" is used twice"}},
		{"jwt", "upstream: http://x\njwt: {hs256_secret: short}\n", []string{"line 2: jwt.hs256_secret: too short"}},
		{"env not set", "upstream: ${KEYCAP_TEST_UNSET_VARIABLE}\n", []string{"environment variables not set: KEYCAP_TEST_UNSET_VARIABLE"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseConfig("test.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigEnvAndDefaults(t *testing.T) {
	t.Setenv("KEYCAP_TEST_SECRET", "from-the-environment")
	cfg, err := gateway.ParseConfig("test.yaml", []byte(`upstream: http://x # not ${EXPANDED} in a comment
pusher:
  apps: [{id: "1", key: k, secret: "${KEYCAP_TEST_SECRET}"}]
routes:
  - name: a
    path: /a
    limits: [{max: 1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Pusher.Apps[0].Secret != "from-the-environment" {
		t.Fatalf("secret %q", cfg.Pusher.Apps[0].Secret)
	}
	if cfg.Listen[0] != "127.0.0.1:8080" || cfg.Store.Type != "memory" || cfg.Routes[0].Limits[0].Key != "ip" ||
		time.Duration(cfg.ShutdownTimeout) != 30*time.Second || cfg.Routes[0].Pool != "a" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestConflictingRoutesAreAConfigError(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.ParseConfig("test.yaml", []byte("upstream: http://x\nroutes:\n  - {name: a, path: /a, limits: [{max: 1}]}\n  - {name: b, path: /a, limits: [{max: 1}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Check(cfg); err == nil || !strings.Contains(err.Error(), `route "b"`) {
		t.Fatalf("Check = %v, want an error naming route b", err)
	}
}

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	out, err := runBinary(t, "check", "-config", "../examples/gateway.yaml")
	if err != nil || !strings.Contains(out, "configuration OK") {
		t.Fatalf("check on the example: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits: [{max: -3}]\n"), 0o600)
	out, err = runBinary(t, "check", "-config", bad)
	if err == nil || !strings.Contains(out, "line 5: routes[0].limits[0].max") {
		t.Fatalf("check on a bad file: %v\n%s", err, out)
	}
}

// FuzzParseConfig: any file gets a configuration or an error, never a panic,
// and an accepted configuration has what serving needs.
func FuzzParseConfig(f *testing.F) {
	for _, file := range []string{"../examples/gateway.yaml"} {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte("upstream: http://x\nroutes: [{name: a, path: /a, limits: [{max: 1, key: 'claim:sub'}]}]\njwt: {hs256_secret: ${X}}\n"))
	f.Add([]byte("upstream: http://x\npusher: {apps: [{id: '1', key: k, secret: s, error_code: 4301}]}\n"))
	f.Add([]byte("listen: [a, b]\nstore: {type: sentinel, addrs: [x], master: m}\n# ${Y}\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := gateway.ParseConfig("fuzz.yaml", raw)
		if err != nil {
			return
		}
		if cfg.Upstream == "" || len(cfg.Listen) == 0 || cfg.Admin == "" || cfg.Store.Type == "" {
			t.Fatalf("accepted without defaults: %+v", cfg)
		}
		for _, r := range cfg.Routes {
			if len(r.Limits) == 0 || r.Pool == "" {
				t.Fatalf("accepted route %q without limits or pool", r.Name)
			}
			for _, l := range r.Limits {
				if l.Max == nil || *l.Max < 0 {
					t.Fatalf("accepted route %q with max %v", r.Name, l.Max)
				}
			}
		}
	})
}
