package testenv

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Semaphore is the counting semaphore of asynq's x/rate package, the one
// asynq offers for a cap across servers, as the peer keycap's plain
// decisions are measured against: its acquire is one script of three
// commands (drop the members past their deadline, count, add the owner
// with its deadline, in Unix seconds of the client's clock), its release a
// ZREM. The package itself cannot be built with asynq 0.26 (its one
// release needs go-redis v8), so the benchmarks run its commands as it
// runs them.
type Semaphore struct {
	C   redis.UniversalClient
	Key string
	Max int
}

var semaphoreAcquire = redis.NewScript(`redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - 1)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  return 'true'
end
return 'false'`)

// Acquire takes a token for id until deadline, and reports whether it did.
func (s Semaphore) Acquire(ctx context.Context, id string, deadline time.Time) (bool, error) {
	return semaphoreAcquire.Run(ctx, s.C, []string{s.Key}, s.Max, time.Now().Unix(), deadline.Unix(), id).Bool()
}

// Release gives id's token back.
func (s Semaphore) Release(ctx context.Context, id string) error {
	return s.C.ZRem(ctx, s.Key, id).Err()
}
