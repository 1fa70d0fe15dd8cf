package gateway_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keycap/keycap/internal/testkit"
)

// grpcUpstream is a real grpc-go server (grpc's interop TestService) on
// loopback. It counts the calls in flight per x-tenant. A unary call's
// payload says what it does: "" echoes (with header and trailer metadata),
// "hold" waits for the gate (or its end), "sleep" takes 20 ms, "fail"
// answers NOT_FOUND with details and a custom trailer, "deadline" reports
// the deadline it got and waits for it.
type grpcUpstream struct {
	testgrpc.UnimplementedTestServiceServer
	addr      string
	conc      *testkit.Concurrency
	gate      *testkit.Gate
	entered   chan string        // a held call or a stream began (its tenant)
	ended     chan error         // a held call or a stream ended (its context's error)
	deadlines chan time.Duration // what a "deadline" call had left
	arrivals  chan time.Time     // when each "arrive" call reached the upstream
	calls     atomic.Int64
}

func newGRPCUpstream(t *testing.T, opts ...grpc.ServerOption) *grpcUpstream {
	t.Helper()
	u := &grpcUpstream{conc: testkit.NewConcurrency(), gate: testkit.NewGate(),
		entered: make(chan string, 1000), ended: make(chan error, 1000),
		deadlines: make(chan time.Duration, 10), arrivals: make(chan time.Time, 10)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(s, u)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		u.gate.Open()
		s.Stop()
	})
	u.addr = ln.Addr().String()
	return u
}

func tenantOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-tenant"); len(v) > 0 {
		return v[0]
	}
	if v := md.Get("x-tenant-bin"); len(v) > 0 {
		return fmt.Sprintf("bin:%x", v[0])
	}
	return ""
}

func (u *grpcUpstream) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	u.calls.Add(1)
	tenant := tenantOf(ctx)
	u.conc.Enter(tenant)
	defer u.conc.Leave(tenant)
	switch string(req.GetPayload().GetBody()) {
	case "hold":
		u.entered <- tenant
		select {
		case <-u.gate.C():
		case <-ctx.Done():
		}
		u.ended <- ctx.Err()
	case "sleep":
		time.Sleep(20 * time.Millisecond) // the upstream's work: calls overlap
	case "fail":
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-custom-trailer", "after"))
		st, _ := status.New(codes.NotFound, "no such thing: 100% gone").WithDetails(&errdetails.ErrorInfo{Reason: "GONE", Domain: "test"})
		return nil, st.Err()
	case "deadline":
		dl, _ := ctx.Deadline()
		u.deadlines <- time.Until(dl)
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case "arrive":
		u.arrivals <- time.Now()
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-header", "before"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "after", "x-trailer-bin", string([]byte{0, 1, 2, 255})))
	return &testgrpc.SimpleResponse{Payload: req.GetPayload(), Username: tenant}, nil
}

// StreamingOutputCall sends a message per response parameter, then ends with
// a trailer.
func (u *grpcUpstream) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	for i, p := range req.GetResponseParameters() {
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: bytes.Repeat([]byte{byte(i)}, int(p.GetSize()))}}); err != nil {
			return err
		}
	}
	s.SetTrailer(metadata.Pairs("x-sent", fmt.Sprint(len(req.GetResponseParameters()))))
	if rs := req.GetResponseStatus(); rs != nil {
		return status.Error(codes.Code(rs.GetCode()), rs.GetMessage())
	}
	return nil
}

// StreamingInputCall adds up the sizes of the messages it receives.
func (u *grpcUpstream) StreamingInputCall(s grpc.ClientStreamingServer[testgrpc.StreamingInputCallRequest, testgrpc.StreamingInputCallResponse]) error {
	n := 0
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return s.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: int32(n)})
		}
		if err != nil {
			return err
		}
		n += len(req.GetPayload().GetBody())
	}
}

// FullDuplexCall echoes each message at once, counted in flight for its
// tenant while it lasts.
func (u *grpcUpstream) FullDuplexCall(s grpc.BidiStreamingServer[testgrpc.StreamingOutputCallRequest, testgrpc.StreamingOutputCallResponse]) error {
	tenant := tenantOf(s.Context())
	u.conc.Enter(tenant)
	u.entered <- tenant
	defer func() {
		u.conc.Leave(tenant)
		u.ended <- s.Context().Err()
	}()
	n := 0
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			s.SetTrailer(metadata.Pairs("x-echoed", fmt.Sprint(n)))
			return nil
		}
		if err != nil {
			return err
		}
		n++
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// grpcClient is a grpc-go client of the gateway g, by h2c.
func grpcClient(t *testing.T, g *gw, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.proxy, "http://"),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// tenantCtx is a call's context: its x-tenant metadata and a bound.
func tenantCtx(t *testing.T, tenant string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
}

func payload(s string) *testgrpc.Payload { return &testgrpc.Payload{Body: []byte(s)} }

// grpcGateway starts a gateway in front of up that serves h2c, with one
// route over the TestService capped per x-tenant by limit (YAML flow).
func grpcGateway(t *testing.T, up *grpcUpstream, limit string, more ...string) *gw {
	// more: routes ("  - {…}") after the first, and sections.
	var routes, sections string
	for _, m := range more {
		if strings.HasPrefix(m, "  - ") {
			routes += m
		} else {
			sections += m
		}
	}
	if !strings.Contains(sections, "server:") {
		sections += "server: {h2c: true}\n"
	}
	return startGateway(t, "upstream: http://"+up.addr+"\n"+sections+"routes:\n  - {name: grpc, path: /grpc.testing.TestService/, limits: ["+limit+"]}\n"+routes)
}

// TestGRPCCallsAndStreamsPassIntact: unary calls, server streams and
// bidirectional streams go through the gateway by HTTP/2 both ways with
// their messages, headers, trailers (binary ones too) and status codes as the
// upstream sent them — an error before any message (a trailers-only answer)
// included; a bidirectional stream is relayed message by message, unbuffered;
// the call's deadline reaches the upstream, less the time spent in the
// gateway.
func TestGRPCCallsAndStreamsPassIntact(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 4, key: "header:X-Tenant"}`)
	c := grpcClient(t, g)

	var header, trailer metadata.MD
	resp, err := c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{Payload: payload("hello")}, grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || string(resp.GetPayload().GetBody()) != "hello" || resp.GetUsername() != "a" {
		t.Fatalf("unary: %v, %v", resp, err)
	}
	if header.Get("x-header")[0] != "before" || trailer.Get("x-trailer")[0] != "after" || trailer.Get("x-trailer-bin")[0] != string([]byte{0, 1, 2, 255}) {
		t.Fatalf("unary: header %v, trailer %v", header, trailer)
	}

	trailer = nil
	_, err = c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{Payload: payload("fail")}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != "no such thing: 100% gone" || len(st.Details()) != 1 {
		t.Fatalf("error from the upstream: %v (details %v)", err, st.Details())
	}
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.GetReason() != "GONE" {
		t.Fatalf("details %v", st.Details())
	}
	if trailer.Get("x-custom-trailer")[0] != "after" {
		t.Fatalf("error's trailer %v", trailer)
	}

	// A server stream: every message, then the trailers and the status.
	ss, err := c.StreamingOutputCall(tenantCtx(t, "a"), &testgrpc.StreamingOutputCallRequest{
		ResponseParameters: []*testgrpc.ResponseParameters{{Size: 10}, {Size: 100000}, {Size: 1}},
		ResponseStatus:     &testgrpc.EchoStatus{Code: int32(codes.Aborted), Message: "stopped on purpose"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for {
		m, err := ss.Recv()
		if err != nil {
			if st := status.Convert(err); st.Code() != codes.Aborted || st.Message() != "stopped on purpose" {
				t.Fatalf("server stream ended with %v", err)
			}
			break
		}
		sizes = append(sizes, len(m.GetPayload().GetBody()))
	}
	if fmt.Sprint(sizes) != "[10 100000 1]" || ss.Trailer().Get("x-sent")[0] != "3" {
		t.Fatalf("server stream: %v, trailer %v", sizes, ss.Trailer())
	}

	// A bidirectional stream: each message is echoed before the next is
	// sent, which a proxy that buffered either way would never do.
	bs, err := c.FullDuplexCall(tenantCtx(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		msg := fmt.Sprintf("ping %d", i)
		if err := bs.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload(msg)}); err != nil {
			t.Fatal(err)
		}
		got, err := bs.Recv()
		if err != nil || string(got.GetPayload().GetBody()) != msg {
			t.Fatalf("echo %d: %v, %v", i, got, err)
		}
	}
	if err := bs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Recv(); err != io.EOF {
		t.Fatalf("bidi stream ended with %v, want io.EOF", err)
	}
	if bs.Trailer().Get("x-echoed")[0] != "20" {
		t.Fatalf("bidi trailer %v", bs.Trailer())
	}

	// Deadlines: the upstream gets what is left of the client's, and a
	// call past it ends DEADLINE_EXCEEDED.
	ctx, cancel := context.WithTimeout(tenantCtx(t, "a"), 700*time.Millisecond)
	defer cancel()
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: payload("deadline")})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v", err)
	}
	if left := testkit.Recv(t, up.deadlines, 10*time.Second, "the upstream's deadline"); left <= 0 || left > 700*time.Millisecond {
		t.Fatalf("the upstream's call had %s left of a 700ms deadline", left)
	}
	_, err = c.EmptyCall(tenantCtx(t, "a"), &testgrpc.Empty{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("a method the upstream lacks: %v", err)
	}
}

// TestGRPCCapPerTenant: 200 concurrent calls of 20 tenants (x-tenant
// metadata) through a cap of 2 per tenant with a wait: every call is served,
// and the upstream never has more than 2 of a tenant's calls at once.
func TestGRPCCapPerTenant(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 2, key: "header:X-Tenant", wait: 20s}`)
	c := grpcClient(t, g)
	var wg testkit.Group
	var failed atomic.Int64
	for i := range 200 {
		wg.Go(func() {
			if _, err := c.UnaryCall(tenantCtx(t, fmt.Sprint("t", i%20)), &testgrpc.SimpleRequest{Payload: payload("sleep")}); err != nil {
				failed.Add(1)
				t.Log(err)
			}
		})
	}
	wg.Wait(t, 60*time.Second, "200 calls")
	peaks := up.conc.Peaks()
	if failed.Load() != 0 || up.calls.Load() != 200 || len(peaks) != 20 {
		t.Fatalf("%d failed, %d reached the upstream, %d tenants", failed.Load(), up.calls.Load(), len(peaks))
	}
	reached := 0
	for tenant, n := range peaks {
		if n > 2 {
			t.Errorf("tenant %s had %d calls at the upstream at once, cap 2", tenant, n)
		}
		if n == 2 {
			reached++
		}
	}
	if reached == 0 {
		t.Errorf("no tenant ever had 2 calls at once: the test proves nothing (%v)", peaks)
	}
}

// holdCall starts a unary call that the upstream holds until its gate
// opens, and returns once the upstream has it; the call's error comes on
// the channel.
func holdCall(t *testing.T, c testgrpc.TestServiceClient, up *grpcUpstream, ctx context.Context) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: payload("hold")})
		done <- err
	}()
	testkit.Recv(t, up.entered, 15*time.Second, "the held call at the upstream")
	return done
}

// TestGRPCRefusalIsResourceExhausted: a call over the cap gets what gRPC
// clients understand: grpc-go decodes RESOURCE_EXHAUSTED with a RetryInfo
// of the limit's retry_after; on the wire it is HTTP 200, application/grpc,
// trailers only, with grpc-retry-pushback-ms. A missing key with
// on_missing: refuse is UNAUTHENTICATED, a message over max_body
// RESOURCE_EXHAUSTED (max_body bounds each message, not a stream's total),
// an upstream that refuses connections UNAVAILABLE.
func TestGRPCRefusalIsResourceExhausted(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 1, key: "header:X-Tenant", on_missing: refuse, retry_after: 300ms}`,
		"  - {name: small, path: /grpc.testing.TestService/StreamingInputCall, max_body: 1KiB, limits: [{max: 5}]}\n",
		"  - {name: dead, path: /grpc.testing.TestService/HalfDuplexCall, upstream: "+deadURL(t)+", limits: [{max: 5}]}\n")
	c := grpcClient(t, g)
	held := holdCall(t, c, up, tenantCtx(t, "a"))

	var trailer metadata.MD
	_, err := c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{Payload: payload("x")}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "Too Many Concurrent Requests" {
		t.Fatalf("a call over the cap: %v", err)
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v", st.Details())
	}
	if ri, ok := st.Details()[0].(*errdetails.RetryInfo); !ok || ri.GetRetryDelay().AsDuration() != 300*time.Millisecond {
		t.Fatalf("details %v, want a RetryInfo of 300ms", st.Details())
	}
	if v := trailer.Get("grpc-retry-pushback-ms"); len(v) != 1 || v[0] != "300" {
		t.Fatalf("trailer %v, want grpc-retry-pushback-ms: 300", trailer)
	}
	if _, err := c.UnaryCall(tenantCtx(t, "b"), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}

	// On the wire, by a bare HTTP/2 client.
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, g.proxy+"/grpc.testing.TestService/UnaryCall", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc+proto")
	req.Header.Set("Te", "trailers")
	req.Header.Set("X-Tenant", "a")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("Content-Type") != "application/grpc" || h.Get("Grpc-Status") != "8" ||
		h.Get("Grpc-Message") != "Too Many Concurrent Requests" || h.Get("Grpc-Retry-Pushback-Ms") != "300" || len(body) != 0 || len(resp.Trailer) != 0 {
		t.Fatalf("on the wire: %d %v body %q trailer %v: want a trailers-only 200", resp.StatusCode, h, body, resp.Trailer)
	}
	raw, err := base64.RawStdEncoding.DecodeString(h.Get("Grpc-Status-Details-Bin"))
	var sp spb.Status
	if err != nil || proto.Unmarshal(raw, &sp) != nil || sp.GetCode() != 8 || len(sp.GetDetails()) != 1 {
		t.Fatalf("grpc-status-details-bin %q: %v %v", h.Get("Grpc-Status-Details-Bin"), err, &sp)
	}

	up.gate.Open()
	if err := testkit.Recv(t, held, 15*time.Second, "the held call"); err != nil {
		t.Fatal(err)
	}

	// A call without the key, with on_missing: refuse.
	_, err = c.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	if st := status.Convert(err); st.Code() != codes.Unauthenticated || st.Message() != "Unauthorized: this route needs header:X-Tenant" {
		t.Fatalf("without the key: %v", err)
	}
	// max_body bounds each message of a call, not the stream: five
	// messages of 500 bytes pass a bound of 1 KiB, one of 2000 does not.
	cs, err := c.StreamingInputCall(tenantCtx(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := cs.Send(&testgrpc.StreamingInputCallRequest{Payload: payload(strings.Repeat("x", 500))}); err != nil {
			t.Fatal(err)
		}
	}
	if sum, err := cs.CloseAndRecv(); err != nil || sum.GetAggregatedPayloadSize() != 2500 {
		t.Fatalf("5 messages of 500 bytes under max_body 1KiB: %v, %v", sum, err)
	}
	cs, err = c.StreamingInputCall(tenantCtx(t, "a"))
	if err == nil {
		_ = cs.Send(&testgrpc.StreamingInputCallRequest{Payload: payload(strings.Repeat("x", 2000))})
		_, err = cs.CloseAndRecv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over max_body: %v", err)
	}
	// An upstream that refuses connections.
	hs, err := c.HalfDuplexCall(tenantCtx(t, "a"))
	if err == nil {
		_, err = hs.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("an upstream down: %v", err)
	}
}

// TestGRPCRetryPolicyWaitsThePushback: a grpc-go client whose retry policy
// retries RESOURCE_EXHAUSTED after 10 ms waits the gateway's pushback (the
// limit's retry_after, 600 ms) instead, and its retry is served.
func TestGRPCRetryPolicyWaitsThePushback(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 1, key: "header:X-Tenant", retry_after: 600ms}`)
	c := grpcClient(t, g, grpc.WithDefaultServiceConfig(`{"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`))
	held := holdCall(t, c, up, tenantCtx(t, "a"))
	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{Payload: payload("arrive")})
		done <- err
	}()
	// Once the first attempt is refused, free the slot: a retry after the
	// policy's 10 ms would be served at once.
	for {
		m := g.waitLog(t, "keycap: request refused")
		if m["route"] == "grpc" {
			break
		}
	}
	refused := time.Now()
	up.gate.Open()
	if err := testkit.Recv(t, held, 15*time.Second, "the held call"); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Recv(t, done, 15*time.Second, "the retried call"); err != nil {
		t.Fatalf("the retried call: %v", err)
	}
	gap := testkit.Recv(t, up.arrivals, time.Second, "the retry at the upstream").Sub(refused)
	t.Logf("the retry reached the upstream %s after the refusal (pushback 600ms, policy backoff 10ms)", gap)
	if gap < 450*time.Millisecond || gap > 5*time.Second {
		t.Fatalf("the retry came %s after the refusal, want the 600ms pushback", gap)
	}
}

// TestGRPCStreamHoldsItsSlotUntilItEnds: a bidirectional stream holds its
// tenant's slot for its whole life (a call meanwhile waits for it, and ends
// DEADLINE_EXCEEDED when its own deadline passes first, without reaching the
// upstream), and frees it as soon as it ends — its client cancels it, its
// deadline passes, its client's connection closes, or the upstream ends it:
// a call waiting for the slot is then served at once, the stream's end
// reaching the upstream as a cancellation.
func TestGRPCStreamHoldsItsSlotUntilItEnds(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 1, key: "header:X-Tenant", wait: 10s}`)
	waiter := grpcClient(t, g)
	for _, end := range []string{"cancel", "deadline", "connection closed", "upstream ends"} {
		t.Run(end, func(t *testing.T) {
			conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.proxy, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithCancel(tenantCtx(t, "a"))
			defer cancel()
			if end == "deadline" {
				ctx, cancel = context.WithTimeout(ctx, 1500*time.Millisecond)
				defer cancel()
			}
			s, err := testgrpc.NewTestServiceClient(conn).FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&testgrpc.StreamingOutputCallRequest{Payload: payload("hi")}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err != nil {
				t.Fatal(err)
			}
			testkit.Recv(t, up.entered, 10*time.Second, "the stream at the upstream")

			if end != "deadline" {
				// The slot is the stream's: a call with a short deadline
				// waits for it in vain.
				short, cancelShort := context.WithTimeout(tenantCtx(t, "a"), 300*time.Millisecond)
				before := up.calls.Load()
				_, err = waiter.UnaryCall(short, &testgrpc.SimpleRequest{})
				cancelShort()
				if status.Code(err) != codes.DeadlineExceeded || up.calls.Load() != before {
					t.Fatalf("a call while the stream holds the slot: %v (%d calls reached the upstream)", err, up.calls.Load()-before)
				}
			}

			served := make(chan time.Time, 1)
			go func() {
				if _, err := waiter.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{}); err != nil {
					t.Errorf("the waiting call: %v", err)
				}
				served <- time.Now()
			}()
			var ended time.Time
			switch end {
			case "cancel":
				ended = time.Now()
				cancel()
			case "deadline":
				ended, _ = ctx.Deadline()
			case "connection closed":
				ended = time.Now()
				_ = conn.Close()
			case "upstream ends":
				ended = time.Now()
				_ = s.CloseSend()
			}
			upErr := testkit.Recv(t, up.ended, 10*time.Second, "the stream's end at the upstream")
			at := testkit.Recv(t, served, 10*time.Second, "the waiting call")
			t.Logf("%s: the upstream saw %v; the waiting call was served %s after", end, upErr, at.Sub(ended))
			if end != "upstream ends" && upErr == nil {
				t.Errorf("the upstream's stream ended without a cancellation")
			}
			if d := at.Sub(ended); d > 2*time.Second {
				t.Errorf("the waiting call was served %s after the stream ended", d)
			}
		})
	}
}

// TestGRPCStoreDownFailsClosedUnavailable: a limit that fails closed, its
// store down, answers UNAVAILABLE with the pushback of its retry_after.
func TestGRPCStoreDownFailsClosedUnavailable(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	redis := "redis://" + strings.TrimPrefix(deadURL(t), "http://")
	g := grpcGateway(t, up, `{max: 1, key: "header:X-Tenant", fail_mode: closed, retry_after: 2s}`,
		"store: {type: redis, url: '"+redis+"', budget: 100ms}\n")
	c := grpcClient(t, g)
	var trailer metadata.MD
	_, err := c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || trailer.Get("grpc-retry-pushback-ms")[0] != "2000" {
		t.Fatalf("store down: %v, trailer %v", err, trailer)
	}
	if ri, ok := st.Details()[0].(*errdetails.RetryInfo); !ok || ri.GetRetryDelay().AsDuration() != 2*time.Second {
		t.Fatalf("details %v", st.Details())
	}
	if up.calls.Load() != 0 {
		t.Fatalf("%d calls reached the upstream", up.calls.Load())
	}
}

// TestGRPCKeysFromMetadata: a binary (-bin) metadata value is a key like
// any header's (its base64 text); metadata over server.max_header_bytes is
// refused without harm to the calls after it.
func TestGRPCKeysFromMetadata(t *testing.T) {
	t.Parallel()
	up := newGRPCUpstream(t)
	g := grpcGateway(t, up, `{max: 1, key: "header:X-Tenant-Bin"}`, "server: {h2c: true, max_header_bytes: 16KiB}\n")
	c := grpcClient(t, g)
	bin := func(b ...byte) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "x-tenant-bin", string(b))
	}
	held := holdCall(t, c, up, bin(0, 1, 2, 0xff, '\n'))
	if _, err := c.UnaryCall(bin(0, 1, 2, 0xff, '\n'), &testgrpc.SimpleRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the same binary key: %v", err)
	}
	if _, err := c.UnaryCall(bin(0, 1, 2, 0xfe, '\n'), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("another binary key: %v", err)
	}
	_, err := c.UnaryCall(bin(bytes.Repeat([]byte{0xff}, 64<<10)...), &testgrpc.SimpleRequest{})
	if err == nil {
		t.Fatal("64 KiB of metadata through a 16 KiB bound")
	}
	t.Logf("64 KiB of metadata: %v", err)
	if _, err := c.UnaryCall(bin(9), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("a call after the huge one: %v", err)
	}
	up.gate.Open()
	if err := testkit.Recv(t, held, 15*time.Second, "the held call"); err != nil {
		t.Fatal(err)
	}
}

// TestGRPCUpstreamProtocol: upstream_protocol decides how the gateway
// speaks to the upstream: http2 (h2c) and auto reach a grpc-go server,
// http1 cannot (UNAVAILABLE); an https:// upstream is reached by h2 over
// TLS.
func TestGRPCUpstreamProtocol(t *testing.T) {
	up := newGRPCUpstream(t)
	g := startGateway(t, "upstream: http://"+up.addr+"\nserver: {h2c: true}\nroutes:\n"+
		"  - {name: h2, path: /grpc.testing.TestService/UnaryCall, upstream_protocol: http2, limits: [{max: 5}]}\n"+
		"  - {name: h1, path: /grpc.testing.TestService/EmptyCall, upstream_protocol: http1, limits: [{max: 5}]}\n")
	c := grpcClient(t, g)
	if _, err := c.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("http2: %v", err)
	}
	if _, err := c.EmptyCall(tenantCtx(t, "a"), &testgrpc.Empty{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("http1 to a gRPC server: %v, want Unavailable", err)
	}

	// TLS: the gateway process trusts the test's CA by SSL_CERT_FILE.
	cert, caFile := testCert(t)
	t.Setenv("SSL_CERT_FILE", caFile)
	tlsUp := newGRPCUpstream(t, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	tg := startGateway(t, "upstream: https://"+tlsUp.addr+"\nserver: {h2c: true}\nroutes:\n  - {name: grpc, path: /, limits: [{max: 5}]}\n")
	tc := grpcClient(t, tg)
	var trailer metadata.MD
	if _, err := tc.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer)); err != nil || trailer.Get("x-trailer")[0] != "after" {
		t.Fatalf("https upstream: %v, trailer %v", err, trailer)
	}
	_, err := tc.UnaryCall(tenantCtx(t, "a"), &testgrpc.SimpleRequest{Payload: payload("fail")})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("https upstream, an error: %v", err)
	}
}

// testCert returns a certificate for 127.0.0.1, and a file of its CA.
func testCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "keycap test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, file
}

// TestSilentClientLosesItsStreams: an HTTP/2 client whose network dies
// silently — it holds a stream, then neither reads nor writes, not even a
// PING's answer — is closed after ping_interval twice, and the slot its
// stream held is free again; without pings it would be held until TCP gave
// up, minutes later.
func TestSilentClientLosesItsStreams(t *testing.T) {
	t.Parallel()
	entered, gone := make(chan struct{}, 4), make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" { // a stream whose slot follows its client, as a gRPC call's
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			entered <- struct{}{}
			<-r.Context().Done() // until the gateway gives the request up
			gone <- struct{}{}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := startGateway(t, "upstream: "+up.URL+"\nserver: {h2c: true, ping_interval: 200ms}\n"+
		"routes: [{name: r, path: /, release: on_client_done, limits: [{max: 1, key: 'header:x-tenant'}]}]\n")

	// The silent client: h2c prior knowledge, one request, then nothing.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(g.proxy, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "gw"}, {":path", "/held"}, {"x-tenant", "a"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, entered, 10*time.Second, "the silent client's request at the upstream")
	silent := time.Now()

	// Its slot is taken: another request of the same tenant is refused.
	hc := &http.Client{Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, g.proxy+"/other", nil)
	req.Header.Set("X-Tenant", "a")
	if resp, err := hc.Do(req); err != nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("while the silent stream holds the slot: %v %v, want 429", resp, err)
	} else {
		resp.Body.Close()
	}
	// The gateway pings, hears nothing, closes: the upstream's request ends
	// and the slot is free.
	testkit.Recv(t, gone, 10*time.Second, "the silent client's request given up")
	if d := time.Since(silent); d > 5*time.Second {
		t.Errorf("the silent client's stream ended %v after it went silent, ping_interval 200ms", d)
	}
	testkit.WaitUntil(t, 5*time.Second, "the slot free again", func() bool {
		resp, err := hc.Do(req.Clone(context.Background()))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
