package testkit

import (
	"maps"
	"sync"
)

// Concurrency counts, per key, the holders inside a critical section (a
// handler, a job body) and the most there ever were at once. Tests use it to
// check a cap from the inside, across every server of the test.
type Concurrency struct {
	mu     sync.Mutex
	inside map[string]int
	peak   map[string]int
}

// NewConcurrency returns an empty counter.
func NewConcurrency() *Concurrency {
	return &Concurrency{inside: map[string]int{}, peak: map[string]int{}}
}

// Enter counts one more holder of key.
func (c *Concurrency) Enter(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inside[key]++
	c.peak[key] = max(c.peak[key], c.inside[key])
}

// Leave counts one holder of key less.
func (c *Concurrency) Leave(key string) {
	c.mu.Lock()
	c.inside[key]--
	c.mu.Unlock()
}

// Peaks returns, per key, the most holders there were at once.
func (c *Concurrency) Peaks() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.peak)
}
