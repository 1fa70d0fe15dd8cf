// Package grpclimit caps the gRPC calls in flight per user, tenant or key,
// and pauses a client's calls to a throttled service everywhere: grpc-go
// interceptors on keycap's leased slots and shared pauses.
//
// On the server, the rules are rpclimit's; the interceptors apply them:
//
//	limits, _ := rpclimit.New(limiter)
//	limits.Set("/export.v1.ExportService/*", rpclimit.Max(2).ByMetadata("x-tenant"))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(limits)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(limits)),
//	)
//
// Each tenant now has at most 2 calls of the export service in flight,
// across every server sharing the limiter's store. The third is refused at
// once with RESOURCE_EXHAUSTED, a google.rpc.RetryInfo detail and the
// grpc-retry-pushback-ms trailer (1 s unless the limit sets another), so that
// a grpc-go client whose retry policy retries RESOURCE_EXHAUSTED waits that
// long before it tries again. A store failure lets the call run (fail open)
// or refuses it with UNAVAILABLE (fail closed), per limit; a call without
// its key's metadata follows the limit's rpclimit.Missing, never INTERNAL.
// A stream holds its slot for its whole life.
//
// On the client, UnaryClientInterceptor and StreamClientInterceptor obey a
// server's throttling for every caller on every server: a RESOURCE_EXHAUSTED
// with a delay pauses the service in the store (package pause), and calls
// during the pause fail fast, unsent.
package grpclimit
