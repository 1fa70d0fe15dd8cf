package store

import "time"

// PageQuery asks a store for one page of an inspection.
type PageQuery struct {
	Tag    Tag
	Cursor string // "" for the first page, then the previous page's Next
	Limit  int    // at most this many entries (the store may return fewer); 0: DefaultPage
}

// DefaultPage is the size of a page when a PageQuery gives none.
const DefaultPage = 100

// PageSize returns q.Limit, or DefaultPage when it is not positive.
func (q PageQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultPage
	}
	return q.Limit
}

// PoolPage is one page of pools.
type PoolPage struct {
	Pools []PoolState
	Next  string // the cursor of the next page; "" when this one is the last
}

// PoolState is what a store holds for one pool.
type PoolState struct {
	Pool    PoolID
	Holders []Holder // the unexpired leases, slots handed to tickets included
	Waiting []Waiter // the line, its head first
}

// Held returns the slots the pool's holders take.
func (p PoolState) Held() int {
	n := 0
	for _, h := range p.Holders {
		n += max(h.Weight, 1)
	}
	return n
}

// Holder is one lease in a pool.
type Holder struct {
	Owner   Owner
	Weight  int           // slots the lease takes: 1 for a plain lease
	Expires time.Duration // time left before it expires, by the store's clock
}

// Waiter is one ticket in a pool's wait line.
type Waiter struct {
	Owner   Owner
	Expires time.Duration // time left before the ticket expires
}

// PausePage is one page of pauses and paces.
type PausePage struct {
	Pauses []PauseState
	Next   string
}

// PauseState is one running pause, or one pace ahead of its rate.
type PauseState struct {
	ID   PoolID
	Pace bool          // a pace (Pace) rather than a pause (Pause)
	Left time.Duration // a pause: time left; a pace: time until its next event may go
}
