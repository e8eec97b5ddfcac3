package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestConformance runs the store conformance suite on a standalone Redis and
// on a 3-master Redis Cluster. Time advances by shortening key TTLs.
func TestConformance(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		storetest.Run(t, func(t *testing.T) *storetest.Harness {
			prefix := redistest.Prefix(t)
			return &storetest.Harness{
				Store:        New(c),
				Now:          time.Now,
				Advance:      func(t testing.TB, d time.Duration) { advance(t, c, prefix, d) },
				Prefix:       prefix,
				TTLTolerance: time.Second,
			}
		})
	})
}
