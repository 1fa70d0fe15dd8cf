module github.com/keycap/keycap/grpclimit

go 1.26.0

require (
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/redisstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/time v0.16.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)

replace github.com/keycap/keycap => ..

replace github.com/keycap/keycap/redisstore => ../redisstore

replace github.com/keycap/keycap/internal/testenv => ../internal/testenv
