module github.com/keycap/keycap

go 1.26.0
