package gateway

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
)

// FenceHeader carries, upstream, the fencing token of each slot of a limit
// with fence: true, as "route=token" (one value per limit); a client's own
// is dropped.
const FenceHeader = "Keycap-Fence"

// Why the gateway cut a request to the upstream short.
var (
	errResponseHeaderTimeout = errors.New("the upstream sent no response headers in time (timeouts.response_header)")
	errTotalTimeout          = errors.New("the upstream did not finish in time (timeouts.total)")
	errHoldExpired           = errors.New("the client left and the upstream did not finish within max_hold")
	errStopped               = errors.New("the gateway stopped: shutdown_timeout passed")
)

// upstreamSettings are a route's bounds on its requests to the upstream,
// carried to the transport in the request's context.
type upstreamSettings struct {
	dial, responseHeader, total time.Duration
}

type settingsKey struct{}

func settingsOf(ctx context.Context) upstreamSettings {
	s, _ := ctx.Value(settingsKey{}).(upstreamSettings)
	return s
}

// newTransport returns the transport to every upstream: its dial timeout
// and response-header timeout are those of the request's route.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: settingsOf(ctx).dial, KeepAlive: 30 * time.Second}
			if d.Timeout == 0 {
				d.Timeout = 5 * time.Second
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// transports are the gateway's connections to its upstreams: a pool per
// protocol.
type transports struct {
	auto  *http.Transport // HTTP/1.1, or HTTP/2 where TLS negotiates it
	http1 *http.Transport // HTTP/1.1 only
	http2 *http.Transport // HTTP/2 only: h2c to http://, h2 to https://
}

func newTransports() *transports {
	t := &transports{auto: newTransport(), http1: newTransport(), http2: newTransport()}
	t.http1.Protocols = new(http.Protocols)
	t.http1.Protocols.SetHTTP1(true)
	t.http2.Protocols = new(http.Protocols)
	t.http2.Protocols.SetHTTP2(true)
	t.http2.Protocols.SetUnencryptedHTTP2(true)
	return t
}

// pick is the one rule of the protocol a request goes upstream by, under
// its route's upstream_protocol: auto sends a gRPC call to an http://
// upstream by h2c, since gRPC has no HTTP/1.1.
func (t *transports) pick(protocol string, out *http.Request) *http.Transport {
	switch protocol {
	case ProtocolHTTP1:
		return t.http1
	case ProtocolHTTP2:
		return t.http2
	}
	if out.URL.Scheme == "http" && isGRPC(out) {
		return t.http2
	}
	return t.auto
}

// protocolTransport sends a route's requests by its upstream_protocol.
type protocolTransport struct {
	t        *transports
	protocol string
}

func (p protocolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.t.pick(p.protocol, req).RoundTrip(req)
}

// headerTimeout bounds the wait for a response's headers: the part of a
// request where an upstream that accepted and never answers holds a client
// and its slot.
type headerTimeout struct{ next http.RoundTripper }

func (t headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	d := settingsOf(req.Context()).responseHeader
	if d <= 0 {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(d, func() { cancel(errResponseHeaderTimeout) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() {
		// The timer fired: the response, if any, came too late to trust
		// its body (its context is cancelled).
		if resp != nil {
			resp.Body.Close()
		}
		cancel(nil)
		return nil, errResponseHeaderTimeout
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases a response's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// Write passes writes through for upgraded (101) connections, whose body
// is the connection.
func (b *cancelOnClose) Write(p []byte) (int, error) {
	if w, ok := b.ReadCloser.(io.Writer); ok {
		return w.Write(p)
	}
	return 0, errors.New("gateway: response body is not writable")
}

// routeProxy forwards a route's requests to its upstream, within the
// route's timeouts, and decides when the request is done — which is when its
// slots are released.
type routeProxy struct {
	g        *Gateway
	route    string
	settings upstreamSettings
	release  string // ReleaseAuto, ReleaseOnUpstreamDone, ReleaseOnClientDone
	maxHold  time.Duration
	rp       *httputil.ReverseProxy
}

// followsClient reports whether r ends as soon as its client leaves (its
// slots released then), rather than being held for the upstream to finish:
// on_client_done, and in auto mode a gRPC call, which is cancelled at the
// upstream too (gRPC carries the cancellation to the server's handler).
func (p *routeProxy) followsClient(r *http.Request) bool {
	return p.release == ReleaseOnClientDone || (p.release == ReleaseAuto && isGRPC(r))
}

// newRouteProxy returns the proxy of a route to target. Requests reach the
// upstream with the client's Host, X-Forwarded-For by the trusted-proxy rule
// (the client, the trusted hops, this gateway's peer), X-Forwarded-Host and
// X-Forwarded-Proto.
func (g *Gateway) newRouteProxy(route, target, protocol string, s upstreamSettings, release string, maxHold time.Duration, cip httplimit.ClientIP) (*routeProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &routeProxy{g: g, route: route, settings: s, release: release, maxHold: maxHold}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			// The slots' fencing tokens (limits with fence: true), never a
			// client's.
			pr.Out.Header.Del(FenceHeader)
			for _, f := range keycap.FencesFrom(pr.In.Context()) {
				pr.Out.Header.Add(FenceHeader, f.Limit.Name()+"="+strconv.FormatUint(f.Token, 10))
			}
			if xff := cip.ForwardedFor(pr.In); xff != "" {
				pr.Out.Header.Set("X-Forwarded-For", xff)
			}
			if q := requestOf(pr.In); q != nil && !q.deadline.IsZero() {
				// What is left of the call's deadline after its wait for
				// a slot.
				pr.Out.Header.Set("Grpc-Timeout", grpcTimeoutValue(time.Until(q.deadline)))
			}
		},
		Transport:      headerTimeout{protocolTransport{g.transports, protocol}},
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.fail,
		ErrorLog:       log.New(&slogLogWriter{g.log}, "", 0),
	}
	return p, nil
}

func (p *routeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := r.Context()
	settings := p.settings
	if gw, ok := w.(*grpcWriter); ok {
		// A gRPC call: the upstream's response goes to the client as it is.
		w = gw.ResponseWriter
		if q := requestOf(r); q != nil && !q.deadline.IsZero() {
			if !time.Now().Before(q.deadline) {
				q.set(outcomeUpstreamTimeout)
				writeError(w, r, http.StatusGatewayTimeout, "Gateway Timeout: the call's deadline passed")
				return
			}
			// The call's deadline bounds the wait for the upstream's
			// first headers (a stream's come with its first message).
			settings.responseHeader = 0
		}
		gr := &grpcResponse{ResponseWriter: w}
		w = gr
		in = context.WithValue(in, grpcResponseKey{}, gr)
	}
	ctx := context.WithValue(in, settingsKey{}, settings)
	if !p.followsClient(r) {
		// The upstream's work does not stop when the client goes: keep the
		// request (and its slots) until the upstream is done, or max_hold
		// after the client left.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(context.WithoutCancel(ctx))
		defer cancel(nil)
		var mu sync.Mutex
		var hold *time.Timer
		var held *heldRequest
		stop := context.AfterFunc(in, func() {
			// The client left (or a stop cut its connection): hold on,
			// but not past max_hold, nor past a stop.
			mu.Lock()
			hold = time.AfterFunc(p.maxHold, func() { cancel(errHoldExpired) })
			held = p.g.holding.add(func() { cancel(errStopped) })
			mu.Unlock()
		})
		defer func() {
			stop()
			mu.Lock()
			if hold != nil {
				hold.Stop()
				p.g.holding.remove(held)
			}
			mu.Unlock()
		}()
	}
	if p.settings.total > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.settings.total, errTotalTimeout)
		defer cancel()
	}
	start := time.Now()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
	if q := requestOf(r); q == nil || q.outcome == "" {
		o := p.g.metrics.upstream.WithLabelValues(p.route)
		if ex := exemplar(traceOf(q, r)); ex != nil {
			o.(prometheus.ExemplarObserver).ObserveWithExemplar(time.Since(start).Seconds(), ex)
		} else {
			o.Observe(time.Since(start).Seconds())
		}
	}
}

// modifyResponse makes a held request drain the upstream's response when
// the client goes away mid-body, so that the slot stays taken until the
// upstream has finished. Streams are the exception in auto mode: an event
// stream or an upgraded connection never finishes on its own, so it ends
// when the client leaves.
func (p *routeProxy) modifyResponse(resp *http.Response) error {
	if keycap.OverloadStatus(resp.StatusCode) {
		keycap.ReportOverload(resp.Request.Context()) // to the route's adaptive parents
	}
	if gr, ok := resp.Request.Context().Value(grpcResponseKey{}).(*grpcResponse); ok {
		if grpcTrailersOnly(resp) {
			gr.trailersOnly = true
		}
		if code := resp.Header.Get("Grpc-Status"); code != "" {
			reportGRPCOverload(resp.Request.Context(), code)
		} else { // the status comes in the trailers, once the body ends
			resp.Body = &grpcStatusBody{ReadCloser: resp.Body, resp: resp}
		}
	}
	if p.followsClient(resp.Request) || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	if p.release == ReleaseAuto && isStream(resp) {
		return nil
	}
	resp.Body = &drainOnClose{ReadCloser: resp.Body}
	return nil
}

// isStream reports whether a response is a stream that lasts as long as its
// client: server-sent events.
func isStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// drainOnClose reads what is left of a body before closing it: the
// upstream's response is received in full (and discarded) even when nobody
// is left to send it to. The read ends with the request's context (max_hold,
// timeouts.total).
type drainOnClose struct {
	io.ReadCloser
	once sync.Once
}

func (b *drainOnClose) Close() error {
	b.once.Do(func() { _, _ = io.Copy(io.Discard, b.ReadCloser) })
	return b.ReadCloser.Close()
}

// fail answers a request the upstream could not serve: 504 when it timed
// out, 502 when it failed otherwise, nothing when the client is gone.
func (p *routeProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	cause := context.Cause(r.Context())
	q := requestOf(r)
	switch {
	case errors.Is(cause, errHoldExpired) || errors.Is(cause, errStopped) || (p.followsClient(r) && r.Context().Err() != nil && cause == context.Canceled):
		q.set(outcomeClientGone)
		return // the client left: nobody to answer
	case errors.Is(cause, errGRPCDeadline):
		q.set(outcomeUpstreamTimeout)
		keycap.ReportOverload(r.Context())
		writeError(w, r, http.StatusGatewayTimeout, "Gateway Timeout: the call's deadline passed")
	case errors.Is(cause, errTotalTimeout) || errors.Is(err, errResponseHeaderTimeout) || isTimeout(err):
		q.set(outcomeUpstreamTimeout)
		keycap.ReportOverload(r.Context())
		if cause != nil && errors.Is(cause, errTotalTimeout) {
			err = cause
		}
		p.g.log.Warn("keycap: upstream timed out", "route", p.route, "request_id", r.Header.Get("X-Request-Id"),
			"method", r.Method, "path", r.URL.Path, "error", err.Error())
		writeError(w, r, http.StatusGatewayTimeout, "Gateway Timeout")
	case isBodyTooLarge(err):
		q.set(outcomeTooLarge)
		writeError(w, r, http.StatusRequestEntityTooLarge, "Request Entity Too Large")
	case errors.Is(err, errBodyTimeout):
		q.set(outcomeRequestTimeout)
		w.Header().Set("Connection", "close")
		writeError(w, r, http.StatusRequestTimeout, "Request Timeout")
	default:
		q.set(outcomeUpstreamError)
		p.g.log.Warn("keycap: upstream failed", "route", p.route, "request_id", r.Header.Get("X-Request-Id"),
			"method", r.Method, "path", r.URL.Path, "error", err.Error())
		writeError(w, r, http.StatusBadGateway, "Bad Gateway")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isBodyTooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

// slogLogWriter sends the ReverseProxy's own messages to the gateway's log
// at Debug.
type slogLogWriter struct{ log *slog.Logger }

func (w *slogLogWriter) Write(p []byte) (int, error) {
	w.log.Debug("keycap: proxy: " + string(p))
	return len(p), nil
}

// holding is the set of requests whose client left while the upstream
// still works on them (release: on_upstream_done or auto), each with what
// ends it: a stop cut short ends them all, so that they release their slots
// before the process exits. Only requests whose client left are in it.
type holding struct {
	mu      sync.Mutex
	stopped bool
	set     map[*heldRequest]struct{}
}

type heldRequest struct{ end func() }

// add registers a held request; once the gateway has stopped, it ends it at
// once.
func (h *holding) add(end func()) *heldRequest {
	hr := &heldRequest{end: end}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		end()
		return hr
	}
	if h.set == nil {
		h.set = map[*heldRequest]struct{}{}
	}
	h.set[hr] = struct{}{}
	return hr
}

func (h *holding) remove(hr *heldRequest) {
	h.mu.Lock()
	delete(h.set, hr)
	h.mu.Unlock()
}

// stop ends every held request, and every one held from now on.
func (h *holding) stop() {
	h.mu.Lock()
	h.stopped = true
	set := h.set
	h.set = nil
	h.mu.Unlock()
	for hr := range set {
		hr.end()
	}
}
