package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	"github.com/ratekit/ratekit/internal/redistest"
)

var _ Client = (*redis.AutoPipeliner)(nil)

// autoPipeliner returns c's blocking autopipeliner, closed with the test.
func autoPipeliner(t testing.TB, c redis.UniversalClient) *redis.AutoPipeliner {
	t.Helper()
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	return ap
}

// TestAutoPipelinerDetected: an autopipeliner counts as one server until a
// check spanning slots is answered CROSSSLOT, which charges nothing; that
// check and every later one are then grouped by slot. It is never
// context-bounded (the Limiter keeps its guard).
func TestAutoPipelinerDetected(t *testing.T) {
	for _, tt := range []struct {
		target
		want sharding
	}{{targets[0], single}, {targets[1], bySlot}} {
		t.Run(tt.name, func(t *testing.T) {
			_, c := tt.store(t)
			s, k := New(autoPipeliner(t, c)), newKeyer(t)
			if s.ContextBounded() {
				t.Error("an autopipeliner reported context-bounded: queued commands ignore their context")
			}
			a, b := k.count("a", 10, 1), k.count(nameInOtherSlot(k, "b", k.key("a")), 10, 1)
			expectOutcomes(t, "spanning slots", eval(t, s, check, a, b), ok(1, time.Minute), ok(1, time.Minute))
			expectOutcomes(t, "again", eval(t, s, check, a, b), ok(2, time.Minute), ok(2, time.Minute))
			if got := s.shardingNow(); got != tt.want {
				t.Errorf("sharding %d, want %d", got, tt.want)
			}
			forced := New(autoPipeliner(t, c), WithClusterMode(false))
			if _, err := forced.Eval(ctx, check, []ratelimit.Op{a, b}); tt.want == bySlot && err == nil {
				t.Error("forced off: a check spanning slots did not fail")
			}
			if got := forced.shardingNow(); got != single {
				t.Errorf("forced off: sharding %d", got)
			}
		})
	}
}

// TestConformanceAutoPipeline runs the store conformance suite through
// go-redis' AutoPipeliner on a standalone Redis and on the 3-master cluster,
// where a check's keys span slots and must be grouped per slot.
func TestConformanceAutoPipeline(t *testing.T) {
	for _, tg := range targets[:2] {
		t.Run(tg.name, func(t *testing.T) {
			_, c := tg.store(t)
			ap := autoPipeliner(t, c)
			storetest.Run(t, func(t *testing.T) *storetest.Harness {
				prefix, clk := redistest.Prefix(t), &shiftedClock{}
				return &storetest.Harness{
					Store:        New(ap),
					Now:          clk.Now,
					Advance:      func(t testing.TB, d time.Duration) { advance(t, nil, c, prefix, d); clk.Add(d) },
					Prefix:       prefix,
					TTLTolerance: time.Second,
				}
			})
		})
	}
}

// TestConcurrentAdmissionAutoPipeline: 64 callers batched together still
// admit exactly the limit, and on the cluster nothing after a block counts.
func TestConcurrentAdmissionAutoPipeline(t *testing.T) {
	for _, tg := range targets[:2] {
		t.Run(tg.name, func(t *testing.T) {
			_, c := tg.store(t)
			concurrentAdmission(t, New(autoPipeliner(t, c)), c)
		})
	}
}
