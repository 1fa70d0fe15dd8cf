package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func post(t *testing.T, h http.Handler) int {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/exports", nil)
	r.Header.Set("X-User", "alice")
	h.ServeHTTP(w, r)
	return w.Code
}
