package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/keycap/keycap/cmd/keycap/internal/gateway"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
)

// BenchmarkGRPCProxy measures gRPC unary calls per second from grpc-go
// clients (one connection, conc calls at once, a tenant each) direct to a
// grpc-go upstream, through a bare httputil.ReverseProxy (h2c both ways:
// what net/http's HTTP/2 costs a proxy by itself), through the gateway
// without a limit (the catch-all) and through the gateway with a limit per
// x-tenant that has room for every call, in alternating rounds of one
// benchmark. The proxies run in-process behind a real h2c server on
// loopback, and reach the upstream by h2c. limit/direct, limit/bare and
// limit/nolimit are the ratios of the rates; handler=5ms rows call an
// upstream that takes 5 ms per call.
func BenchmarkGRPCProxy(b *testing.B) {
	up := benchGRPCUpstream(b)
	direct := benchGRPCClient(b, up)
	bare := benchGRPCBare(b, up)
	stores := []struct{ name, yaml string }{
		{"memstore", "store: {type: memory}\n"},
		{"redis", "store: {type: redis, url: 'redis://" + testenv.RedisAddr() + "', prefix: '" + testenv.Prefix(b, testenv.Redis(b)) + "'}\n"},
	}
	for _, st := range stores {
		nolimit := benchGRPCGateway(b, st.yaml+"upstream: http://"+up+"\n")
		limit := benchGRPCGateway(b, st.yaml+"upstream: http://"+up+`
routes:
  - name: grpc
    path: /grpc.testing.TestService/
    limits:
      - max: 1000
        key: header:X-Tenant
`)
		for _, handler := range []string{"0ms", "5ms"} {
			for _, conc := range []int{1, 16} {
				if handler == "5ms" && conc == 1 {
					continue // 5 ms a call: the handler's time, nothing of the proxies
				}
				b.Run(fmt.Sprintf("%s/handler=%s/clients=%d", st.name, handler, conc), func(b *testing.B) {
					call := func(c testgrpc.TestServiceClient) func(int) error {
						req := &testgrpc.SimpleRequest{}
						if handler == "5ms" {
							req.Payload = &testgrpc.Payload{Body: []byte("io")}
						}
						ctxs := make([]context.Context, conc)
						for w := range ctxs {
							ctxs[w] = metadata.AppendToOutgoingContext(context.Background(), "x-tenant", fmt.Sprint("t", w))
						}
						return func(w int) error {
							_, err := c.UnaryCall(ctxs[w], req)
							return err
						}
					}
					t := testkit.Alternate(b, conc, 500, 200, call(direct), call(bare), call(nolimit), call(limit))
					b.ReportMetric(float64(b.N)/t[0].Seconds(), "direct-calls/s")
					b.ReportMetric(float64(b.N)/t[1].Seconds(), "bare-calls/s")
					b.ReportMetric(float64(b.N)/t[2].Seconds(), "nolimit-calls/s")
					b.ReportMetric(float64(b.N)/t[3].Seconds(), "limit-calls/s")
					b.ReportMetric(float64(t[0])/float64(t[3]), "limit/direct")
					b.ReportMetric(float64(t[1])/float64(t[3]), "limit/bare")
					b.ReportMetric(float64(t[2])/float64(t[3]), "limit/nolimit")
				})
			}
		}
	}
}

// benchUnary is the benchmark's upstream: UnaryCall answers at once, or
// after 5 ms when the payload says "io".
type benchUnary struct {
	testgrpc.UnimplementedTestServiceServer
}

func (benchUnary) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if string(req.GetPayload().GetBody()) == "io" {
		time.Sleep(5 * time.Millisecond)
	}
	return &testgrpc.SimpleResponse{}, nil
}

// benchGRPCUpstream starts the upstream and returns its address.
func benchGRPCUpstream(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, benchUnary{})
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(s.Stop)
	return ln.Addr().String()
}

// benchGRPCGateway starts an in-process gateway on config behind an h2c
// server, and returns a client of it.
func benchGRPCGateway(b *testing.B, config string) testgrpc.TestServiceClient {
	cfg, err := gateway.ParseConfig("bench.yaml", []byte(config))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close)
	return benchH2C(b, g)
}

// benchGRPCBare is the baseline proxy: httputil.ReverseProxy to upstream
// by h2c, flushing as the gateway does, and nothing else.
func benchGRPCBare(b *testing.B, upstream string) testgrpc.TestServiceClient {
	u, err := url.Parse("http://" + upstream)
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return benchH2C(b, &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: tr, FlushInterval: -1})
}

// benchH2C serves h behind an h2c server on loopback, and returns a client
// of it.
func benchH2C(b *testing.B, h http.Handler) testgrpc.TestServiceClient {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	b.Cleanup(srv.Close)
	return benchGRPCClient(b, strings.TrimPrefix(srv.URL, "http://"))
}

func benchGRPCClient(b *testing.B, addr string) testgrpc.TestServiceClient {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}
