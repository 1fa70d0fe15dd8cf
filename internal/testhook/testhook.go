// Package testhook reaches what keycap's packages keep for their tests and
// nobody else: no application can import it.
package testhook

import "time"

// MemstoreClock returns a memstore.Option (as any: this package cannot
// import memstore) that replaces the store's clock by now, a monotonic
// duration moved by hand, for leases too. Set by package memstore.
var MemstoreClock func(now func() time.Duration) any
