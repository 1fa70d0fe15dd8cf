package keycap

import (
	"context"
	"errors"
	"time"
)

// ErrNoMarks is returned by Since when the Limiter's store keeps no marks
// (it does not implement Marker).
var ErrNoMarks = errors.New("keycap: the store keeps no marks (keycap.Marker)")

// Since returns how long ago the mark (name, id) was set, by the store's
// clock, and sets it now (returning 0) if it is not set: a start time that
// every process sharing the store sees alike. A mark is forgotten ttl after
// it was set. It is one store call, within the decision budget and accounted
// for as the Limiter's own calls are (Call). joblimit and pause use it for
// jobs' deadlines.
func (l *Limiter) Since(ctx context.Context, name, id string, ttl time.Duration) (time.Duration, error) {
	m, ok := l.store.(Marker)
	if !ok {
		return 0, ErrNoMarks
	}
	lim, err := NewLimit("mark:"+name, id, 1)
	if err != nil {
		return 0, err
	}
	lim.family = familyInternal
	lim.pool = PoolIDOf(familyInternal, lim.name, id)
	var age time.Duration
	err = l.Call(ctx, lim, func(ctx context.Context) error {
		var err error
		age, _, err = m.Mark(ctx, lim.pool, ttl)
		return err
	})
	return age, err
}
