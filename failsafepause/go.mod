module github.com/keycap/keycap/failsafepause

go 1.26.0

require (
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.61.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/keycap/keycap => ..
