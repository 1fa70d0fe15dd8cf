module github.com/keycap/keycap/retryablepause

go 1.26.0

require (
	github.com/hashicorp/go-retryablehttp v0.7.8
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
)

require (
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/keycap/keycap => ..
