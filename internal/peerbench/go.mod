module github.com/keycap/keycap/internal/peerbench

go 1.26.0

require (
	github.com/keycap/keycap v0.0.0-00010101000000-000000000000
	golang.org/x/sync v0.25.0
)

replace github.com/keycap/keycap => ../..
