// Package safety checks keycap's stores against a model of the leased
// semaphore: clients drive random acquires, renewals and releases (with
// weights, parents, lines and fencing tokens) through real stores, record every
// call and its outcome (unknown when the call failed), and the recorded
// history is checked with porcupine, a linearizability checker, against
// the sequential model in model.go: never over a key's max or a parent's
// total, a renewal ok only for a live lease, a lease expiring only once
// its TTL can have passed, fencing tokens growing in every pool, a line
// served in order, and a parent's keys served, granted and kept their
// slots in the fair share's first order (the fewest slots held for the
// key's share first).
//
// Faults are real: faultproxy sits between the clients and Redis or
// PostgreSQL and adds latency, resets connections and partitions them;
// holders pause past their TTL. Each run is seeded and reproducible by its
// seed. docs/safety.md records the runs.
package safety
