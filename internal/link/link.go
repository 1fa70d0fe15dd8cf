// Package link hands package frontdoor the calls of a *keycap.Limiter that
// package keycap does not export. Go has no friend packages, and frontdoor
// imports keycap, so keycap sets Door in its init: it returns a value of an
// unexported type of keycap's whose exported methods frontdoor's interface
// names. Nothing outside keycap's tree can import this package.
package link

// Door returns the front-door calls of l, a *keycap.Limiter. Set by package
// keycap.
var Door func(l any) any
