// Package sizing measures what a keycap gateway needs, for the sizing table
// of docs/operations.md ("Deploy on Kubernetes"): CPU and memory per 1,000
// requests/s, and memory and idle CPU per WebSocket connection and per idle
// keep-alive HTTP connection.
//
// It is a benchmark, BenchmarkSizing, with no code outside its tests. It
// builds the gateway (cmd/keycap of this checkout's working tree, as a
// release builds it, for the host) and runs it as a process of its own, on a
// configuration it writes; the load generator, the upstreams (an HTTP one
// and a Pusher-protocol one, internal/pusherserver) and the clients run in
// the benchmark's process. It reads the gateway's CPU time and memory from
// Linux's /proc/PID/stat and /proc/PID/status: the gateway's own figures,
// not the load generator's. Run it from the repository's root:
//
//	go test ./deploy/sizing -run '^$' -bench Sizing -benchtime 1x -timeout 20m
//
// It takes about four minutes on 2 cores. The Redis sub-benchmarks start a
// redis-server of their own (testenv.StartRedis: the binary must be on PATH;
// without it they are skipped, or fail with KEYCAP_REQUIRE_SERVICES=1). It
// runs on Linux only. See BenchmarkSizing for what each sub-benchmark
// reports.
package sizing
