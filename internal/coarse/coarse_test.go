package coarse

import (
	"testing"
	"time"

	"github.com/keycap/keycap/internal/testkit"
)

// TestNeverAheadAndAtMostATickBehind reads the clock beside the precise one
// for a while: it must never run ahead, and, on an unloaded machine, lag by
// little more than a tick (the bound allows for a busy scheduler).
func TestNeverAheadAndAtMostATickBehind(t *testing.T) {
	end := time.Now().Add(200 * time.Millisecond)
	var last, worst time.Duration
	for time.Now().Before(end) {
		c := Now()
		p := Precise()
		if c > p {
			t.Fatalf("coarse %v ahead of precise %v", c, p)
		}
		if c < last {
			t.Fatalf("coarse went back: %v after %v", c, last)
		}
		last = c
		worst = max(worst, p-c)
	}
	if worst > 50*Tick {
		t.Errorf("coarse lagged %v behind the precise clock (tick %v)", worst, Tick)
	}
	t.Logf("worst lag %v", worst)
}

// TestStopsWhenUnread checks that the ticker ends once the clock is not read
// for Idle, and that the next reading, restarting it, is fresh.
func TestStopsWhenUnread(t *testing.T) {
	Now()
	testkit.WaitUntil(t, 5*time.Second, "the ticker to stop unread", func() bool { mu.Lock(); defer mu.Unlock(); return !running })
	before := Precise()
	if c := Now(); c < before {
		t.Fatalf("first reading after a restart %v older than %v", c, before)
	}
	mu.Lock()
	restarted := running
	mu.Unlock()
	if !restarted {
		t.Fatal("a reading did not restart the ticker")
	}
}

func BenchmarkNow(b *testing.B) {
	var sink time.Duration
	for b.Loop() {
		sink += Now()
	}
	_ = sink
}

func BenchmarkPrecise(b *testing.B) {
	var sink time.Duration
	for b.Loop() {
		sink += Precise()
	}
	_ = sink
}
