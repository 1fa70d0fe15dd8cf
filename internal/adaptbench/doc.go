// Package adaptbench measures admission strategies against a backend of
// known capacity (issue 30, adaptive totals): a fixed keycap total at the
// right and at a wrong guess, per-process adaptive limiters, and no limit,
// one after another on the same schedule, the same seeds and the same
// backend. It is a module of its own so that the peers' code never reaches
// keycap's core module.
//
// # Run it
//
//	eval "$(scripts/services.sh up)"   # or any Redis in KEYCAP_REDIS_ADDR
//	go run ./internal/adaptbench/cmd/adaptbench -store redis -out /tmp/adaptive.md -png /tmp/adaptive.png
//
// A run takes about 33 s per strategy, about 3.5 minutes for the six built-in
// ones. -scale 0.25 shortens the phases to 2 s; -rounds 3 repeats the
// strategies, each round rotating their order, and pools the rounds;
// -strategies picks and orders them.
//
// # The backend
//
// One Backend in the coordinating process, served over HTTP on loopback to
// every worker: a processor-sharing server of true capacity C. With n jobs in
// service each progresses at rate min(1, C/n), computed exactly in virtual
// time (a job leaves when the service it has received reaches its own), so a
// job of base service time S takes S while n ≤ C and n/C × S when all n stay.
// Base service times are uniform in S ± 25 %. With 3C jobs in service, a new
// job is answered 503 at once. C changes at run time and the jobs in service
// slow down at once. By default C0 = 20 and S = 40 ms: C0/S = 500 jobs/s.
//
// # The load
//
// Three worker processes (this binary, re-executed) each send a third of an
// open-loop Poisson arrival rate, in multiples of C0/S, through their
// strategy to the backend. The schedule (Schedule), 8 s per phase at scale 1:
//
//	0.5×      C = C0     below capacity
//	4×        C = C0     4× the throughput the backend has
//	4×        C = C0/2   the backend loses half its capacity: 8× its throughput
//	1×        C = C0/2   the load falls back: 2× the halved throughput
//
// Twenty tenants: t00 floods with half the arrivals, t01–t19 share the other
// half equally. In the two 4× phases every tenant offers more than its fair
// twentieth of the capacity (a light tenant ~2.1× and ~4.2× of it), so they are
// the backlogged phases where fairness is measured.
//
// Every strategy gets the same wait for admission, S (40 ms): a request not
// admitted within it is refused. A backend call times out after 1 s (an
// error). A request is good if it was admitted and the backend answered 200
// within the SLO of 2.5 × S (100 ms) from its arrival — its wait included.
// Without a limit the backend holds up to 3C jobs, each taking ~3S (120 ms):
// past the SLO.
//
// # The strategies
//
//   - none: no limit.
//   - keycap-fixed-C, keycap-fixed-2C: a keycap parent of C0 (or 2C0) slots
//     on Redis, shared by the three processes, with a pool per tenant of Max
//     the parent's total; waiters are served by fair share. Failing closed.
//   - failsafe-adaptive: failsafe-go's adaptivelimiter in each process, on
//     its defaults (1..200, starting at 20); overloads drop the permit.
//   - gradient2: go-concurrency-limits' Gradient2 in each process (defaults
//     but a minimum of 1) behind its DefaultLimiter and a BlockingLimiter.
//   - keycap-adaptive: a keycap adaptive parent (keycap.WithAdaptive) on
//     Redis, one total agreed by the three processes, starting at 2C0 (the
//     bad guess), between 1 and 4C0, interval 250 ms, tolerance 1.1; a
//     tenant's pool under it as for the fixed parents, and the backend's
//     503 or a call not answered in time reported as an overload.
//
// A strategy is a file: a type implementing Strategy, registered in init
// (Register); it runs after the built-in ones (DefaultOrder). Env gives it the
// shared keycap store, the initial capacity, the wait and a run id to name its
// parent after.
//
// # The measures
//
// Per strategy, over the whole schedule and per phase:
//
//   - goodput: good completions per second (by completion time) divided by
//     C/S, the throughput of the capacity in force then (1 is the most the
//     backend can do);
//   - p50, p99: latency, from arrival to the answer, of admitted requests the
//     backend served (200), by arrival time; per phase also the p99 of those
//     that arrived 2 s (the settle budget) or more after the phase began;
//   - errors: the share of offered requests admitted and then answered 503
//     (or not in time); refused: the share not admitted (failed: admissions
//     that failed on the store, counted as refused);
//   - settle: for each step (each phase's start but the first), the time
//     from the step to the start of the first rolling window after which the
//     rolling goodput and p99 stay in band for a second: 250 ms windows every
//     50 ms, goodput within ±15 % (at least ±0.1) of its steady value — the
//     last quarter of the phase — and p99 at most max(SLO, 1.25 × its steady
//     value). "–": not within the phase;
//   - Jain, 19 light: Jain's index of the light tenants' good completions in
//     the backlogged phases; flood share: t00's share of all good
//     completions then (fair would be 5 %);
//   - peak in-flight: the most jobs in service at the backend at once;
//   - total limit: every 100 ms each worker reports its strategy's limit; the
//     total is the sum over processes of per-process limits, or the shared
//     total of a keycap parent.
//
// The report is a markdown table with a row per strategy and one with a row
// per strategy and phase; the plot shows each strategy's total limit beside
// C(t), and its rolling goodput.
package adaptbench
