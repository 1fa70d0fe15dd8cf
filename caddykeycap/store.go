package caddykeycap

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/keycap/keycap"
	"github.com/keycap/keycap/memstore"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/store"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// The store types (StoreConfig.Type).
const (
	StoreMemory   = "memory"
	StoreRedis    = "redis"
	StoreCluster  = "cluster"
	StoreSentinel = "sentinel"
)

// StoreConfig says where the slots live. Its string fields may hold Caddy's
// global placeholders, such as {env.REDIS_PASSWORD}, expanded at
// provisioning.
//
// Handlers with the same store configuration, in one Caddy, share one
// keycap.Limiter (and its Redis client), across config reloads too: a slot
// taken before a reload is released after it into the same pools.
type StoreConfig struct {
	// Type is memory (the default: the slots of this Caddy process), redis,
	// cluster or sentinel.
	Type string `json:"type,omitempty"`
	// Addr is the Redis server's host:port (redis).
	Addr string `json:"addr,omitempty"`
	// Addrs are the cluster's seed nodes (cluster) or the sentinels
	// (sentinel), host:port each.
	Addrs []string `json:"addrs,omitempty"`
	// Master is the name of the master the sentinels watch (sentinel).
	Master   string `json:"master,omitempty"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// DB is the database number (redis, sentinel).
	DB int `json:"db,omitempty"`
	// TLS connects to Redis with TLS (1.2 or later, verified by the system's
	// roots).
	TLS bool `json:"tls,omitempty"`
	// Prefix is put before every key the store writes, to keep several
	// deployments apart on one Redis. It must not contain { or }.
	Prefix string `json:"prefix,omitempty"`
	// Budget is how long a store call may take before the store counts as
	// failed and the limits' fail mode applies. Default 250ms.
	Budget caddy.Duration `json:"budget,omitempty"`
}

// resolve returns c with its defaults and its global placeholders expanded,
// and checks it.
func (c StoreConfig) resolve() (StoreConfig, error) {
	repl := caddy.NewReplacer()
	exp := func(s string) string { return repl.ReplaceKnown(s, "") }
	c.Addr, c.Master, c.Username, c.Password, c.Prefix = exp(c.Addr), exp(c.Master), exp(c.Username), exp(c.Password), exp(c.Prefix)
	addrs := make([]string, 0, len(c.Addrs))
	for _, a := range c.Addrs {
		addrs = append(addrs, exp(a))
	}
	c.Addrs = addrs
	if c.Type == "" {
		c.Type = StoreMemory
	}
	return c, c.check(true)
}

// check reports the first field of c that is wrong; before placeholders are
// expanded (expanded false), it skips the prefix, which may hold one.
func (c StoreConfig) check(expanded bool) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("keycap: store: %s: %s", field, fmt.Sprintf(format, args...))
	}
	switch c.Type {
	case StoreMemory:
		if c.Addr != "" || len(c.Addrs) > 0 || c.Master != "" {
			return bad("type", "memory takes no address (set type redis, cluster or sentinel)")
		}
		// What only a Redis store uses would otherwise make a memory store
		// of its own, apart from the others' pools.
		for _, f := range []struct {
			name string
			set  bool
		}{{"username", c.Username != ""}, {"password", c.Password != ""}, {"db", c.DB != 0}, {"tls", c.TLS}, {"budget", c.Budget != 0}} {
			if f.set {
				return bad(f.name, "for redis, cluster and sentinel; a memory store decides in this process")
			}
		}
	case StoreRedis:
		if c.Addr == "" {
			return bad("addr", "required with type redis")
		}
		if len(c.Addrs) > 0 {
			return bad("addrs", "for cluster and sentinel; redis takes addr")
		}
	case StoreCluster, StoreSentinel:
		if len(c.Addrs) == 0 {
			return bad("addrs", "required with type %s", c.Type)
		}
		if c.Addr != "" {
			return bad("addr", "for redis; %s takes addrs", c.Type)
		}
		if c.Type == StoreSentinel && c.Master == "" {
			return bad("master", "required with type sentinel")
		}
		if c.Type == StoreCluster && c.DB != 0 {
			return bad("db", "a cluster has only database 0")
		}
	default:
		return bad("type", "%q: must be memory, redis, cluster or sentinel", c.Type)
	}
	if c.Type != StoreSentinel && c.Master != "" {
		return bad("master", "for sentinel only")
	}
	if c.DB < 0 {
		return bad("db", "%d: must be at least 0", c.DB)
	}
	if expanded && strings.ContainsAny(c.Prefix, "{}") {
		return bad("prefix", "%q: must not contain { or }", c.Prefix)
	}
	if c.Budget < 0 {
		return bad("budget", "%s: must be at least 0", time.Duration(c.Budget))
	}
	return nil
}

// limiters holds the Limiters of this process, one per distinct resolved
// store configuration, for as long as a handler uses it.
var limiters = caddy.NewUsagePool()

// sharedLimiter is a Limiter in the pool; the pool destructs it when its
// last handler is cleaned up.
type sharedLimiter struct {
	limiter  *keycap.Limiter
	client   redis.UniversalClient // nil for memory
	features store.Features        // the store's
}

// Destruct implements caddy.Destructor.
func (s *sharedLimiter) Destruct() error {
	err := s.limiter.Close()
	if s.client != nil {
		if cerr := s.client.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// poolKey is the identity of a resolved configuration in limiters.
func (c StoreConfig) poolKey() string {
	b, _ := json.Marshal(c) // plain fields: cannot fail
	return string(b)
}

// acquireLimiter returns the Limiter of c (resolved), making it when no
// handler uses one yet; release it with releaseLimiter(key).
func acquireLimiter(c StoreConfig) (key string, l *sharedLimiter, err error) {
	key = c.poolKey()
	v, _, err := limiters.LoadOrNew(key, func() (caddy.Destructor, error) { return newLimiter(c) })
	if err != nil {
		return "", nil, err
	}
	return key, v.(*sharedLimiter), nil
}

func releaseLimiter(key string) error {
	_, err := limiters.Delete(key)
	return err
}

func newLimiter(c StoreConfig) (*sharedLimiter, error) {
	opts := []keycap.Option{keycap.WithObserver(keycap.ObserverFunc(logEvents))}
	if c.Budget > 0 {
		opts = append(opts, keycap.WithDecisionBudget(time.Duration(c.Budget)))
	}
	if c.Type == StoreMemory {
		st := memstore.New()
		l, err := keycap.NewLimiter(st, opts...)
		if err != nil {
			return nil, err
		}
		return &sharedLimiter{limiter: l, features: st.Features()}, nil
	}
	var tlsConf *tls.Config
	if c.TLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	var client redis.UniversalClient
	switch c.Type {
	case StoreRedis:
		client = redis.NewClient(&redis.Options{Addr: c.Addr, Username: c.Username, Password: c.Password,
			DB: c.DB, TLSConfig: tlsConf, ContextTimeoutEnabled: true})
	case StoreCluster:
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Username: c.Username, Password: c.Password,
			TLSConfig: tlsConf, ContextTimeoutEnabled: true})
	case StoreSentinel:
		client = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.Master, SentinelAddrs: c.Addrs,
			Username: c.Username, Password: c.Password, DB: c.DB, TLSConfig: tlsConf, ContextTimeoutEnabled: true})
	}
	st, err := redisstore.New(client, redisstore.WithPrefix(c.Prefix))
	if err == nil {
		var l *keycap.Limiter
		if l, err = keycap.NewLimiter(st, opts...); err == nil {
			return &sharedLimiter{limiter: l, client: client, features: st.Features()}, nil
		}
	}
	_ = client.Close()
	return nil, fmt.Errorf("keycap: store: %w", err)
}

// logEvents logs the events an operator must see — the store's outages and
// recoveries, slots lost, an adaptive total that moved — to Caddy's log;
// the per-request events are left to metrics.
func logEvents(e keycap.Event) {
	log := func() *zap.Logger { return caddy.Log().Named("http.handlers.keycap") }
	switch e.Kind {
	case keycap.StoreFailed:
		log().Error("store failed: the limits' fail mode applies until it recovers",
			zap.String("limit", e.Limit.Name()), zap.String("node", e.Node), zap.Error(e.Err))
	case keycap.StoreRecovered:
		log().Info("store recovered", zap.String("node", e.Node),
			zap.Duration("outage", e.Held), zap.Int64("failed_calls", e.Failures))
	case keycap.LeaseLost:
		log().Warn("slot lost: it expired in the store before it was renewed",
			zap.String("limit", e.Limit.Name()), zap.Duration("held", e.Held))
	case keycap.ProcessOverloaded:
		log().Warn("store call over its budget while Caddy was overloaded; the fail mode applied",
			zap.String("limit", e.Limit.Name()), zap.Error(e.Err))
	case keycap.TotalChanged: // at most once an interval per parent: keycap.Limiter.Tuning's fields
		if t := e.Tuning; t != nil {
			log().Info("adaptive total changed", zap.String("parent", t.Parent), zap.Int("total", t.Total),
				zap.Int("previous", t.Previous), zap.String("reason", t.Reason), zap.Bool("shadow", t.Shadow),
				zap.Int64("version", t.Version), zap.Duration("mean", t.Mean), zap.Duration("baseline", t.Baseline),
				zap.Float64("in_flight", t.InFlight), zap.Int64("completed", t.Completed), zap.Int64("overloads", t.Overloads))
		}
	}
}
