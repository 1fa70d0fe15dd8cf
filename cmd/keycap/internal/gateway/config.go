package gateway

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/pushercap"
)

// Config is the gateway's configuration file. docs/gateway.md documents
// every field.
type Config struct {
	Listen          Strings        `yaml:"listen"`
	Admin           string         `yaml:"admin"`
	AdminAPI        AdminAPIConfig `yaml:"admin_api"`
	Upstream        string         `yaml:"upstream"`
	UpstreamProto   string         `yaml:"upstream_protocol"` // auto (default), http1, http2
	DemoUpstream    string         `yaml:"demo_upstream"`
	ShutdownTimeout Duration       `yaml:"shutdown_timeout"`
	ShutdownDelay   Duration       `yaml:"shutdown_delay"`
	Log             LogConfig      `yaml:"log"`
	Server          ServerConfig   `yaml:"server"`
	Timeouts        TimeoutsConfig `yaml:"timeouts"`
	Store           StoreConfig    `yaml:"store"`
	ClientIP        ClientIPConfig `yaml:"client_ip"`
	JWT             *JWTConfig     `yaml:"jwt"`
	Parents         []ParentConfig `yaml:"parents"`
	Routes          []RouteConfig  `yaml:"routes"`
	Pusher          *PusherConfig  `yaml:"pusher"`
}

// AdminAPIConfig turns on the admin API and page on the admin listener:
// inspection of who holds what, and live overrides.
type AdminAPIConfig struct {
	// Token is the bearer token of the admin API and page (write
	// ${SOME_VARIABLE} to read it from the environment); when it is not
	// set, KEYCAP_ADMIN_TOKEN in the environment gives it. Without one, the admin listener serves
	// only /metrics, /healthz and /readyz.
	Token string `yaml:"token"`
	// HashKeys shows, on the page, in the API and in the log of an
	// override, each key as its pool's hash instead of in clear (keys may
	// be personal data: user IDs, e-mails, addresses). By default a
	// signed-in admin sees them in clear.
	HashKeys bool `yaml:"hash_keys"`
	// HistoryKeys is how many keys of each limit the page's 15-minute
	// history remembers (default DefaultHistoryKeys; 0: none, the charts
	// only; -1: no history at all).
	HistoryKeys *int `yaml:"history_keys"`
	// OverridesRefresh is how often the gateway reads the store's overrides
	// (default 1s): an override set on any gateway applies on every one
	// within it. A reload changes it only with the store section (it is
	// the store's Limiter's), else at the next start.
	OverridesRefresh Duration `yaml:"overrides_refresh"`
}

// MaxHistoryKeys bounds admin_api.history_keys: a table of that many keys
// per limit takes about 20 MB.
const MaxHistoryKeys = 100000

// MinAdminToken is the shortest admin token the gateway accepts.
const MinAdminToken = 16

// ParentConfig is a total shared by the keys of the limits that name it
// (keycap.Parent).
type ParentConfig struct {
	Name     string          `yaml:"name"`
	Max      *int            `yaml:"max"`
	Keep     *Duration       `yaml:"keep"`     // default keycap.DefaultKeep
	Parent   string          `yaml:"parent"`   // refused: parents have no parent
	Adaptive *AdaptiveConfig `yaml:"adaptive"` // the total follows the upstream (keycap.Adaptive); max is where it starts
}

// AdaptiveConfig makes a parent's total adaptive (keycap.Adaptive): it
// moves between floor and ceiling from the latency of the upstream's
// answers and its overload answers (429, 503, 504, 529, timeouts).
type AdaptiveConfig struct {
	Floor     *int      `yaml:"floor"`
	Ceiling   *int      `yaml:"ceiling"`
	Interval  *Duration `yaml:"interval"`  // default keycap.DefaultInterval
	Tolerance *float64  `yaml:"tolerance"` // default keycap.DefaultTolerance
	// OverloadsOnly moves the total on overload answers alone, never on
	// latency (keycap.Adaptive.OverloadsOnly).
	OverloadsOnly bool `yaml:"overloads_only"`
	Shadow        bool `yaml:"shadow"` // computed and reported, never enforced
}

// adaptive returns the keycap.Adaptive of a, with keycap's defaults for
// what a leaves out.
func (a *AdaptiveConfig) adaptive() keycap.Adaptive {
	out := keycap.Adaptive{Shadow: a.Shadow, OverloadsOnly: a.OverloadsOnly}
	if a.Floor != nil {
		out.Floor = *a.Floor
	}
	if a.Ceiling != nil {
		out.Ceiling = *a.Ceiling
	}
	if a.Interval != nil {
		out.Interval = time.Duration(*a.Interval)
	}
	if a.Tolerance != nil {
		out.Tolerance = *a.Tolerance
	}
	return out
}

// parentOptions returns the keycap options of pc.
func (pc ParentConfig) parentOptions() []keycap.ParentOption {
	var opts []keycap.ParentOption
	if pc.Keep != nil {
		opts = append(opts, keycap.WithKeep(time.Duration(*pc.Keep)))
	}
	if pc.Adaptive != nil {
		opts = append(opts, keycap.WithAdaptive(pc.Adaptive.adaptive()))
	}
	return opts
}

// MaxShare bounds a key's share, from the table or from a claim.
const MaxShare = 10000

// LogConfig sets the gateway's logs.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info (default), warn, error
	Format string `yaml:"format"` // json (default) or text
}

// ServerConfig bounds what a client can hold of the proxy listener: it faces
// the internet.
type ServerConfig struct {
	H2C                 bool     `yaml:"h2c"`                    // serve HTTP/2 without TLS too (prior knowledge)
	PingInterval        Duration `yaml:"ping_interval"`          // HTTP/2: ping a connection silent this long, close it when the ping goes unanswered as long; default 30s
	ReadHeaderTimeout   Duration `yaml:"read_header_timeout"`    // default 5s
	IdleTimeout         Duration `yaml:"idle_timeout"`           // keep-alive connections, default 30s
	BodyReadTimeout     Duration `yaml:"body_read_timeout"`      // longest wait for more of a request body, default 15s
	MinBodyRate         *Bytes   `yaml:"min_body_rate"`          // bytes a second a body must average after body_read_timeout, default 1KiB; 0: none
	MaxHeaderBytes      *Bytes   `yaml:"max_header_bytes"`       // default 64KiB
	MaxBody             *Bytes   `yaml:"max_body"`               // default 10MiB; 0: no limit
	MaxConnections      *int     `yaml:"max_connections"`        // default 10000; 0: no limit
	MaxConnectionsPerIP *int     `yaml:"max_connections_per_ip"` // default 256; 0: no limit; trusted proxies exempt
}

// TimeoutsConfig bounds a request's time at the upstream.
type TimeoutsConfig struct {
	Dial           Duration `yaml:"dial"`            // default 5s
	ResponseHeader Duration `yaml:"response_header"` // default 60s
	Total          Duration `yaml:"total"`           // default none
}

// StoreConfig says where slots live.
type StoreConfig struct {
	Type     string          `yaml:"type"`   // memory (default), redis, sentinel, cluster, none
	URL      string          `yaml:"url"`    // redis: redis:// or rediss:// URL
	Addrs    []string        `yaml:"addrs"`  // sentinel: sentinels; cluster: seeds
	Master   string          `yaml:"master"` // sentinel: the master's name
	Username string          `yaml:"username"`
	Password string          `yaml:"password"`
	TLS      bool            `yaml:"tls"` // sentinel, cluster
	Prefix   string          `yaml:"prefix"`
	FailMode keycap.FailMode `yaml:"fail_mode"` // limits' default: open (default) or closed
	Budget   Duration        `yaml:"budget"`    // a decision's time budget, default 250ms
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
	Name     string          `yaml:"name"`
	Methods  []string        `yaml:"methods"`
	Path     string          `yaml:"path"`
	Upstream string          `yaml:"upstream"`
	Protocol string          `yaml:"upstream_protocol"` // default the top level's for its upstream, auto for the route's own
	Pool     string          `yaml:"pool"`
	Limits   []LimitConfig   `yaml:"limits"`
	Shadow   bool            `yaml:"shadow"`   // every limit of the route decides and reports, none refuses
	Timeouts *TimeoutsConfig `yaml:"timeouts"` // fields left out take the top level's
	Release  string          `yaml:"release"`  // auto (default), on_upstream_done, on_client_done
	MaxHold  Duration        `yaml:"max_hold"` // default 1m
	MaxBody  *Bytes          `yaml:"max_body"` // default server.max_body
}

// The protocols the gateway speaks to an upstream (upstream_protocol).
const (
	// ProtocolAuto: HTTP/2 to an https:// upstream that offers it (ALPN),
	// else HTTP/1.1; to an http:// upstream HTTP/1.1, but gRPC calls by
	// HTTP/2 with prior knowledge (h2c): gRPC has no HTTP/1.1.
	ProtocolAuto = "auto"
	// ProtocolHTTP1: HTTP/1.1 only.
	ProtocolHTTP1 = "http1"
	// ProtocolHTTP2: HTTP/2 only: h2c (prior knowledge) to http://, h2 to
	// https://.
	ProtocolHTTP2 = "http2"
)

// Release modes of a route.
const (
	ReleaseAuto           = "auto"
	ReleaseOnUpstreamDone = "on_upstream_done"
	ReleaseOnClientDone   = "on_client_done"
)

// LimitConfig is one limit of a route.
type LimitConfig struct {
	Max        *int            `yaml:"max"`
	Key        string          `yaml:"key"` // ip (default), header:NAME, cookie:NAME, claim:NAME
	OnMissing  string          `yaml:"on_missing"`
	Wait       Duration        `yaml:"wait"`
	RetryAfter *Duration       `yaml:"retry_after"`
	TTL        *Duration       `yaml:"ttl"` // 0 or none: 30s; else at least 1ms
	FailMode   keycap.FailMode `yaml:"fail_mode"`
	Budget     Duration        `yaml:"budget"` // default the store's
	Shadow     bool            `yaml:"shadow"` // decides and reports, never refuses (a candidate cap)
	Fence      bool            `yaml:"fence"`  // each grant's fencing token goes upstream in Keycap-Fence

	// Weights and fair shares (keycap.Parent).
	Weight  int            `yaml:"weight"`   // slots each request takes; default 1
	Parent  string         `yaml:"parent"`   // the name of a parents: entry whose total the keys share
	Share   int            `yaml:"share"`    // each key's share of the parent; default 1
	Shares  map[string]int `yaml:"shares"`   // per value (the key's, or share_by's): its share
	ShareBy string         `yaml:"share_by"` // header:NAME or claim:NAME to look shares up by; a claim without shares is the share itself
	Min     int            `yaml:"min"`      // slots up to which each key is served first
}

// What a limit does with a request that lacks its key (on_missing).
const (
	MissingIP     = "ip"     // count it by its client address, in a pool of its own
	MissingRefuse = "refuse" // answer 401
)

// PusherConfig caps Pusher-protocol WebSocket connections per user.
type PusherConfig struct {
	Upstream          string            `yaml:"upstream"`
	DefaultCap        *int              `yaml:"default_cap"`
	Heartbeat         Duration          `yaml:"heartbeat"`
	TTL               Duration          `yaml:"ttl"`
	FailOpen          bool              `yaml:"fail_open"`
	Signin            bool              `yaml:"signin"`
	MaxMessage        *Bytes            `yaml:"max_message"`         // a client's frames, default 64KiB
	MessagesPerSecond *float64          `yaml:"messages_per_second"` // a client's frames, default 20; 0: no limit
	MessageBurst      *int              `yaml:"message_burst"`       // default twice the rate
	StoreErrorCode    int               `yaml:"store_error_code"`    // default 4100
	StoreErrorMessage string            `yaml:"store_error_message"`
	Apps              []PusherAppConfig `yaml:"apps"`
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

func (d *Duration) decodeText(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("invalid duration %q: write it as 500ms, 2s, 1m", s)
	}
	*d = Duration(v)
	return nil
}

// Bytes is a size written as "512", "64KiB", "10MiB", "1GB".
type Bytes int64

var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1000, "kib": 1 << 10, "k": 1 << 10,
	"mb": 1000 * 1000, "mib": 1 << 20, "m": 1 << 20,
	"gb": 1000 * 1000 * 1000, "gib": 1 << 30, "g": 1 << 30,
}

var bytesRe = regexp.MustCompile(`^([0-9]+)\s*([A-Za-z]*)$`)

func (b *Bytes) decodeText(s string) error {
	m := bytesRe.FindStringSubmatch(strings.TrimSpace(s))
	bad := fmt.Errorf("invalid size %q: write it as 512, 64KiB, 10MiB, 1GiB", s)
	if m == nil {
		return bad
	}
	unit, ok := byteUnits[strings.ToLower(m[2])]
	n, err := strconv.ParseInt(m[1], 10, 64)
	if !ok || err != nil || n > math.MaxInt64/unit {
		return bad
	}
	*b = Bytes(n * unit)
	return nil
}

// Strings is a list of strings that may be written as one string.
type Strings []string

func (s *Strings) decodeText(v string) error { *s = Strings{v}; return nil }

// ConfigError lists every problem of a configuration, each with its line,
// column and field.
type ConfigError struct {
	File     string
	Problems []string
}

func (e *ConfigError) Error() string {
	return e.File + ": invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// LoadConfig reads and validates a configuration file. ${NAME} in a value is
// replaced by the environment variable NAME (secrets stay out of the file);
// a variable that is not set is an error. Relative file names in it (a JWT
// key) are read from the file's folder.
func LoadConfig(file string) (*Config, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseConfig(file, raw)
}

// ParseConfig is LoadConfig on bytes; file names them in errors, and its
// folder is where relative file names are read from.
func ParseConfig(file string, raw []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, &ConfigError{File: file, Problems: []string{strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if root.Kind == 0 || len(root.Content) == 0 || isNull(root.Content[0]) {
		return nil, &ConfigError{File: file, Problems: []string{"line 1, column 1: the file is empty: it needs at least upstream: (the URL requests go to); see examples/gateway.yaml"}}
	}
	var cfg Config
	d := &decoder{}
	d.decode(root.Content[0], reflect.ValueOf(&cfg).Elem(), nil)
	if cfg.AdminAPI.Token == "" {
		cfg.AdminAPI.Token = os.Getenv("KEYCAP_ADMIN_TOKEN")
	}
	for i := range cfg.Routes {
		if r := &cfg.Routes[i]; r.Shadow {
			for j := range r.Limits {
				r.Limits[j].Shadow = true
			}
		}
	}
	v := &validator{root: &root, dir: filepath.Dir(file), bad: d.bad}
	v.validate(&cfg)
	problems := append(d.problems, v.problems...)
	if len(problems) > 0 {
		sortProblems(problems)
		out := make([]string, len(problems))
		for i, p := range problems {
			out[i] = p.String()
		}
		return nil, &ConfigError{File: file, Problems: out}
	}
	cfg.defaults(filepath.Dir(file))
	return &cfg, nil
}

// defaults fills the fields left empty, and makes file names absolute.
func (c *Config) defaults(dir string) {
	if len(c.Listen) == 0 {
		c.Listen = Strings{"127.0.0.1:8080"}
	}
	if c.Admin == "" {
		c.Admin = "127.0.0.1:9091"
	}
	setDuration(&c.AdminAPI.OverridesRefresh, keycap.DefaultOverrideRefresh)
	if c.AdminAPI.HistoryKeys == nil {
		n := DefaultHistoryKeys
		c.AdminAPI.HistoryKeys = &n
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = Duration(30 * time.Second)
	}
	s := &c.Server
	setDuration(&s.ReadHeaderTimeout, 5*time.Second)
	setDuration(&s.IdleTimeout, 30*time.Second)
	setDuration(&s.PingInterval, 30*time.Second)
	setDuration(&s.BodyReadTimeout, 15*time.Second)
	setPtr(&s.MaxHeaderBytes, 64<<10)
	setPtr(&s.MaxBody, 10<<20)
	setPtr(&s.MinBodyRate, 1<<10)
	setPtr(&s.MaxConnections, 10000)
	setPtr(&s.MaxConnectionsPerIP, 256)
	setDuration(&c.Timeouts.Dial, 5*time.Second)
	setDuration(&c.Timeouts.ResponseHeader, 60*time.Second)
	if c.Store.Type == "" {
		c.Store.Type = "memory"
	}
	if c.Store.Prefix == "" {
		c.Store.Prefix = "keycap:"
	}
	setDuration(&c.Store.Budget, keycap.DefaultBudget)
	if c.ClientIP.Header == "" {
		c.ClientIP.Header = "X-Forwarded-For"
	}
	if j := c.JWT; j != nil {
		j.PublicKeyFile = resolve(dir, j.PublicKeyFile)
		j.JWKSFile = resolve(dir, j.JWKSFile)
	}
	if c.UpstreamProto == "" {
		c.UpstreamProto = ProtocolAuto
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Pool == "" {
			r.Pool = r.Name
		}
		if r.Protocol == "" {
			r.Protocol = ProtocolAuto
			if r.Upstream == "" {
				r.Protocol = c.UpstreamProto
			}
		}
		t := c.Timeouts
		if r.Timeouts != nil {
			setDuration(&r.Timeouts.Dial, time.Duration(t.Dial))
			setDuration(&r.Timeouts.ResponseHeader, time.Duration(t.ResponseHeader))
			setDuration(&r.Timeouts.Total, time.Duration(t.Total))
		} else {
			r.Timeouts = &t
		}
		if r.Release == "" {
			r.Release = ReleaseAuto
		}
		setDuration(&r.MaxHold, time.Minute)
		if r.MaxBody == nil {
			r.MaxBody = s.MaxBody
		}
		for j := range r.Limits {
			l := &r.Limits[j]
			if l.Key == "" {
				l.Key = "ip"
			}
			if l.OnMissing == "" {
				l.OnMissing = MissingIP
			}
		}
	}
	if p := c.Pusher; p != nil {
		if p.Upstream == "" {
			p.Upstream = c.Upstream
		}
		setPtr(&p.MaxMessage, 64<<10)
		setPtr(&p.MessagesPerSecond, 20)
		if p.MessageBurst == nil {
			b := max(1, int(math.Ceil(2**p.MessagesPerSecond)))
			p.MessageBurst = &b
		}
		if p.StoreErrorCode == 0 {
			p.StoreErrorCode = pushercap.DefaultStoreErrorCode
		}
		if p.StoreErrorMessage == "" {
			p.StoreErrorMessage = pushercap.DefaultStoreErrorMessage
		}
	}
}

func setDuration(d *Duration, v time.Duration) {
	if *d == 0 {
		*d = Duration(v)
	}
}

func setPtr[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

func resolve(dir, file string) string {
	if file == "" || filepath.IsAbs(file) {
		return file
	}
	return filepath.Join(dir, file)
}

// validator collects problems, each located by its field's node.
type validator struct {
	root     *yaml.Node
	dir      string
	bad      map[string]bool // paths the decoder already reported
	problems []problem
}

func (v *validator) errf(path []any, format string, args ...any) {
	f := field(path...)
	for p := f; p != ""; p = parent(p) {
		if v.bad[p] {
			return // its value could not be decoded: that is the problem to fix
		}
	}
	n := locate(v.root, path...)
	v.problems = append(v.problems, problem{line: n.Line, col: n.Column, path: f, msg: fmt.Sprintf(format, args...)})
}

// parent returns the path of the field that holds p: routes[0].limits[1] for
// routes[0].limits[1].max.
func parent(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return ""
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

func (v *validator) addr(path []any, s string) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		v.errf(path, "invalid address %q: want host:port, such as 127.0.0.1:8080 or :8080", s)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.errf(path, "invalid port %q: a number from 0 to 65535", port)
	}
	if strings.ContainsAny(host, " /") {
		v.errf(path, "invalid host %q", host)
	}
}

func (v *validator) protocol(path []any, s string) {
	switch s {
	case "", ProtocolAuto, ProtocolHTTP1, ProtocolHTTP2:
	default:
		v.errf(path, "invalid protocol %q: auto, http1 or http2 (HTTP/2 only: h2c, by prior knowledge, to an http:// upstream)", s)
	}
}

func (v *validator) nonNegative(path []any, d Duration) {
	if d < 0 {
		v.errf(path, "must be at least 0")
	}
}

var methodName = regexp.MustCompile(`^[A-Z]+$`)

func (v *validator) validate(c *Config) {
	if c.Upstream == "" {
		v.errf(p("upstream"), "required: the URL requests go to, such as http://127.0.0.1:3000")
	} else {
		v.url(p("upstream"), c.Upstream, "http", "https")
	}
	v.protocol(p("upstream_protocol"), c.UpstreamProto)
	for i, a := range c.Listen {
		path := p("listen")
		if len(c.Listen) > 1 || locate(v.root, "listen").Kind == yaml.SequenceNode {
			path = p("listen", i)
		}
		v.addr(path, a)
	}
	if c.Admin != "" {
		v.addr(p("admin"), c.Admin)
	}
	if c.DemoUpstream != "" {
		v.addr(p("demo_upstream"), c.DemoUpstream)
	}
	if t := c.AdminAPI.Token; t != "" && len(t) < MinAdminToken {
		v.errf(p("admin_api", "token"), "too short (%d bytes): at least %d, such as the output of openssl rand -hex 16", len(t), MinAdminToken)
	}
	if n := c.AdminAPI.HistoryKeys; n != nil && (*n < -1 || *n > MaxHistoryKeys) {
		v.errf(p("admin_api", "history_keys"), "%d: from 0 (charts only) to %d keys per limit, or -1 (no history)", *n, MaxHistoryKeys)
	}
	if r := c.AdminAPI.OverridesRefresh; r != 0 && time.Duration(r) < 10*time.Millisecond {
		v.errf(p("admin_api", "overrides_refresh"), "must be at least 10ms, not %s", time.Duration(r))
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
	v.nonNegative(p("shutdown_delay"), c.ShutdownDelay)
	if c.ShutdownTimeout < 0 {
		v.errf(p("shutdown_timeout"), "must be positive")
	}
	v.server(&c.Server)
	v.timeouts(p("timeouts"), &c.Timeouts)
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
		if n == 1 && (j.PublicKeyFile != "" || j.JWKSFile != "") {
			resolved := *j
			resolved.PublicKeyFile, resolved.JWKSFile = resolve(v.dir, j.PublicKeyFile), resolve(v.dir, j.JWKSFile)
			var fe *fieldError
			if _, err := newTokenVerifier(&resolved); errors.As(err, &fe) {
				v.errf(p("jwt", fe.field), "%v", fe.err)
			}
		}
	}
	parents := v.parents(c.Parents)
	for i, pc := range c.Parents {
		if pc.Adaptive != nil && c.Store.Type == "none" {
			v.errf(p("parents", i, "adaptive"), "needs a store that keeps adaptive totals (memory, redis, sentinel, cluster): type none keeps nothing")
		}
	}
	pools := map[string]int{}
	mux := http.NewServeMux()
	for i, r := range c.Routes {
		v.route(i, r, c, pools, mux, parents)
	}
	if c.Pusher != nil {
		v.pusher(c.Pusher)
	}
}

func (v *validator) server(s *ServerConfig) {
	for _, f := range []struct {
		name string
		d    Duration
	}{{"read_header_timeout", s.ReadHeaderTimeout}, {"idle_timeout", s.IdleTimeout}, {"body_read_timeout", s.BodyReadTimeout}, {"ping_interval", s.PingInterval}} {
		v.nonNegative(p("server", f.name), f.d)
	}
	if s.MaxHeaderBytes != nil && *s.MaxHeaderBytes < 1024 {
		v.errf(p("server", "max_header_bytes"), "must be at least 1KiB")
	}
	for _, f := range []struct {
		name string
		n    *int
	}{{"max_connections", s.MaxConnections}, {"max_connections_per_ip", s.MaxConnectionsPerIP}} {
		if f.n != nil && *f.n < 0 {
			v.errf(p("server", f.name), "must be at least 0 (0: no limit)")
		}
	}
}

func (v *validator) timeouts(path []any, t *TimeoutsConfig) {
	v.nonNegative(append(path[:len(path):len(path)], "dial"), t.Dial)
	v.nonNegative(append(path[:len(path):len(path)], "response_header"), t.ResponseHeader)
	v.nonNegative(append(path[:len(path):len(path)], "total"), t.Total)
}

func (v *validator) store(s *StoreConfig) {
	switch s.Type {
	case "", "memory", "none":
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
		v.errf(p("store", "type"), "invalid store %q: memory, redis, sentinel, cluster or none", s.Type)
	}
	for i, a := range s.Addrs {
		v.addr(p("store", "addrs", i), a)
	}
	if strings.ContainsAny(s.Prefix, "{}") {
		v.errf(p("store", "prefix"), "must not contain { or }")
	}
	v.nonNegative(p("store", "budget"), s.Budget)
}

// parents checks the parents and returns their max by name.
func (v *validator) parents(ps []ParentConfig) map[string]*keycap.Parent {
	out := map[string]*keycap.Parent{}
	for i, pc := range ps {
		pp := func(f string) []any { return p("parents", i, f) }
		switch {
		case pc.Name == "":
			v.errf(pp("name"), "required: the name limits give as parent:")
		case out[pc.Name] != nil:
			v.errf(pp("name"), "two parents named %q", pc.Name)
		}
		switch {
		case pc.Max == nil:
			v.errf(pp("max"), "required: slots the keys may hold at once in all")
		case *pc.Max < 1:
			v.errf(pp("max"), "must be at least 1, not %d", *pc.Max)
		}
		if pc.Keep != nil && *pc.Keep < 0 {
			v.errf(pp("keep"), "must be at least 0 (0 keeps nothing)")
		}
		if pc.Parent != "" {
			v.errf(pp("parent"), "a parent has no parent: totals are one level, so no chain or cycle of parents can form")
		}
		if a := pc.Adaptive; a != nil {
			ap := func(f string) []any { return p("parents", i, "adaptive", f) }
			switch {
			case a.Floor == nil:
				v.errf(ap("floor"), "required: the fewest slots the total may go down to")
			case a.Ceiling == nil:
				v.errf(ap("ceiling"), "required: the most slots the total may go up to")
			case a.Interval != nil && *a.Interval <= 0:
				v.errf(ap("interval"), "must be positive (at least 10ms), not %s", time.Duration(*a.Interval))
			case pc.Max != nil && *pc.Max >= 1:
				if _, err := keycap.NewParent(pc.Name, *pc.Max, pc.parentOptions()...); err != nil {
					var inv *keycap.InvalidLimitError
					if errors.As(err, &inv) {
						field, _ := strings.CutPrefix(inv.Field, "parent adaptive ")
						v.errf(ap(field), "%s, not %s", inv.Reason, inv.Value)
					}
				}
			}
		}
		if pc.Name != "" && pc.Max != nil && *pc.Max >= 1 {
			parent, err := keycap.NewParent(pc.Name, *pc.Max, pc.parentOptions()...) // named as in the file
			if err != nil {                                                          // reported above; the limits are checked against the fixed total
				parent, _ = keycap.NewParent(pc.Name, *pc.Max)
			}
			out[pc.Name] = parent
		}
	}
	return out
}

// specFields names, for each field of keycap.Spec, the field of a limit
// that sets it.
var specFields = map[string]string{"Name": "name", "Max": "max", "TTL": "ttl", "Wait": "wait", "Budget": "budget",
	"FailMode": "fail_mode", "Weight": "weight", "Parent": "parent", "Share": "share", "Minimum": "min",
	"Shadow": "shadow", "Fence": "fence"}

// spec checks the keycap.Spec a limit makes (LimitConfig.spec) as keycap
// checks every spec, and names the limit's field that is wrong.
func (v *validator) spec(lp func(string) []any, l LimitConfig, pool string, parents map[string]*keycap.Parent) {
	var parent *keycap.Parent
	if l.Parent != "" {
		parent = parents[l.Parent]
	}
	sp := l.spec(parent)
	sp.Name = pool
	if l.Parent != "" && parent == nil {
		sp.Share, sp.Minimum = 0, 0 // an unknown parent, reported on its own
	}
	err := sp.Validate()
	var all interface{ Unwrap() []error }
	errs := []error{err}
	if errors.As(err, &all) {
		errs = all.Unwrap()
	}
	for _, e := range errs {
		var inv *keycap.InvalidLimitError
		if errors.As(e, &inv) {
			field := specFields[inv.Field]
			if field == "" {
				field = "max"
			}
			v.errf(lp(field), "%s, not %s", inv.Reason, inv.Value)
		}
	}
}

// spec returns the keycap.Spec of l, under parent (nil: none): its name is
// the route's pool, set by httplimit.
func (l LimitConfig) spec(parent *keycap.Parent) keycap.Spec {
	s := keycap.Spec{Wait: time.Duration(l.Wait), Budget: time.Duration(l.Budget), FailMode: l.FailMode,
		Weight: l.Weight, Parent: parent, Share: l.Share, Minimum: l.Min, Shadow: l.Shadow, Fence: l.Fence}
	if l.Max != nil {
		s.Max = *l.Max
	}
	if l.TTL != nil {
		s.TTL = time.Duration(*l.TTL)
	}
	return s
}

// sharing checks what a limit's shares add to its spec: the parent it
// names, and the shares read from the request.
func (v *validator) sharing(lp func(string) []any, l LimitConfig, c *Config, parents map[string]*keycap.Parent) {
	if l.Parent == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"shares", len(l.Shares) > 0}, {"share_by", l.ShareBy != ""}} {
			if f.set {
				v.errf(lp(f.name), "needs parent: (a share is of a parent's total)")
			}
		}
		return
	}
	if _, ok := parents[l.Parent]; !ok {
		names := make([]string, 0, len(c.Parents))
		for _, pc := range c.Parents {
			names = append(names, pc.Name)
		}
		v.errf(lp("parent"), "unknown parent %q (parents: %s)", l.Parent, strings.Join(names, ", "))
	}
	if l.Share > MaxShare {
		v.errf(lp("share"), "must be at most %d, not %d", MaxShare, l.Share)
	}
	for k, n := range l.Shares {
		if n < 1 || n > MaxShare {
			v.errf(append(lp("shares"), k), "must be between 1 and %d, not %d", MaxShare, n)
		}
	}
	if len(l.Shares) > 0 && l.ShareBy == "" && (l.Key == "" || l.Key == "ip") {
		v.errf(lp("shares"), "a table of client addresses is not supported: look shares up by share_by: (a header or a claim)")
	}
	if l.ShareBy != "" {
		src, err := parseKey(l.ShareBy)
		switch {
		case err != nil || (src.kind != "header" && src.kind != "claim"):
			v.errf(lp("share_by"), "invalid %q: header:NAME or claim:NAME", l.ShareBy)
		case src.kind == "claim" && c.JWT == nil:
			v.errf(lp("share_by"), "%q needs the jwt section, to verify the tokens it reads", l.ShareBy)
		case src.kind == "header" && len(l.Shares) == 0:
			v.errf(lp("share_by"), "a header is set by the client: give shares:, the table of its values, rather than trust it as a number")
		}
	}
}

func (v *validator) route(i int, r RouteConfig, c *Config, pools map[string]int, mux *http.ServeMux, parents map[string]*keycap.Parent) {
	rp := func(f ...any) []any { return append(p("routes", i), f...) }
	if r.Name == "" {
		v.errf(rp("name"), "required")
	}
	switch {
	case !strings.HasPrefix(r.Path, "/"):
		v.errf(rp("path"), "required, starting with /: /exports, /api/ (a prefix), /users/{id}/export")
	case c.Pusher != nil && isPusherPath(strings.ToLower(r.Path)):
		v.errf(rp("path"), "/app/ is the Pusher WebSocket endpoint")
	default:
		patterns := []string{r.Path}
		if len(r.Methods) > 0 {
			patterns = patterns[:0]
			for _, m := range r.Methods {
				patterns = append(patterns, m+" "+r.Path)
			}
		}
		for _, pat := range patterns {
			if err := register(mux, pat); err != nil {
				v.errf(rp("path"), "%v", err)
				break
			}
		}
	}
	for j, m := range r.Methods {
		if !methodName.MatchString(m) {
			v.errf(rp("methods", j), "invalid method %q: upper case, such as GET or POST", m)
		}
	}
	if r.Upstream != "" {
		v.url(rp("upstream"), r.Upstream, "http", "https")
	}
	v.protocol(rp("upstream_protocol"), r.Protocol)
	if r.Timeouts != nil {
		v.timeouts(rp("timeouts"), r.Timeouts)
	}
	switch r.Release {
	case "", ReleaseAuto, ReleaseOnUpstreamDone, ReleaseOnClientDone:
	default:
		v.errf(rp("release"), "invalid %q: auto, on_upstream_done or on_client_done", r.Release)
	}
	v.nonNegative(rp("max_hold"), r.MaxHold)
	pool := r.Pool
	if pool == "" {
		pool = r.Name
	}
	if prev, ok := pools[pool]; ok && !sameLimits(c.Routes[prev].Limits, r.Limits) {
		v.errf(rp("limits"), "routes %q and %q share pool %q but not their limits", c.Routes[prev].Name, r.Name, pool)
	} else if !ok {
		pools[pool] = i
	}
	if len(r.Limits) == 0 {
		v.errf(rp("limits"), "at least one limit")
	}
	keys := map[string]bool{}
	parentsUsed := map[string]bool{}
	for j, l := range r.Limits {
		lp := func(f string) []any { return rp("limits", j, f) }
		if l.Max == nil {
			v.errf(lp("max"), "required: requests in flight per key (0 refuses every request)")
		} else {
			v.spec(lp, l, pool, parents)
		}
		if l.RetryAfter != nil && *l.RetryAfter < 0 {
			v.errf(lp("retry_after"), "must be at least 0 (0 sends no Retry-After)")
		}
		if l.Fence && c.Store.Type == "none" {
			v.errf(lp("fence"), "needs a store that gives fencing tokens (memory, redis, sentinel, cluster): type none keeps nothing")
		}
		v.sharing(lp, l, c, parents)
		if l.Parent != "" {
			if parentsUsed[l.Parent+shadowMark(l.Shadow)] {
				v.errf(lp("parent"), "two limits of one route under parent %q: a request would count twice in its total", l.Parent)
			}
			parentsUsed[l.Parent+shadowMark(l.Shadow)] = true
		}
		switch l.OnMissing {
		case "", MissingIP, MissingRefuse:
		default:
			v.errf(lp("on_missing"), "invalid %q: ip (count by client address) or refuse (401)", l.OnMissing)
		}
		src, err := parseKey(l.Key)
		if err != nil {
			v.errf(lp("key"), "%v", err)
			continue
		}
		if src.kind == "claim" && c.JWT == nil {
			v.errf(lp("key"), "%q needs the jwt section, to verify the tokens it reads", l.Key)
		}
		if keys[src.String()+shadowMark(l.Shadow)] {
			v.errf(lp("key"), "two limits of one route on the same key %q", src.String())
		}
		keys[src.String()+shadowMark(l.Shadow)] = true
	}
}

// shadowMark keeps a shadow limit apart from the enforced limit of the same
// key or parent: they count in pools of their own.
func shadowMark(shadow bool) string {
	if shadow {
		return "\x00shadow"
	}
	return ""
}

var registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)

// register adds pattern to mux, returning ServeMux's panic for an invalid or
// conflicting pattern as an error.
func register(mux *http.ServeMux, pattern string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg := registeredAt.ReplaceAllString(fmt.Sprint(r), "")
			err = errors.New(strings.ReplaceAll(msg, ":\n", ": "))
		}
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return nil
}

func sameLimits(a, b []LimitConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.Max == nil) != (y.Max == nil) || (x.Max != nil && *x.Max != *y.Max) || x.Key != y.Key || x.Wait != y.Wait || ttlOf(x) != ttlOf(y) || x.FailMode != y.FailMode || x.OnMissing != y.OnMissing || x.Budget != y.Budget || x.Shadow != y.Shadow {
			return false
		}
		// The weight may differ: routes of one pool that cost more or less.
		if x.Parent != y.Parent || x.Share != y.Share || x.ShareBy != y.ShareBy || x.Min != y.Min || !maps.Equal(x.Shares, y.Shares) {
			return false
		}
	}
	return true
}

// ttlOf is a limit's TTL as its spec has it: none and 0 are the default.
func ttlOf(l LimitConfig) Duration {
	if l.TTL == nil {
		return 0
	}
	return *l.TTL
}

func (v *validator) pusher(pc *PusherConfig) {
	if pc.Upstream != "" {
		v.url(p("pusher", "upstream"), pc.Upstream, "http", "https", "ws", "wss")
	}
	if pc.DefaultCap != nil && *pc.DefaultCap < 0 {
		v.errf(p("pusher", "default_cap"), "must be at least 0 (0: uncapped)")
	}
	v.nonNegative(p("pusher", "heartbeat"), pc.Heartbeat)
	v.nonNegative(p("pusher", "ttl"), pc.TTL)
	hb, ttl := pc.Heartbeat, pc.TTL
	if hb == 0 {
		hb = Duration(30 * time.Second)
	}
	if ttl == 0 {
		ttl = Duration(90 * time.Second)
	}
	if hb > 0 && ttl > 0 && ttl <= hb {
		v.errf(p("pusher", "ttl"), "must exceed the heartbeat (%s)", time.Duration(hb))
	}
	if pc.MaxMessage != nil && *pc.MaxMessage < 1024 {
		v.errf(p("pusher", "max_message"), "must be at least 1KiB")
	}
	if pc.MessagesPerSecond != nil && *pc.MessagesPerSecond < 0 {
		v.errf(p("pusher", "messages_per_second"), "must be at least 0 (0: no limit)")
	}
	if pc.MessageBurst != nil && *pc.MessageBurst < 1 {
		v.errf(p("pusher", "message_burst"), "must be at least 1")
	}
	if pc.StoreErrorCode != 0 && !pushercap.Reconnects(pc.StoreErrorCode) {
		v.errf(p("pusher", "store_error_code"), "%d would stop pusher-js from reconnecting once the store is back: use 4100-4199 (reconnect after a back-off)", pc.StoreErrorCode)
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
		switch {
		case a.Key == "":
			v.errf(ap("key"), "required")
		case !validAppKey(a.Key):
			v.errf(ap("key"), "invalid key %q: letters, digits, '-', '_' and '.' only", a.Key)
		case keys[a.Key]:
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

// validAppKey reports whether an app key can appear in /app/{key} as is.
func validAppKey(k string) bool {
	if k == "." || k == ".." {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
