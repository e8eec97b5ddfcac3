package ratekitenvoy_test

import (
	"fmt"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/ratelimittest"
)

// batchDescriptors are five descriptors of one request: two of them the
// same caller (the second sees the first's charge), one matching a shadow
// rule, one with hits_addend 2, one with a limit override.
func batchDescriptors() []*rlcommonv3.RateLimitDescriptor {
	heavy := desc("generic_key", "api", "user", "bob")
	heavy.HitsAddend = wrapperspb.UInt64(2)
	overridden := desc("remote_address", "10.1.0.2")
	overridden.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	return []*rlcommonv3.RateLimitDescriptor{
		desc("remote_address", "10.1.0.1"),
		desc("generic_key", "api", "user", "alice", "remote_address", "10.1.0.1"),
		desc("path", "/a"),
		heavy,
		overridden,
	}
}

// statusText renders a status for comparison, without the time until the
// reset, which sameReset compares.
func statusText(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	cl := st.GetCurrentLimit()
	return fmt.Sprintf("%v limit=%s %d/%v×%d remaining=%d",
		st.GetCode(), cl.GetName(), cl.GetRequestsPerUnit(), cl.GetUnit(), cl.GetUnitMultiplier().GetValue(), st.GetLimitRemaining())
}

// sameReset reports whether two statuses' times until the reset are within
// tolerance of each other (0: equal).
func sameReset(a, b *rlsv3.RateLimitResponse_DescriptorStatus, tolerance time.Duration) bool {
	d := a.GetDurationUntilReset().AsDuration() - b.GetDurationUntilReset().AsDuration()
	return max(d, -d) <= tolerance
}

// compareBatchedWithSingles sends the five descriptors as one request to
// batched and as five requests to singles, round after round until limits
// are exceeded, and fails on the first status that differs.
func compareBatchedWithSingles(t *testing.T, batched, singles *gateway, tolerance time.Duration) {
	t.Helper()
	descs := batchDescriptors()
	sawOver := false
	for round := range 5 {
		resp := batched.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
		if len(resp.GetStatuses()) != len(descs) {
			t.Fatalf("round %d: %d statuses for %d descriptors", round, len(resp.GetStatuses()), len(descs))
		}
		overall := rlsv3.RateLimitResponse_OK
		for i, d := range descs {
			one := singles.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
			alone, in := one.GetStatuses()[0], resp.GetStatuses()[i]
			if got, want := statusText(in), statusText(alone); got != want {
				t.Fatalf("round %d, descriptor #%d:\nin one request: %s\nalone:          %s", round, i, got, want)
			}
			if !sameReset(in, alone, tolerance) {
				t.Fatalf("round %d, descriptor #%d: reset in %v in one request, %v alone", round, i, in.GetDurationUntilReset().AsDuration(), alone.GetDurationUntilReset().AsDuration())
			}
			if one.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				overall, sawOver = one.GetOverallCode(), true
			}
		}
		if resp.GetOverallCode() != overall {
			t.Fatalf("round %d: overall %v, want %v", round, resp.GetOverallCode(), overall)
		}
	}
	if !sawOver {
		t.Fatal("no descriptor went over its limit: the comparison proved less than it should")
	}
}

// A request's descriptors are answered as if each were sent alone, through
// the real gRPC server: on the memory store (on one clock, so even the
// resets agree), on a store that implements ratelimit.BatchStore (one call
// per request), and on real Redis and Redis Cluster.
func TestDescriptorsInOneRequestEqualSingleRequests(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		clock := ratelimittest.NewClock(time.Time{})
		gw := func() *gateway {
			l := newLimiter(t, ratelimit.MemoryConfig{Now: clock.Now}.New(), "", nil, func(c *ratelimit.Config) { c.Now = clock.Now })
			return startGateway(t, l, nil, ratekitenvoy.Options{Now: clock.Now})
		}
		compareBatchedWithSingles(t, gw(), gw(), 0)
	})
	t.Run("batch_store", func(t *testing.T) {
		clock := ratelimittest.NewClock(time.Time{})
		var stores []*ratelimittest.Store
		gw := func() *gateway {
			store := ratelimittest.NewStore(clock)
			stores = append(stores, store)
			l := newLimiter(t, store, "", nil, func(c *ratelimit.Config) { c.Now = clock.Now })
			return startGateway(t, l, nil, ratekitenvoy.Options{Now: clock.Now})
		}
		batched, singles := gw(), gw()
		compareBatchedWithSingles(t, batched, singles, 0)
		// A store that implements ratelimit.BatchStore gets one call per
		// request, whatever its number of descriptors.
		if got, want := stores[0].Calls(), 5; got != want {
			t.Fatalf("%d store calls for 5 requests of 5 descriptors, want %d", got, want)
		}
		if got, want := stores[1].Calls(), 25; got != want {
			t.Fatalf("%d store calls for 25 requests of 1 descriptor, want %d", got, want)
		}
	})
	for _, rc := range redisClients {
		t.Run("redis_"+rc.name, func(t *testing.T) {
			client := rc.client(t)
			gw := func() *gateway {
				return startGateway(t, newLimiter(t, redisstore.New(client), redistest.Prefix(t), nil), nil, ratekitenvoy.Options{})
			}
			compareBatchedWithSingles(t, gw(), gw(), 2*time.Second)
		})
	}
}

// With Options.Concurrent each descriptor is answered from its own check:
// descriptors of distinct counters, each with its own hits_addend, get what
// each gets alone, round after round.
func TestConcurrentChecksAnswerTheirDescriptor(t *testing.T) {
	clock := ratelimittest.NewClock(time.Time{})
	gw := func(concurrent bool) *gateway {
		l := newLimiter(t, ratelimit.MemoryConfig{Now: clock.Now}.New(), "", nil, func(c *ratelimit.Config) { c.Now = clock.Now })
		return startGateway(t, l, nil, ratekitenvoy.Options{Now: clock.Now, Concurrent: concurrent})
	}
	concurrent, singles := gw(true), gw(false)
	var descs []*rlcommonv3.RateLimitDescriptor
	for i := range 4 {
		d := desc("remote_address", fmt.Sprint("10.2.0.", i))
		d.HitsAddend = wrapperspb.UInt64(uint64(i + 1))
		descs = append(descs, d)
	}
	for round := range 3 {
		resp := concurrent.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
		if len(resp.GetStatuses()) != len(descs) {
			t.Fatalf("round %d: %d statuses for %d descriptors", round, len(resp.GetStatuses()), len(descs))
		}
		for i, d := range descs {
			alone := singles.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}).GetStatuses()[0]
			in := resp.GetStatuses()[i]
			if got, want := statusText(in), statusText(alone); got != want || !sameReset(in, alone, 0) {
				t.Fatalf("round %d, descriptor #%d:\nconcurrent: %s\nalone:      %s", round, i, got, want)
			}
		}
	}
}
