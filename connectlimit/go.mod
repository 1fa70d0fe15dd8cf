module github.com/keycap/keycap/connectlimit

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/protobuf v1.36.12
)

replace github.com/keycap/keycap => ..
