package otelobserver

// SetMaxCached lowers the number of attribute sets o keeps.
func SetMaxCached(o *Observer, n int64) { o.maxCached = n }

// Cached returns the number of attribute sets o keeps.
func Cached(o *Observer) int64 { return o.cached.Load() }
