package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keycap/keycap/httplimit"
)

// Server runs a gateway: its proxy listeners, its admin listener (/metrics,
// /healthz, /readyz) and, when the configuration asks, the demo upstream.
type Server struct {
	file string
	log  *slog.Logger
	gw   *Gateway

	adminAddr string // the admin listener's address, set once at start

	mu        sync.Mutex
	cfg       *Config
	lastTried [sha256.Size]byte // what the configuration's files held when last loaded (watch.go)
	servers   []*http.Server
	proxies   []*limitListener // the proxy listeners
	wg        sync.WaitGroup

	draining atomic.Bool // /readyz answers 503: the gateway is stopping

	summaries summaryCache // the admin page's figures, computed at most once per SummaryEvery
}

// NewLogger returns the slog logger a configuration asks for, on stderr.
// Durations are logged in seconds (0.25, not 250000000).
func NewLogger(c LogConfig) *slog.Logger {
	level := slog.LevelInfo
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: secondsAttr}
	var log *slog.Logger
	if c.Format == "text" {
		log = slog.New(slog.NewTextHandler(os.Stderr, opts))
	} else {
		log = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return log
}

// secondsAttr writes durations as seconds.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// RedisLogger returns a go-redis logger (for redis.SetLogger, which the
// binary calls: a package changes no global) that sends go-redis's messages
// (dial failures, retries) to log at Debug: the store's failures reach the
// log once per outage through the Limiter, so these are details.
func RedisLogger(log *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return redisLogger{log}
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// Logger returns the server's logger.
func (s *Server) Logger() *slog.Logger { return s.log }

// Start loads file, builds the gateway and starts listening. It returns once
// every listener is bound.
func Start(file string) (*Server, error) {
	s := &Server{file: file}
	cfg, err := s.load()
	if err != nil {
		return nil, err
	}
	s.log, s.cfg = NewLogger(cfg.Log), cfg
	if cfg.DemoUpstream != "" {
		if err := s.listen("demo upstream", cfg.DemoUpstream, Demo()); err != nil {
			return nil, err
		}
	}
	if s.gw, err = New(cfg, s.log); err != nil {
		s.closeListeners()
		return nil, err
	}
	for _, addr := range cfg.Listen {
		if err := s.listen("proxy", addr, s.gw); err != nil {
			s.closeListeners()
			s.gw.Close()
			return nil, err
		}
	}
	if err := s.listen("admin", cfg.Admin, s.admin()); err != nil {
		s.closeListeners()
		s.gw.Close()
		return nil, err
	}
	if cfg.AdminAPI.Token != "" {
		s.log.Info("keycap: admin page", "url", "http://"+s.adminAddr+"/admin/")
	} else {
		s.log.Info("keycap: admin page and API off", "turn_on", "set admin_api.token (or KEYCAP_ADMIN_TOKEN)")
	}
	return s, nil
}

func (s *Server) listen(kind, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		ErrorLog: log.New(&slogLogWriter{s.log}, "", 0)}
	if kind == "proxy" {
		sc := s.cfg.Server
		srv.ReadHeaderTimeout = time.Duration(sc.ReadHeaderTimeout)
		srv.IdleTimeout = time.Duration(sc.IdleTimeout)
		srv.MaxHeaderBytes = int(*sc.MaxHeaderBytes)
		srv.Handler = bodyTimeout(time.Duration(sc.BodyReadTimeout), int64(*sc.MinBodyRate), h)
		if d := time.Duration(sc.PingInterval); d > 0 {
			// A client whose network died without a FIN or RST is found
			// within twice the interval, and its streams, and their slots,
			// end with its connection.
			srv.HTTP2 = &http.HTTP2Config{SendPingTimeout: d, PingTimeout: d}
		}
		if sc.H2C {
			srv.Protocols = new(http.Protocols)
			srv.Protocols.SetHTTP1(true)
			srv.Protocols.SetUnencryptedHTTP2(true)
		}
		cip, _ := httplimit.NewClientIP(httplimit.HeaderXForwardedFor, 0, s.cfg.ClientIP.TrustedProxies...) // validated
		ll := newLimitListener(ln, *sc.MaxConnections, *sc.MaxConnectionsPerIP, cip.Trusted)
		srv.ConnState = ll.connState
		s.gw.metrics.refusedConns(kind+" "+ln.Addr().String(), ll)
		ln = ll
	}
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	if ll, ok := ln.(*limitListener); ok {
		s.proxies = append(s.proxies, ll)
	}
	s.mu.Unlock()
	s.log.Info("keycap: listening", "kind", kind, "addr", ln.Addr().String())
	if kind == "admin" {
		s.adminAddr = ln.Addr().String()
	}
	s.wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("keycap: server failed", "kind", kind, "error", err)
		}
	})
	return nil
}

func (s *Server) admin() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.gw.metrics.handler())
	s.adminRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		var rd Readiness
		if s.draining.Load() {
			rd = Readiness{Draining: true}
		} else {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			rd = s.gw.Ready(ctx)
		}
		w.Header().Set("Content-Type", "application/json")
		if !rd.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rd)
	})
	return mux
}

// Reload reads the configuration file again and swaps it in atomically. A
// file that does not load or build keeps the current configuration, and the
// reason is logged and returned. Listen addresses cannot change on reload.
func (s *Server) Reload() error {
	cfg, err := s.load()
	if err == nil {
		err = s.gw.Reload(cfg)
	}
	if err != nil {
		s.log.Error("keycap: reload failed, keeping the current configuration", "file", s.file, "error", err)
		return err
	}
	s.mu.Lock()
	s.cfg = cfg
	s.mu.Unlock()
	s.log.Info("keycap: configuration reloaded", "file", s.file, "routes", len(cfg.Routes))
	return nil
}

// Drain stops the gateway the way a load balancer can follow: /readyz
// answers 503 at once, while the proxy keeps serving — without keep-alive,
// so that clients reconnect, elsewhere — for the configuration's
// shutdown_delay (the time endpoints take to drop the gateway), or until
// again receives (a second signal: stop now); then Shutdown.
func (s *Server) Drain(again <-chan os.Signal) error {
	s.draining.Store(true)
	s.mu.Lock()
	delay := time.Duration(s.cfg.ShutdownDelay)
	for _, srv := range s.servers {
		srv.SetKeepAlivesEnabled(false)
	}
	s.mu.Unlock()
	if delay > 0 {
		s.log.Info("keycap: draining: /readyz answers 503, requests are still served", "shutdown_delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-again:
			t.Stop()
			s.log.Info("keycap: a second signal: stopping without the rest of shutdown_delay")
		}
	}
	return s.Shutdown()
}

// Shutdown stops accepting, lets requests in flight finish (streams
// included) until the configuration's shutdown_timeout, closes the
// WebSockets with 1001 (going away) and releases everything. When the
// timeout cuts requests short, the error says how many.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	timeout := time.Duration(s.cfg.ShutdownTimeout)
	servers := s.servers
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.log.Info("keycap: shutting down", "timeout", timeout)
	go s.gw.ws.closeAll() // hijacked connections are not Shutdown's to wait for
	cut := false
	for _, srv := range servers {
		if e := srv.Shutdown(ctx); e != nil {
			cut = true
		}
	}
	requests := s.gw.inflight.Load()
	if cut {
		// Cut the requests short, and let their handlers return and
		// release their slots before the store closes: a slot left in a
		// shared store counts against its key on every gateway until its
		// TTL. Closing a connection ends its request's context; a request
		// held for its upstream after its client left ends with the stop.
		s.gw.holding.stop()
		for _, srv := range servers {
			_ = srv.Close()
		}
		s.gw.awaitRequests(releaseGrace)
	}
	s.wg.Wait()
	s.gw.Close()
	if cut {
		err := fmt.Errorf("shutdown_timeout (%s) passed with %d requests still in flight: they were cut off", timeout, requests)
		s.log.Warn("keycap: shutdown cut requests short", "timeout", timeout, "requests", requests)
		return err
	}
	s.log.Info("keycap: stopped")
	return nil
}

// releaseGrace bounds how long a stop cut short waits for the requests it
// cut to return and release their slots.
const releaseGrace = 5 * time.Second

// awaitRequests waits until no request is being served, or d passes.
func (g *Gateway) awaitRequests(d time.Duration) {
	deadline := time.Now().Add(d)
	for g.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, srv := range s.servers {
		_ = srv.Close()
	}
}
