package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/keycap/keycap"
	"github.com/keycap/keycap/httplimit"
	"github.com/keycap/keycap/memstore"
)

// ledger is a downstream system that a holder writes to: it keeps the
// highest fencing token it has seen and refuses a write with a lower one,
// that of a holder whose lease was lost while a newer holder wrote.
type ledger struct {
	mu      sync.Mutex
	highest uint64
	entries []string
}

func (l *ledger) write(token uint64, entry string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token < l.highest {
		return fmt.Errorf("token %d is stale: %d has written since", token, l.highest)
	}
	l.highest = token
	l.entries = append(l.entries, entry)
	return nil
}

// A request carries its slot's fencing token in its context
// (keycap.FencesFrom), and writes with it.
func Example_fencing() {
	limiter, _ := keycap.NewLimiter(memstore.New())
	defer limiter.Close()
	limits, _ := httplimit.New(limiter)
	_ = limits.For("settle", func(r *http.Request) httplimit.Rule {
		// One settlement per account at a time, fenced.
		return httplimit.Limit(keycap.Spec{Max: 1, Fence: true}).By("account:" + r.PathValue("id"))
	})
	books := &ledger{}
	var tokens []uint64
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/settle", limits.Must("settle")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := keycap.FencesFrom(r.Context())[0]
		tokens = append(tokens, f.Token)
		if err := books.write(f.Token, "settled"); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		fmt.Fprintln(w, "settled")
	})))

	for range 2 {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/accounts/7/settle", nil))
		fmt.Print(w.Code, " ", w.Body)
	}
	// A holder that paused past its lease and comes back with the first
	// token is refused downstream.
	fmt.Println(tokens[1] > tokens[0], books.write(tokens[0], "late"))
	// Output:
	// 200 settled
	// 200 settled
	// true token 1 is stale: 2 has written since
}
