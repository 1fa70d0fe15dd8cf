package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/grpclimit"
	"github.com/keycap/keycap/internal/testenv"
	"github.com/keycap/keycap/internal/testkit"
	"github.com/keycap/keycap/redisstore"
	"github.com/keycap/keycap/rpclimit"
)

func TestMain(m *testing.M) {
	if testkit.HelperRole() == "grpc-server" {
		os.Exit(fleetServer())
	}
	os.Exit(m.Run())
}

// The fleet's limits, as every server of it sets them.
const (
	fleetUnaryMax  = 3
	fleetStreamMax = 2
	fleetTTL       = 2 * time.Second
	streamMethod   = "/grpc.testing.TestService/StreamingOutputCall"
)

// They fail closed, with a decision budget of 5 s, so that a loaded
// machine's slow store calls never let a call run without its slot: the
// test checks the cap, not the fail mode.
func fleetRules(limits *rpclimit.Limiters) {
	_ = limits.Set(unary, rpclimit.Limit(keycap.Spec{Max: fleetUnaryMax, TTL: fleetTTL, Wait: 20 * time.Second, FailMode: keycap.FailClosed}).ByMetadata("x-tenant"))
	_ = limits.Set(streamMethod, rpclimit.Limit(keycap.Spec{Max: fleetStreamMax, TTL: fleetTTL, FailMode: keycap.FailClosed}).ByMetadata("x-tenant"))
}

// fleetServer is a helper process: a gRPC server with grpclimit on the
// test's Redis prefix, whose handlers report entering and leaving to the
// test's gauge (synchronously, so that the gauge sees them in the order
// they happen across processes).
func fleetServer() int {
	st, err := redisstore.New(redis.NewClient(testenv.RedisOptions()), redisstore.WithPrefix(os.Getenv("KEYCAP_GRPC_PREFIX")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	limiter, err := keycap.NewLimiter(st, keycap.WithDecisionBudget(5*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	limits, _ := rpclimit.New(limiter)
	fleetRules(limits)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gauge := os.Getenv("KEYCAP_GRPC_GAUGE")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	report := func(what, kind, key string) {
		resp, err := hc.Get(gauge + "/" + what + "?k=" + url.QueryEscape(kind+"/"+key))
		if err != nil {
			fmt.Fprintln(os.Stderr, "gauge:", err)
			os.Exit(2)
		}
		_ = resp.Body.Close()
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limits)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limits)))
	testpb.RegisterTestServiceServer(srv, &fleetService{report: report})
	fmt.Println("ready")
	fmt.Println("listening", ln.Addr())
	return func() int { _ = srv.Serve(ln); return 0 }()
}

type fleetService struct {
	testpb.UnimplementedTestServiceServer
	report func(what, kind, key string)
}

func (s *fleetService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	key := tenantOf(ctx)
	s.report("enter", "unary", key)
	defer s.report("leave", "unary", key)
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
	}
	return &testpb.SimpleResponse{}, nil
}

func (s *fleetService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	key := tenantOf(ss.Context())
	s.report("enter", "stream", key)
	defer s.report("leave", "stream", key)
	if err := ss.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-ss.Context().Done() // until the client cancels
	return nil
}

// TestFleet: 3 server processes on one Redis. 200 long streams from 50
// tenants (a cap of 2 each) and 1,000 concurrent unary calls (a cap of 3,
// waiting in line): the servers together never run more of a tenant's calls
// than its cap; streams that outlive two TTLs keep their slots (renewed).
// A killed server's stream slots come back within the TTL,
// and at the end every slot is free.
func TestFleet(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t, rdb)
	conc := testkit.NewConcurrency()
	gauge := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/enter":
			conc.Enter(r.URL.Query().Get("k"))
		case "/leave":
			conc.Leave(r.URL.Query().Get("k"))
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gauge.Serve(ln) }()
	t.Cleanup(func() { _ = gauge.Close() })

	const servers, tenants = 3, 50
	helpers := make([]*testkit.Helper, servers)
	clients := make([]testpb.TestServiceClient, servers)
	for i := range helpers {
		helpers[i] = testkit.StartHelper(t, "grpc-server", "ready", "KEYCAP_GRPC_PREFIX="+prefix, "KEYCAP_GRPC_GAUGE=http://"+ln.Addr().String())
		line, _ := helpers[i].WaitLine("listening", time.Minute)
		clients[i] = testpb.NewTestServiceClient(dial(t, strings.Fields(line)[1]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := func(i int) string { return fmt.Sprintf("tenant-%02d", i%tenants) }

	// 200 streams, 4 per tenant, round robin over the servers: 2 of each
	// tenant's are granted and stay open.
	type stream struct {
		server, tenant int
		cancel         context.CancelFunc
	}
	var mu sync.Mutex
	var open []stream
	refused, unavailable := 0, 0
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, stop := context.WithCancel(tenant(ctx, key(i)))
			s, err := clients[i%servers].StreamingOutputCall(sctx, &testpb.StreamingOutputCallRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				open = append(open, stream{i % servers, i % tenants, stop})
			case status.Code(err) == codes.ResourceExhausted:
				refused++
				stop()
			case status.Code(err) == codes.Unavailable: // the store was slower than 5 s: refused, as it fails closed
				unavailable++
				stop()
			default:
				stop()
				t.Errorf("stream %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if len(open) > tenants*fleetStreamMax {
		t.Fatalf("%d streams open (%d refused, %d for the store): want at most %d", len(open), refused, unavailable, tenants*fleetStreamMax)
	}
	perTenant := map[int]int{}
	for _, s := range open {
		perTenant[s.tenant]++
	}
	if len(perTenant) != tenants {
		t.Fatalf("streams open for %d tenants of %d", len(perTenant), tenants)
	}
	if unavailable > 0 {
		t.Logf("%d streams refused for a store call over 5 s (a loaded machine)", unavailable)
	}
	opened := time.Now()

	// 1,000 unary calls at once, 20 per tenant, waiting in line.
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := clients[i%servers].UnaryCall(tenant(ctx, key(i)), &testpb.SimpleRequest{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	slow := 0
	for err := range errs {
		switch {
		case status.Code(err) == codes.Unavailable:
			slow++
		case err != nil:
			t.Fatalf("a unary call waiting in line: %v", err)
		}
	}
	if slow > 0 {
		t.Logf("%d unary calls refused for a store call over 5 s (a loaded machine)", slow)
	}
	full := 0
	for k, n := range conc.Peaks() {
		if strings.HasPrefix(k, "unary/") && n == fleetUnaryMax {
			full++
		}
		if cap := map[bool]int{true: fleetUnaryMax, false: fleetStreamMax}[strings.HasPrefix(k, "unary/")]; n > cap {
			t.Errorf("%s: %d in flight at once across the servers, cap %d", k, n, cap)
		}
	}

	if full < tenants/2 {
		t.Errorf("only %d of %d tenants ever had %d unary calls in flight: the run did not contend", full, tenants, fleetUnaryMax)
	}

	// The streams have lived two TTLs: their slots were renewed, not lost —
	// a tenant with two open still gets no third.
	time.Sleep(2*fleetTTL - time.Since(opened)) // the time under test, not a synchronisation
	for tn, n := range perTenant {
		if n < fleetStreamMax {
			continue
		}
		s, err := clients[tn%servers].StreamingOutputCall(tenant(ctx, key(tn)), &testpb.StreamingOutputCallRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("tenant %d after %v (TTL %v): a third stream got %v; want RESOURCE_EXHAUSTED (its two streams' slots renewed)", tn, time.Since(opened), fleetTTL, err)
		}
	}

	// Kill the server holding the most streams: its slots come back within
	// the TTL, and the same tenants' streams are granted on another.
	held := make([]int, servers)
	for _, s := range open {
		held[s.server]++
	}
	victim := 0
	for i := range held {
		if held[i] > held[victim] {
			victim = i
		}
	}
	var lost []int
	for _, s := range open {
		if s.server == victim {
			lost = append(lost, s.tenant)
		}
	}
	other := (victim + 1) % servers
	helpers[victim].Kill()
	killed := time.Now()
	for _, tn := range lost {
		testkit.WaitUntil(t, fleetTTL+5*time.Second, "a stream of the killed server's tenant", func() bool {
			sctx, stop := context.WithCancel(tenant(ctx, key(tn)))
			s, err := clients[other].StreamingOutputCall(sctx, &testpb.StreamingOutputCallRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			if err != nil {
				stop()
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("tenant %d's stream after the kill: %v", tn, err)
				}
				return false
			}
			open = append(open, stream{other, tn, stop})
			return true
		})
	}
	if d := time.Since(killed); d > fleetTTL+time.Second {
		t.Errorf("the killed server's slots came back %v after the kill, TTL %v", d, fleetTTL)
	}
	t.Logf("%d streams of the killed server back %v after the kill (TTL %v)", len(lost), time.Since(killed).Round(time.Millisecond), fleetTTL)

	// Cancel every stream: each handler returns at once and frees its slot;
	// then every tenant's full cap can be taken again, from the store.
	for _, s := range open {
		s.cancel()
	}
	st, _ := redisstore.New(rdb, redisstore.WithPrefix(prefix))
	checker, _ := keycap.NewLimiter(st)
	defer checker.Close()
	testkit.WaitUntil(t, 10*time.Second, "every stream slot free", func() bool {
		for i := range tenants {
			ls, err := checker.Acquire(ctx, keycap.Spec{Name: streamMethod, Max: fleetStreamMax}.For("md:x-tenant:"+key(i)))
			if err != nil {
				return false
			}
			ls2, err := checker.Acquire(ctx, keycap.Spec{Name: streamMethod, Max: fleetStreamMax}.For("md:x-tenant:"+key(i)))
			ls.Release()
			if err != nil {
				return false
			}
			ls2.Release()
		}
		return true
	})
}
