package redisstore

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestConformance runs the store conformance suite on every target: go-redis
// clients of a standalone Redis, a 3-master Redis Cluster and a Ring, and
// stores from Dial on the standalone server, the cluster and a Sentinel
// setup. Time advances by shortening key TTLs.
func TestConformance(t *testing.T) {
	forEachTarget(t, func(t *testing.T, s *Store, c redis.UniversalClient) {
		storetest.Run(t, func(t *testing.T) *storetest.Harness {
			prefix, clk := redistest.Prefix(t), &shiftedClock{}
			return &storetest.Harness{
				Store:        s,
				Now:          clk.Now,
				Advance:      func(t testing.TB, d time.Duration) { advance(t, s, c, prefix, d); clk.Add(d) },
				Prefix:       prefix,
				TTLTolerance: time.Second,
			}
		})
	})
}

// shiftedClock is the limiter's clock in the conformance harness: real time
// plus every Advance, so that it agrees with the store's notion of time after
// the harness shortened the TTLs (the limiter's blocked cache expires by it).
type shiftedClock struct{ off atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *shiftedClock) Add(d time.Duration) { c.off.Add(int64(d)) }
