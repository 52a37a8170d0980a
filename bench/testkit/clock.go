package testkit

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand (Advance), to inject where code takes a func() time.Time. Its
// zero value reads 2025-01-01 00:00 UTC. Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.Now() // the zero value's start
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
