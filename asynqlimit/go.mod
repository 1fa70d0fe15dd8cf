module github.com/keycap/keycap/asynqlimit

go 1.26.0

require (
	github.com/hibiken/asynq v0.26.0
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/redisstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/rogpeppe/go-internal v1.12.0 // indirect
	github.com/spf13/cast v1.10.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.15.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/keycap/keycap => ..

replace github.com/keycap/keycap/redisstore => ../redisstore

replace github.com/keycap/keycap/internal/testenv => ../internal/testenv
