module github.com/keycap/keycap/internal/safety

go 1.26.0

replace github.com/keycap/keycap => ../..

replace github.com/keycap/keycap/redisstore => ../../redisstore

replace github.com/keycap/keycap/pgstore => ../../pgstore

replace github.com/keycap/keycap/internal/testenv => ../testenv

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/jackc/pgx/v5 v5.12.0
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/internal/testenv v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/pgstore v0.0.0-00010101000000-000000000000
	github.com/keycap/keycap/redisstore v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-redis/redis_rate/v10 v10.0.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
