package caddykeycap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/keycap/keycap/caddykeycap"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, in string
		want     string // the handler as JSON
	}{
		{"arguments", `keycap api 2 {http.request.header.X-User}`,
			`{"limits":[{"name":"api","key":"{http.request.header.X-User}","max":2}]}`},
		{"arguments, default key", `keycap api 0`, `{"limits":[{"name":"api","max":0}]}`},
		{"every option", `keycap {
	limit exports 5 {
		key {http.auth.user.id}
		empty_key refuse
		wait 2s
		ttl 1m
		weight 2
		parent all 50
		share 3
		minimum 1
		fail_mode closed
		shadow
		retry_after 0
	}
	limit tenants {
		max 20
		key {http.request.header.X-Tenant}
	}
	store redis 10.0.0.5:6379 {
		username app
		password {env.REDIS_PASSWORD}
		db 2
		tls
		prefix myapp:
		budget 500ms
	}
}`, `{"limits":[{"name":"exports","key":"{http.auth.user.id}","empty_key":"refuse","max":5,"wait":2000000000,"ttl":60000000000,
		"weight":2,"parent":{"name":"all","max":50},"share":3,"minimum":1,"fail_mode":"closed","shadow":true,"retry_after":0},
		{"name":"tenants","key":"{http.request.header.X-Tenant}","max":20}],
		"store":{"type":"redis","addr":"10.0.0.5:6379","username":"app","password":"{env.REDIS_PASSWORD}","db":2,"tls":true,"prefix":"myapp:","budget":500000000}}`},
		{"adaptive parent", `keycap {
	limit api 10 {
		parent backend 20 {
			adaptive 2 40
			interval 100ms
			tolerance 1.5
			overloads_only
			shadow
		}
	}
	limit search 5 {
		parent pool 8 {
			adaptive 1 16
		}
		share 2
	}
	limit fixed 3 {
		parent other 6 {
		}
	}
}`, `{"limits":[{"name":"api","max":10,"parent":{"name":"backend","max":20,
		"adaptive":{"floor":2,"ceiling":40,"interval":100000000,"tolerance":1.5,"overloads_only":true,"shadow":true}}},
		{"name":"search","max":5,"parent":{"name":"pool","max":8,"adaptive":{"floor":1,"ceiling":16}},"share":2},
		{"name":"fixed","max":3,"parent":{"name":"other","max":6}}]}`},
		{"cluster", `keycap api 2 {
	store cluster 10.0.0.1:6379 10.0.0.2:6379 {
		addrs 10.0.0.3:6379
	}
}`, `{"limits":[{"name":"api","max":2}],"store":{"type":"cluster","addrs":["10.0.0.1:6379","10.0.0.2:6379","10.0.0.3:6379"]}}`},
		{"sentinel", `keycap api 2 {
	store sentinel {
		addrs 10.0.0.1:26379 10.0.0.2:26379
		master mymaster
	}
}`, `{"limits":[{"name":"api","max":2}],"store":{"type":"sentinel","addrs":["10.0.0.1:26379","10.0.0.2:26379"],"master":"mymaster"}}`},
		{"memory", `keycap api 2 {
	store memory
}`, `{"limits":[{"name":"api","max":2}],"store":{"type":"memory"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h caddykeycap.Handler
			if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in)); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(h)
			if !jsonEqual(t, string(got), tc.want) {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Every Caddyfile mistake is reported with the line of the token that is
// wrong.
func TestUnmarshalCaddyfileErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	for _, tc := range caddyfileErrors {
		t.Run(tc.name, func(t *testing.T) {
			var h caddykeycap.Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
			if err == nil {
				t.Fatal("no error")
			}
			want := "Testfile:" + tc.line
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q: want %q and %q", err, want, tc.says)
			}
		})
	}
}

// caddyfileErrors are Caddyfile mistakes: the directive's tokens, the line
// the error must name, and what it must say.
var caddyfileErrors = []struct {
	name, in, line, says string
}{
	{"no limit", "keycap", "1", "needs a limit"},
	{"name without max", "keycap api", "1", "argument count"},
	{"max not a number", "keycap api two", "1", `max "two"`},
	{"too many arguments", "keycap api 2 {header.X} extra", "1", "argument count"},
	{"limit without name", "keycap {\n\tlimit\n}", "2", "argument count"},
	{"limit without max", "keycap {\n\tlimit api {\n\t\tkey {header.X}\n\t}\n}", "4", "max is required"},
	{"unknown limit option", "keycap {\n\tlimit api 2 {\n\t\tburst 3\n\t}\n}", "3", `unknown option "burst"`},
	{"bad duration", "keycap {\n\tlimit api 2 {\n\n\t\twait soon\n\t}\n}", "4", `wait "soon"`},
	{"bad fail_mode", "keycap {\n\tlimit api 2 {\n\t\tfail_mode maybe\n\t}\n}", "3", `fail_mode "maybe"`},
	{"bad empty_key", "keycap {\n\tlimit api 2 {\n\t\tempty_key skip\n\t}\n}", "3", `empty_key "skip"`},
	{"parent without max", "keycap {\n\tlimit api 2 {\n\t\tparent all\n\t}\n}", "3", "argument count"},
	{"adaptive without ceiling", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1\n\t\t}\n\t}\n}", "4", "argument count"},
	{"adaptive floor not a number", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive one 10\n\t\t}\n\t}\n}", "4", `adaptive floor "one"`},
	{"adaptive ceiling not a number", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 ten\n\t\t}\n\t}\n}", "4", `adaptive ceiling "ten"`},
	{"adaptive twice", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\tadaptive 1 10\n\t\t}\n\t}\n}", "5", "adaptive given twice"},
	{"bad interval", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\tinterval often\n\t\t}\n\t}\n}", "5", `interval "often"`},
	{"interval without argument", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\tinterval\n\t\t}\n\t}\n}", "5", "argument count"},
	{"bad tolerance", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\ttolerance high\n\t\t}\n\t}\n}", "5", `tolerance "high"`},
	{"infinite tolerance", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\ttolerance +Inf\n\t\t}\n\t}\n}", "5", `tolerance "+Inf"`},
	{"overloads_only with argument", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\toverloads_only yes\n\t\t}\n\t}\n}", "5", "argument count"},
	{"parent shadow with argument", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tadaptive 1 10\n\t\t\tshadow on\n\t\t}\n\t}\n}", "5", "argument count"},
	{"unknown parent option", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\tkeep 5ms\n\t\t}\n\t}\n}", "4", `parent "all": unknown option "keep"`},
	{"interval without adaptive", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\t\t\ttolerance 2\n\t\t\tinterval 1s\n\t\t}\n\t}\n}", "4", "tolerance needs adaptive <floor> <ceiling>"},
	{"shadow without adaptive", "keycap {\n\tlimit api 2 {\n\t\tparent all 5 {\n\n\t\t\tshadow\n\t\t}\n\t}\n}", "5", "shadow needs adaptive"},
	{"shadow with argument", "keycap {\n\tlimit api 2 {\n\t\tshadow yes\n\t}\n}", "3", "argument count"},
	{"unknown option", "keycap api 2 {\n\tburst 3\n}", "2", `unknown option "burst"`},
	{"unknown store", "keycap api 2 {\n\tstore etcd\n}", "2", `store type "etcd"`},
	{"store twice", "keycap api 2 {\n\tstore memory\n\tstore memory\n}", "3", "store given twice"},
	{"redis without addr", "keycap api 2 {\n\tstore redis {\n\t\tdb 1\n\t}\n}", "4", "addr: required"},
	{"sentinel without master", "keycap api 2 {\n\tstore sentinel 10.0.0.1:26379\n}", "2", "master: required"},
	{"addr on cluster", "keycap api 2 {\n\tstore cluster {\n\t\taddr 10.0.0.1:6379\n\t}\n}", "3", "addr: for redis"},
	{"memory with options", "keycap api 2 {\n\tstore memory {\n\t\ttls\n\t}\n}", "3", "no options"},
	{"bad db", "keycap api 2 {\n\tstore redis 10.0.0.1:6379 {\n\t\tdb one\n\t}\n}", "3", `db "one"`},
}

// caddy adapt, run as users run it, names the Caddyfile's line too; caddy
// validate, which provisions the handler, names the field keycap refuses.
func TestCaddyErrorsNameTheLineAndField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, site, says string
	}{
		{"adapt: unknown option", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tburst 3\n\t\t}\n\t}\n\trespond ok\n}\n", "Caddyfile:4"},
		{"adapt: bad store", ":8080 {\n\n\tkeycap api 2 {\n\t\tstore etcd\n\t}\n\trespond ok\n}\n", "Caddyfile:4"},
		{"validate: negative max", ":8080 {\n\tkeycap api -1\n\trespond ok\n}\n", `api\": max: -1: must be at least 0`},
		{"validate: share without parent", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tshare 2\n\t\t}\n\t}\n\trespond ok\n}\n", `api\": share: 2`},
		{"validate: parent max", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tparent all 0\n\t\t}\n\t}\n\trespond ok\n}\n", `api\": parent.max: 0: must be at least 1`},
		{"validate: adaptive ceiling", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tparent all 5 {\n\t\t\t\tadaptive 5 3\n\t\t\t}\n\t\t}\n\t}\n\trespond ok\n}\n", `api\": parent.adaptive.ceiling: 3: must be at least the floor (5)`},
		{"validate: adaptive interval", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tparent all 5 {\n\t\t\t\tadaptive 1 10\n\t\t\t\tinterval 5ms\n\t\t\t}\n\t\t}\n\t}\n\trespond ok\n}\n", `api\": parent.adaptive.interval: 5ms: must be at least 10ms`},
		{"validate: weight over max", ":8080 {\n\tkeycap {\n\t\tlimit api 2 {\n\t\t\tweight 3\n\t\t}\n\t}\n\trespond ok\n}\n", `api\": weight: 3`},
		{"validate: prefix from env", ":8080 {\n\tkeycap api 2 {\n\t\tstore redis 127.0.0.1:1 {\n\t\t\tprefix {env.KEYCAP_BAD_PREFIX}\n\t\t}\n\t}\n\trespond ok\n}\n", `store: prefix: \"a{b\": must not contain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "Caddyfile")
			if err := os.WriteFile(path, []byte("{\n\tadmin off\n}\n"+tc.site), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := "adapt"
			if strings.HasPrefix(tc.name, "validate") {
				cmd = "validate"
			}
			// the global options block adds 3 lines: say the line in the site
			tc.says = shiftLine(tc.says, 3)
			out, err := caddyCmd(t, []string{"KEYCAP_BAD_PREFIX=a{b"}, cmd, "--config", path, "--adapter", "caddyfile")
			if err == nil {
				t.Fatalf("caddy %s succeeded:\n%s", cmd, out)
			}
			if !strings.Contains(out, tc.says) {
				t.Errorf("caddy %s says:\n%s\nwant %q in it", cmd, out, tc.says)
			}
		})
	}
}

// shiftLine adds n to the line number of "Caddyfile:N" in s.
func shiftLine(s string, n int) string {
	rest, ok := strings.CutPrefix(s, "Caddyfile:")
	if !ok {
		return s
	}
	line, _ := strconv.Atoi(rest)
	return "Caddyfile:" + strconv.Itoa(line+n)
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
