package gateway_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
)

func TestExampleConfigIsValid(t *testing.T) {
	t.Parallel()
	cfg, err := gateway.LoadConfig("../../../../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Check(cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Routes) != 2 || cfg.Routes[0].Pool != "reports" || *cfg.Routes[0].Limits[0].Max != 2 || cfg.Pusher == nil || cfg.Pusher.Upstream != cfg.Upstream {
		t.Fatalf("parsed %+v", cfg)
	}
	fair, err := gateway.LoadConfig("../../../../examples/gateway-fair.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := gateway.Check(fair); err != nil {
		t.Fatal(err)
	}
	if len(fair.Parents) != 1 || fair.Routes[1].Limits[0].Weight != 3 || fair.Routes[0].Limits[0].Shares["acme"] != 3 {
		t.Fatalf("parsed %+v", fair)
	}
}

// TestConfigErrorsNameLineAndField: every problem of a file is reported at
// once, with its line, column and the field's path — the field whose value is
// wrong, also when several fields share a line.
func TestConfigErrorsNameLineAndField(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "not-a-key.pem")
	_ = os.WriteFile(keyFile, []byte("not a key"), 0o600)
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"no upstream", "routes: []\n", []string{"line 1, column 1: upstream: required"}},
		{"empty file", "", []string{"line 1, column 1: the file is empty"}},
		{"only a comment", "# nothing\n", []string{"the file is empty"}},
		{"bad upstream", "upstream: ftp://x\n", []string{"line 1, column 11: upstream: invalid URL"}},
		{"unknown field", "upstream: http://x\nupstreem: http://y\n", []string{"line 2, column 1: upstreem: unknown field (did you mean upstream?)"}},
		{"unknown field in a section", "upstream: http://x\nstore:\n  type: redis\n  urll: redis://x\n", []string{"line 4, column 3: store.urll: unknown field (did you mean url?)"}},
		{"given twice", "upstream: http://x\nupstream: http://y\n", []string{"line 2, column 1: upstream: given twice"}},
		{"wrong type", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - max: lots\n", []string{"line 6, column 14: routes[0].limits[0].max: want a whole number, not \"lots\""}},
		{"wrong type among fields on one line", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - {max: many, key: \"header:X\", wait: 2s}\n", []string{"line 6, column 15: routes[0].limits[0].max: want a whole number"}},
		{"bad duration among fields on one line", "upstream: http://x\nroutes:\n  - {name: a, path: /a, limits: [{max: 1, ttl: 5 minutes, retry_after: 1s}]}\n", []string{"line 3, column 48: routes[0].limits[0].ttl: invalid duration \"5 minutes\""}},
		{"a list where a value goes", "upstream: [a, b]\n", []string{"line 1, column 11: upstream: want a single value, not a list"}},
		{"decoding goes on", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - max: 1\n        wait: soon\n      - max: lots\n        key: header:X\n", []string{
			"line 7, column 15: routes[0].limits[0].wait: invalid duration",
			"line 8, column 14: routes[0].limits[1].max:",
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
        on_missing: guess
`, []string{
			"line 4, column 11: routes[0].path: required, starting with /",
			"line 5, column 15: routes[0].methods[0]: invalid method \"post\"",
			"line 7, column 14: routes[0].limits[0].max: must be at least 0",
			"line 8, column 14: routes[0].limits[0].key: invalid key \"header\"",
			"line 9, column 20: routes[0].limits[0].fail_mode: invalid \"maybe\": must be \"open\" or \"closed\"",
			"line 11, column 14: routes[0].limits[1].ttl: must be at least 1ms (or 0 for the default), not 100µs",
			"line 12, column 21: routes[0].limits[1].on_missing: invalid \"guess\"",
		}},
		{"bad route pattern", "upstream: http://x\nroutes:\n  - {name: a, path: \"/a/{x\", limits: [{max: 1}]}\n", []string{"line 3, column 21: routes[0].path: parsing \"/a/{x\""}},
		{"conflicting routes", "upstream: http://x\nroutes:\n  - {name: a, path: /a, limits: [{max: 1}]}\n  - {name: b, path: /a, limits: [{max: 1}]}\n", []string{"line 4, column 21: routes[1].path: pattern \"/a\" conflicts with pattern \"/a\""}},
		{"missing max", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits:\n      - key: ip\n", []string{"line 6, column 9: routes[0].limits[0].max: required"}},
		{"two limits on one key", "upstream: http://x\nroutes:\n  - {name: a, path: /a, limits: [{max: 1, key: \"header:x-user\"}, {max: 2, key: \"header:X-User\"}]}\n", []string{"routes[0].limits[1].key: two limits of one route on the same key \"header:X-User\""}},
		{"claim without jwt", "upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits: [{max: 1, key: \"claim:sub\"}]\n", []string{"needs the jwt section"}},
		{"shared pool, other limits", "upstream: http://x\nroutes:\n  - {name: a, path: /a, pool: p, limits: [{max: 1}]}\n  - {name: b, path: /b, pool: p, limits: [{max: 2}]}\n", []string{"line 4, column 42: routes[1].limits: routes \"a\" and \"b\" share pool \"p\""}},
		{"route timeouts and release", "upstream: http://x\nroutes:\n  - {name: a, path: /a, release: never, timeouts: {dial: -1s}, limits: [{max: 1}]}\n", []string{"routes[0].release: invalid \"never\"", "routes[0].timeouts.dial: must be at least 0"}},
		{"store", "upstream: http://x\nstore:\n  type: redis\n  prefix: \"a{b\"\n", []string{"line 3, column 3: store.url: required for a redis store", "line 4, column 11: store.prefix: must not contain"}},
		{"upstream protocol", "upstream: http://x\nupstream_protocol: h2c\nroutes:\n  - {name: a, path: /a, upstream_protocol: grpc, limits: [{max: 1}]}\n", []string{
			"line 2, column 20: upstream_protocol: invalid protocol \"h2c\": auto, http1 or http2 (HTTP/2 only: h2c",
			"line 4, column 44: routes[0].upstream_protocol: invalid protocol \"grpc\"",
		}},
		{"store type", "upstream: http://x\nstore: {type: etcd}\n", []string{"line 2, column 15: store.type: invalid store \"etcd\""}},
		{"fence", "upstream: http://x\nstore: {type: none}\nroutes:\n  - {name: a, path: /a, limits: [{max: 1, fence: true}, {max: 1, key: \"header:X\", fence: true, shadow: true}]}\n", []string{
			"routes[0].limits[0].fence: needs a store that gives fencing tokens",
			"routes[0].limits[1].fence: a shadow limit never guards anything",
		}},
		{"adaptive", `upstream: http://x
store: {type: none}
parents:
  - {name: a, max: 10, adaptive: {ceiling: 20}}
  - {name: b, max: 10, adaptive: {floor: 5, ceiling: 4}}
  - {name: c, max: 10, adaptive: {floor: 1, ceiling: 20, interval: 0s}}
  - {name: d, max: 30, adaptive: {floor: 1, ceiling: 20, tolerance: 0.5}}
  - {name: e, max: 10, adaptive: {floor: 1, ceiling: 40}}
routes:
  - name: r
    path: /r
    limits:
      - {max: 40, key: "header:X", parent: e}
      - {max: 41, key: "header:Y", parent: a}
`, []string{
			"line 4, column 34: parents[0].adaptive.floor: required",
			"line 5, column 54: parents[1].adaptive.ceiling: must be at least the floor (5), not 4",
			"line 6, column 68: parents[2].adaptive.interval: must be positive (at least 10ms), not 0s",
			"line 7, column 42: parents[3].adaptive.floor: the parent's max (30), where the total starts, must be between the floor and the ceiling (20), not 1",
			"line 4, column 34: parents[0].adaptive: needs a store that keeps adaptive totals",
			"line 14, column 15: routes[0].limits[1].max: must be at most its parent \"a\"'s max (10), not 41",
		}},
		{"client ip", "upstream: http://x\nclient_ip:\n  trusted_proxies: [10.0.0.0/33]\n  header: X-Real-IP\n", []string{"line 3, column 21: client_ip.trusted_proxies[0]", "line 4, column 11: client_ip.header"}},
		{"listen and admin", "upstream: http://x\nlisten: [\"127.0.0.1:8080\", \"localhost\"]\nadmin: \":99999\"\n", []string{"line 2, column 28: listen[1]: invalid address \"localhost\"", "line 3, column 8: admin: invalid port \"99999\""}},
		{"server", "upstream: http://x\nserver: {max_body: 10 parsecs, max_connections: -1, idle_timeout: forever}\n", []string{"server.max_body: invalid size", "server.max_connections: must be at least 0", "server.idle_timeout: invalid duration"}},
		{"pusher", `upstream: http://x
pusher:
  store_error_code: 4301
  apps:
    - id: "1"
      key: k
      error_code: 4200
    - {id: "2", key: k, secret: s}
    - {id: "3", key: "a/b", secret: s}
`, []string{
			"line 3, column 21: pusher.store_error_code: 4301 would stop pusher-js from reconnecting",
			"line 5, column 7: pusher.apps[0].secret: required",
			"line 7, column 19: pusher.apps[0].error_code: 4200 lets pusher-js reconnect",
			"line 8, column 22: pusher.apps[1].key: key \"k\" is used twice",
			"line 9, column 22: pusher.apps[2].key: invalid key \"a/b\"",
		}},
		{"jwt", "upstream: http://x\njwt: {hs256_secret: short}\n", []string{"line 2, column 21: jwt.hs256_secret: too short"}},
		{"jwt key file missing", "upstream: http://x\njwt:\n  public_key_file: /nonexistent/key.pem\n", []string{"line 3, column 20: jwt.public_key_file: open /nonexistent/key.pem: no such file"}},
		{"jwt key file not a key", "upstream: http://x\njwt:\n  public_key_file: " + keyFile + "\n", []string{"line 3, column 20: jwt.public_key_file: " + keyFile + ": neither an RSA nor an ECDSA public key"}},
		{"parents and shares", `upstream: http://x
parents:
  - {name: exports, max: 10}
  - {name: exports, max: 0}
  - {name: chained, max: 5, parent: exports}
routes:
  - name: a
    path: /a
    limits:
      - max: 12
        parent: exports
        weight: 13
        min: 20
        shares: {acme: 0}
      - max: 2
        key: "header:X-Tenant"
        parent: nowhere
      - max: 2
        key: "header:X-User"
        share: 3
        share_by: "header:X-Plan"
  - name: b
    path: /b
    limits:
      - {max: 2, key: "header:X", parent: exports, share_by: "header:X-Plan"}
`, []string{
			"line 4, column 12: parents[1].name: two parents named \"exports\"",
			"line 4, column 26: parents[1].max: must be at least 1",
			"line 5, column 37: parents[2].parent: a parent has no parent",
			"line 10, column 14: routes[0].limits[0].max: must be at most its parent \"exports\"'s max (10), not 12",
			"line 12, column 17: routes[0].limits[0].weight: must be at most the limit's max (12): no lease could ever be granted, not 13",
			"line 13, column 14: routes[0].limits[0].min: must be between 0 and the limit's max (12), not 20",
			"line 14, column 24: routes[0].limits[0].shares.acme: must be between 1 and",
			"line 17, column 17: routes[0].limits[1].parent: unknown parent \"nowhere\" (parents: exports, exports, chained)",
			"line 20, column 16: routes[0].limits[2].share: needs a parent, not 3",
			"line 21, column 19: routes[0].limits[2].share_by: needs parent:",
			"routes[0].limits[0].weight",
			"line 25, column 62: routes[1].limits[0].share_by: a header is set by the client",
		}},
		{"two limits under one parent", "upstream: http://x\nparents: [{name: p, max: 4}]\nroutes:\n  - {name: a, path: /a, limits: [{max: 2, key: \"header:X-User\", parent: p}, {max: 4, key: \"header:X-Tenant\", parent: p}]}\n",
			[]string{"routes[0].limits[1].parent: two limits of one route under parent \"p\""}},
		{"shares of addresses", "upstream: http://x\nparents: [{name: p, max: 4}]\nroutes:\n  - {name: a, path: /a, limits: [{max: 2, parent: p, shares: {10.0.0.1: 2}}]}\n",
			[]string{"routes[0].limits[0].shares: a table of client addresses is not supported"}},
		{"env not set", "upstream: http://x\nstore:\n  password: ${KEYCAP_TEST_UNSET_VARIABLE}\n", []string{"line 3, column 13: store.password: environment variable KEYCAP_TEST_UNSET_VARIABLE is not set"}},
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

// TestEnvValuesAreData: a variable's value is a value, whatever it holds; it
// cannot add fields to the file.
func TestEnvValuesAreData(t *testing.T) {
	t.Setenv("KEYCAP_TEST_INJECT", "x\"\nstore: {type: etcd}\n#")
	cfg, err := gateway.ParseConfig("test.yaml", []byte("upstream: http://x\npusher:\n  apps: [{id: \"1\", key: k, secret: \"${KEYCAP_TEST_INJECT}\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Type != "memory" || cfg.Pusher.Apps[0].Secret != "x\"\nstore: {type: etcd}\n#" {
		t.Fatalf("store %q, secret %q", cfg.Store.Type, cfg.Pusher.Apps[0].Secret)
	}
}

// TestRelativeFilesAreReadFromTheConfigsFolder: a relative key file is found
// beside the configuration, wherever the gateway was started from.
func TestRelativeFilesAreReadFromTheConfigsFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	pemFile := writePEM(t, &key.PublicKey)
	raw, _ := os.ReadFile(pemFile)
	_ = os.WriteFile(filepath.Join(dir, "key.pem"), raw, 0o600)
	cfg, err := gateway.ParseConfig(filepath.Join(dir, "keycap.yaml"), []byte("upstream: http://x\njwt: {public_key_file: key.pem}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JWT.PublicKeyFile != filepath.Join(dir, "key.pem") {
		t.Fatalf("key file %q", cfg.JWT.PublicKeyFile)
	}
}

// TestZeroTTLIsTheDefault: a limit's ttl: 0 means the default TTL, as a
// keycap.Spec's does: the file is accepted and the limit serves requests.
func TestZeroTTLIsTheDefault(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	config := "upstream: " + up.URL + "\nroutes:\n  - {name: a, path: /a, limits: [{max: 1, key: \"header:X-User\", ttl: 0s}]}\n"
	cfg, err := gateway.ParseConfig("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	if ttl := cfg.Routes[0].Limits[0].TTL; ttl == nil || *ttl != 0 {
		t.Fatalf("ttl %v, want 0", ttl)
	}
	srv, logs := inProcess(t, config)
	if code, _, _ := get(t, srv.URL+"/a", "X-User", "u"); code != http.StatusOK {
		t.Fatalf("a request under a limit of ttl 0: %d\n%s", code, logs)
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

func TestCheckCommand(t *testing.T) {
	t.Parallel()
	out, err := runBinary(t, "check", "-config", "../../../../examples/gateway.yaml")
	if err != nil || !strings.Contains(out, "configuration OK") {
		t.Fatalf("check on the example: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("upstream: http://x\nroutes:\n  - name: a\n    path: /a\n    limits: [{max: -3}]\n"), 0o600)
	out, err = runBinary(t, "check", "-config", bad)
	if err == nil || !strings.Contains(out, "line 5, column 20: routes[0].limits[0].max") {
		t.Fatalf("check on a bad file: %v\n%s", err, out)
	}
}

// FuzzParseConfig: any file gets a configuration or an error, never a panic,
// and an accepted configuration has what serving needs.
func FuzzParseConfig(f *testing.F) {
	for _, file := range []string{"../../../../examples/gateway.yaml"} {
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
