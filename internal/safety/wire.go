package safety

import (
	"time"

	"github.com/keycap/keycap/store"
)

// The wire between a Process and its holder program: one JSON object a
// line each way, requests on the holder's stdin and replies, in any order,
// on its stdout.

// Request is one store call for a holder program.
type Request struct {
	ID       uint64
	Call     string // "acquire", "release" or "renew"
	Pool     store.PoolID
	Owner    store.Owner
	Demand   store.Demand
	Leave    bool
	Batch    []Renewal
	Deadline time.Time // the holder gives up on the call then
}

// Reply is a holder program's answer to the request of its ID.
type Reply struct {
	ID    uint64
	Grant store.Grant
	Kept  bool
	Batch []Renewal
	Err   string // the call's error; "" when none
}

// Renewal is a store.Renewal on the wire: its error as text.
type Renewal struct {
	Pool   store.PoolID
	Owner  store.Owner
	TTL    time.Duration
	Weight int
	Parent store.PoolID
	Lost   bool
	Err    string
}
