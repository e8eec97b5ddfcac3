package storetest_test

import (
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// fakeClock is a manual clock shared by the memory store and the limiter.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(_ testing.TB, d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness {
		clk := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
		return &storetest.Harness{
			Store:   ratelimit.MemoryConfig{Now: clk.Now}.New(),
			Now:     clk.Now,
			Advance: clk.Advance,
			Prefix:  "test:",
		}
	})
}
