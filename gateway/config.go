package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/pushercap"
)

// Config is the gateway's configuration file. docs/gateway.md documents
// every field.
type Config struct {
	Listen          Strings        `yaml:"listen"`
	Admin           string         `yaml:"admin"`
	Upstream        string         `yaml:"upstream"`
	DemoUpstream    string         `yaml:"demo_upstream"`
	ShutdownTimeout Duration       `yaml:"shutdown_timeout"`
	Log             LogConfig      `yaml:"log"`
	Store           StoreConfig    `yaml:"store"`
	ClientIP        ClientIPConfig `yaml:"client_ip"`
	JWT             *JWTConfig     `yaml:"jwt"`
	Routes          []RouteConfig  `yaml:"routes"`
	Pusher          *PusherConfig  `yaml:"pusher"`
}

// LogConfig sets the gateway's logs.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Format string `yaml:"format"` // json (default) or text
}

// StoreConfig says where slots live.
type StoreConfig struct {
	Type     string   `yaml:"type"`   // memory (default), redis, sentinel, cluster
	URL      string   `yaml:"url"`    // redis: redis:// or rediss:// URL
	Addrs    []string `yaml:"addrs"`  // sentinel: sentinels; cluster: seeds
	Master   string   `yaml:"master"` // sentinel: the master's name
	Username string   `yaml:"username"`
	Password string   `yaml:"password"`
	TLS      bool     `yaml:"tls"` // sentinel, cluster
	Prefix   string   `yaml:"prefix"`
	FailMode string   `yaml:"fail_mode"` // limits' default: open (default) or closed
}

// ClientIPConfig says how a client's address is found.
type ClientIPConfig struct {
	TrustedProxies []string `yaml:"trusted_proxies"`
	Header         string   `yaml:"header"` // X-Forwarded-For (default) or Forwarded
	IPv6Prefix     int      `yaml:"ipv6_prefix"`
}

// JWTConfig verifies the tokens that claim:NAME keys read.
type JWTConfig struct {
	HS256Secret   string `yaml:"hs256_secret"`
	PublicKeyFile string `yaml:"public_key_file"` // PEM: RSA (RS256) or ECDSA (ES256)
	JWKSFile      string `yaml:"jwks_file"`
	Issuer        string `yaml:"issuer"`
	Audience      string `yaml:"audience"`
	Header        string `yaml:"header"` // default Authorization, "Bearer <token>"
	Cookie        string `yaml:"cookie"` // read the token from this cookie instead
}

// RouteConfig caps the requests of one route.
type RouteConfig struct {
	Name     string        `yaml:"name"`
	Methods  []string      `yaml:"methods"`
	Path     string        `yaml:"path"`
	Upstream string        `yaml:"upstream"`
	Pool     string        `yaml:"pool"`
	Limits   []LimitConfig `yaml:"limits"`
}

// LimitConfig is one limit of a route.
type LimitConfig struct {
	Max        *int      `yaml:"max"`
	Key        string    `yaml:"key"` // ip (default), header:NAME, cookie:NAME, claim:NAME
	Wait       Duration  `yaml:"wait"`
	RetryAfter *Duration `yaml:"retry_after"`
	TTL        Duration  `yaml:"ttl"`
	FailMode   string    `yaml:"fail_mode"`
}

// PusherConfig caps Pusher-protocol WebSocket connections per user.
type PusherConfig struct {
	Upstream   string            `yaml:"upstream"`
	DefaultCap *int              `yaml:"default_cap"`
	Heartbeat  Duration          `yaml:"heartbeat"`
	TTL        Duration          `yaml:"ttl"`
	FailOpen   bool              `yaml:"fail_open"`
	Signin     bool              `yaml:"signin"`
	Apps       []PusherAppConfig `yaml:"apps"`
}

// PusherAppConfig is one Pusher application.
type PusherAppConfig struct {
	ID           string `yaml:"id"`
	Key          string `yaml:"key"`
	Secret       string `yaml:"secret"`
	Cap          *int   `yaml:"cap"`
	ErrorCode    int    `yaml:"error_code"`
	ErrorMessage string `yaml:"error_message"`
}

// Duration is a time.Duration written as "1500ms", "2s", "1m".
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		// A TypeError lets the decoder go on and report every problem.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration %q: write it as 500ms, 2s, 1m", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

// Strings is a list of strings that may be written as one string.
type Strings []string

// UnmarshalYAML implements yaml.Unmarshaler.
func (s *Strings) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = Strings{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return err
	}
	*s = list
	return nil
}

// ConfigError lists every problem of a configuration, each with its line and
// field.
type ConfigError struct {
	File     string
	Problems []string
}

func (e *ConfigError) Error() string {
	return e.File + ": invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LoadConfig reads and validates a configuration file. ${NAME} in it is
// replaced by the environment variable NAME (secrets stay out of the file);
// a variable that is not set is an error.
func LoadConfig(file string) (*Config, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseConfig(file, raw)
}

// ParseConfig is LoadConfig on bytes; file names them in errors.
func ParseConfig(file string, raw []byte) (*Config, error) {
	raw, missing := expandEnv(raw)
	if len(missing) > 0 {
		return nil, &ConfigError{File: file, Problems: []string{"environment variables not set: " + strings.Join(missing, ", ")}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, &ConfigError{File: file, Problems: []string{err.Error()}}
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			problems := make([]string, len(te.Errors))
			for i, e := range te.Errors {
				problems[i] = nameField(&root, e)
			}
			return nil, &ConfigError{File: file, Problems: problems}
		}
		return nil, &ConfigError{File: file, Problems: []string{nameField(&root, err.Error())}}
	}
	v := &validator{root: &root}
	v.validate(&cfg)
	if len(v.problems) > 0 {
		return nil, &ConfigError{File: file, Problems: v.problems}
	}
	cfg.defaults()
	return &cfg, nil
}

var (
	lineOf       = regexp.MustCompile(`^line (\d+): `)
	unknownField = regexp.MustCompile(`field \S+ not found in type \S+`)
)

// nameField adds to a decoding error ("line 11: invalid duration") the
// field whose value is on that line: "line 11: routes[0].limits[1].wait:
// invalid duration".
func nameField(root *yaml.Node, problem string) string {
	m := lineOf.FindStringSubmatch(problem)
	if m == nil {
		return problem
	}
	line, _ := strconv.Atoi(m[1])
	var found []any
	var walk func(n *yaml.Node, path []any)
	walk = func(n *yaml.Node, path []any) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := append(path[:len(path):len(path)], k.Value)
				if v.Line == line || k.Line == line {
					found = p
				}
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := append(path[:len(path):len(path)], i)
				if c.Line == line && c.Kind == yaml.ScalarNode {
					found = p
				}
				walk(c, p)
			}
		}
	}
	walk(root, nil)
	if found == nil {
		return problem
	}
	msg := unknownField.ReplaceAllString(problem[len(m[0]):], "unknown field (docs/gateway.md lists them)")
	return m[0] + field(found...) + ": " + msg
}

// expandEnv replaces ${NAME} with the environment variable NAME, outside
// comments, and returns the names that are not set.
func expandEnv(raw []byte) ([]byte, []string) {
	var missing []string
	lines := bytes.Split(raw, []byte("\n"))
	for i, line := range lines {
		code, comment := splitComment(line)
		code = envRef.ReplaceAllFunc(code, func(m []byte) []byte {
			name := string(envRef.FindSubmatch(m)[1])
			v, ok := os.LookupEnv(name)
			if !ok {
				missing = append(missing, name)
			}
			return []byte(v)
		})
		lines[i] = append(code, comment...)
	}
	return bytes.Join(lines, []byte("\n")), missing
}

// splitComment splits a YAML line before its comment: a '#' at the start or
// after a space, outside quotes.
func splitComment(line []byte) (code, comment []byte) {
	var quote byte
	for i, c := range line {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i:i], line[i:]
		}
	}
	return line, nil
}

// defaults fills the fields left empty.
func (c *Config) defaults() {
	if len(c.Listen) == 0 {
		c.Listen = Strings{"127.0.0.1:8080"}
	}
	if c.Admin == "" {
		c.Admin = "127.0.0.1:9091"
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Store.Type == "" {
		c.Store.Type = "memory"
	}
	if c.Store.Prefix == "" {
		c.Store.Prefix = "keycap:"
	}
	if c.ClientIP.Header == "" {
		c.ClientIP.Header = "X-Forwarded-For"
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Pool == "" {
			r.Pool = r.Name
		}
		for j := range r.Limits {
			if r.Limits[j].Key == "" {
				r.Limits[j].Key = "ip"
			}
		}
	}
	if p := c.Pusher; p != nil && p.Upstream == "" {
		p.Upstream = c.Upstream
	}
}

// validator collects problems, each located by the line of its field.
type validator struct {
	root     *yaml.Node
	problems []string
}

// at returns the line of the value at path (map keys and list indexes), or
// of the nearest ancestor that exists.
func (v *validator) at(path ...any) int {
	n := v.root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		switch p := p.(type) {
		case string:
			found := false
			for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					n, found = n.Content[i+1], true
					break
				}
			}
			if !found {
				return line
			}
		case int:
			if n.Kind != yaml.SequenceNode || p >= len(n.Content) {
				return line
			}
			n = n.Content[p]
		}
		line = n.Line
	}
	return line
}

func field(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		case int:
			b.WriteString("[" + strconv.Itoa(p) + "]")
		}
	}
	return b.String()
}

func (v *validator) errf(path []any, format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf("line %d: %s: %s", v.at(path...), field(path...), fmt.Sprintf(format, args...)))
}

func p(path ...any) []any { return path }

func (v *validator) url(path []any, s string, schemes ...string) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		v.errf(path, "invalid URL %q: want %s://host:port", s, schemes[0])
		return
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return
		}
	}
	v.errf(path, "invalid URL %q: the scheme must be %s", s, strings.Join(schemes, " or "))
}

func (v *validator) failMode(path []any, s string) {
	if s != "" && s != "open" && s != "closed" {
		v.errf(path, "invalid fail mode %q: open or closed", s)
	}
}

var methodName = regexp.MustCompile(`^[A-Z]+$`)

func (v *validator) validate(c *Config) {
	if c.Upstream == "" {
		v.errf(p("upstream"), "required: the URL requests go to, such as http://127.0.0.1:3000")
	} else {
		v.url(p("upstream"), c.Upstream, "http", "https")
	}
	switch c.Log.Level {
	case "", "debug", "info", "warn", "error":
	default:
		v.errf(p("log", "level"), "invalid level %q: debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", "json", "text":
	default:
		v.errf(p("log", "format"), "invalid format %q: json or text", c.Log.Format)
	}
	if c.ShutdownTimeout < 0 {
		v.errf(p("shutdown_timeout"), "must be positive")
	}
	v.store(&c.Store)
	switch c.ClientIP.Header {
	case "", "X-Forwarded-For", "Forwarded":
	default:
		v.errf(p("client_ip", "header"), "invalid header %q: X-Forwarded-For or Forwarded", c.ClientIP.Header)
	}
	if c.ClientIP.IPv6Prefix < 0 || c.ClientIP.IPv6Prefix > 128 {
		v.errf(p("client_ip", "ipv6_prefix"), "must be between 0 and 128")
	}
	for i, cidr := range c.ClientIP.TrustedProxies {
		if _, err := httplimit.NewClientIP(httplimit.HeaderXForwardedFor, 0, cidr); err != nil {
			v.errf(p("client_ip", "trusted_proxies", i), "invalid address or prefix %q", cidr)
		}
	}
	if j := c.JWT; j != nil {
		n := 0
		for _, s := range []string{j.HS256Secret, j.PublicKeyFile, j.JWKSFile} {
			if s != "" {
				n++
			}
		}
		if n != 1 {
			v.errf(p("jwt"), "set exactly one of hs256_secret, public_key_file, jwks_file")
		}
		if j.HS256Secret != "" && len(j.HS256Secret) < 32 {
			v.errf(p("jwt", "hs256_secret"), "too short: at least 32 bytes")
		}
	}
	pools := map[string]int{}
	for i, r := range c.Routes {
		v.route(i, r, c, pools)
	}
	if c.Pusher != nil {
		v.pusher(c.Pusher, c)
	}
}

func (v *validator) store(s *StoreConfig) {
	switch s.Type {
	case "", "memory":
	case "redis":
		if s.URL == "" {
			v.errf(p("store", "url"), "required for a redis store: redis://[user:password@]host:port[/db] (rediss:// for TLS)")
		} else {
			v.url(p("store", "url"), s.URL, "redis", "rediss", "unix")
		}
	case "sentinel":
		if s.Master == "" {
			v.errf(p("store", "master"), "required for a sentinel store: the master's name")
		}
		if len(s.Addrs) == 0 {
			v.errf(p("store", "addrs"), "required for a sentinel store: the sentinels' host:port")
		}
	case "cluster":
		if len(s.Addrs) == 0 {
			v.errf(p("store", "addrs"), "required for a cluster store: seed nodes' host:port")
		}
	default:
		v.errf(p("store", "type"), "invalid store %q: memory, redis, sentinel or cluster", s.Type)
	}
	if strings.ContainsAny(s.Prefix, "{}") {
		v.errf(p("store", "prefix"), "must not contain { or }")
	}
	v.failMode(p("store", "fail_mode"), s.FailMode)
}

func (v *validator) route(i int, r RouteConfig, c *Config, pools map[string]int) {
	if r.Name == "" {
		v.errf(p("routes", i, "name"), "required")
	}
	if !strings.HasPrefix(r.Path, "/") {
		v.errf(p("routes", i, "path"), "required, starting with /: /exports, /api/ (a prefix), /users/{id}/export")
	}
	if strings.HasPrefix(r.Path, "/app/") && c.Pusher != nil {
		v.errf(p("routes", i, "path"), "/app/ is the Pusher WebSocket endpoint")
	}
	for j, m := range r.Methods {
		if !methodName.MatchString(m) {
			v.errf(p("routes", i, "methods", j), "invalid method %q: upper case, such as GET or POST", m)
		}
	}
	if r.Upstream != "" {
		v.url(p("routes", i, "upstream"), r.Upstream, "http", "https")
	}
	pool := r.Pool
	if pool == "" {
		pool = r.Name
	}
	if pool == "job" || strings.HasPrefix(pool, "job:") {
		v.errf(p("routes", i, "pool"), "%q is reserved for job limits", pool)
	}
	if prev, ok := pools[pool]; ok && !sameLimits(c.Routes[prev].Limits, r.Limits) {
		v.errf(p("routes", i, "limits"), "routes %q and %q share pool %q but not their limits", c.Routes[prev].Name, r.Name, pool)
	} else if !ok {
		pools[pool] = i
	}
	if len(r.Limits) == 0 {
		v.errf(p("routes", i, "limits"), "at least one limit")
	}
	keys := map[string]bool{}
	for j, l := range r.Limits {
		lp := func(f string) []any { return p("routes", i, "limits", j, f) }
		switch {
		case l.Max == nil:
			v.errf(lp("max"), "required: requests in flight per key (0 refuses every request)")
		case *l.Max < 0:
			v.errf(lp("max"), "must be at least 0, not %d", *l.Max)
		}
		if l.Wait < 0 {
			v.errf(lp("wait"), "must be at least 0")
		}
		if l.TTL != 0 && time.Duration(l.TTL) < time.Millisecond {
			v.errf(lp("ttl"), "must be at least 1ms")
		}
		if l.RetryAfter != nil && *l.RetryAfter < 0 {
			v.errf(lp("retry_after"), "must be at least 0 (0 sends no Retry-After)")
		}
		v.failMode(lp("fail_mode"), l.FailMode)
		key := l.Key
		if key == "" {
			key = "ip"
		}
		kind, name, _ := strings.Cut(key, ":")
		switch {
		case key == "ip":
		case (kind == "header" || kind == "cookie" || kind == "claim") && name != "":
			if kind == "claim" && c.JWT == nil {
				v.errf(lp("key"), "%q needs the jwt section, to verify the tokens it reads", key)
			}
		default:
			v.errf(lp("key"), "invalid key %q: ip, header:NAME, cookie:NAME or claim:NAME", key)
		}
		if keys[key] {
			v.errf(lp("key"), "two limits of one route on the same key %q", key)
		}
		keys[key] = true
	}
}

func sameLimits(a, b []LimitConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.Max == nil) != (y.Max == nil) || (x.Max != nil && *x.Max != *y.Max) || x.Key != y.Key || x.Wait != y.Wait || x.TTL != y.TTL || x.FailMode != y.FailMode {
			return false
		}
	}
	return true
}

func (v *validator) pusher(pc *PusherConfig, c *Config) {
	if pc.Upstream != "" {
		v.url(p("pusher", "upstream"), pc.Upstream, "http", "https", "ws", "wss")
	}
	if pc.DefaultCap != nil && *pc.DefaultCap < 0 {
		v.errf(p("pusher", "default_cap"), "must be at least 0 (0: uncapped)")
	}
	if pc.Heartbeat < 0 || pc.TTL < 0 || (pc.Heartbeat > 0 && pc.TTL > 0 && pc.TTL <= pc.Heartbeat) {
		v.errf(p("pusher", "ttl"), "must exceed the heartbeat")
	}
	if len(pc.Apps) == 0 {
		v.errf(p("pusher", "apps"), "at least one app")
	}
	keys := map[string]bool{}
	for i, a := range pc.Apps {
		ap := func(f string) []any { return p("pusher", "apps", i, f) }
		if a.ID == "" {
			v.errf(ap("id"), "required")
		}
		if a.Key == "" {
			v.errf(ap("key"), "required")
		} else if keys[a.Key] {
			v.errf(ap("key"), "key %q is used twice", a.Key)
		}
		keys[a.Key] = true
		if a.Secret == "" {
			v.errf(ap("secret"), "required (write ${NAME} to read it from the environment)")
		}
		if a.Cap != nil && *a.Cap < 0 {
			v.errf(ap("cap"), "must be at least 0 (0: uncapped)")
		}
		if a.ErrorCode != 0 && !pushercap.StopsReconnect(a.ErrorCode) {
			v.errf(ap("error_code"), "%d lets pusher-js reconnect: use 4000-4099 or 4300-4999", a.ErrorCode)
		}
	}
}
