package ratelimittest_test

import (
	"testing"
	"time"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/ratelimittest"
)

// TestConformance: the test store answers as the memory store it wraps, so
// a test of an application written against it holds on the real stores; it
// passes the store conformance suite and every scenario of conformance/.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Harness {
		s := ratelimittest.NewStore(nil)
		return &storetest.Harness{
			Store:   s,
			Now:     s.Clock().Now,
			Advance: func(_ testing.TB, d time.Duration) { s.Clock().Advance(d) },
			Prefix:  "test:",
		}
	})
}
