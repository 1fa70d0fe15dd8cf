module github.com/keycap/keycap/internal/peerbench

go 1.26.0

require (
	github.com/bsm/redislock v0.9.4
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/redisstore v0.0.0-00010101000000-000000000000
	golang.org/x/sync v0.25.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/keycap/keycap => ../..

replace github.com/keycap/keycap/redisstore => ../../redisstore

replace github.com/keycap/keycap/internal/testenv => ../testenv
