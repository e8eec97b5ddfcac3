package ratekitenvoy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/ratelimittest"
)

// idLog records the identifiers a limiter's checks see, as their limiter's
// observer is told them.
type idLog struct {
	mu  sync.Mutex
	ids []string
}

func (g *idLog) observe(_ context.Context, e ratelimit.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ids = append(g.ids, fmt.Sprint(map[string]any(e.Identifier))) // fmt sorts a map's keys
}

// With Options.ReuseIdentifiers a request's checks see exactly its
// descriptors' entries, never a property an earlier request (a malformed one
// too) left in a reused identifier, and every answer is the one a service
// that makes a new identifier per check gives, through the real gRPC
// server, on the memory store, a store that implements ratelimit.BatchStore,
// and real Redis and Redis Cluster.
func TestReuseIdentifiersAnswersUnchanged(t *testing.T) {
	type deployment struct {
		name      string
		store     func(t *testing.T, clock *ratelimittest.Clock) (ratelimit.Store, string)
		tolerance time.Duration
	}
	deployments := []deployment{
		{"memory", func(_ *testing.T, clock *ratelimittest.Clock) (ratelimit.Store, string) {
			return ratelimit.MemoryConfig{Now: clock.Now}.New(), ""
		}, 0},
		{"batch_store", func(_ *testing.T, clock *ratelimittest.Clock) (ratelimit.Store, string) {
			return ratelimittest.NewStore(clock), ""
		}, 0},
	}
	for _, rc := range redisClients {
		deployments = append(deployments, deployment{"redis_" + rc.name, func(t *testing.T, _ *ratelimittest.Clock) (ratelimit.Store, string) {
			return redisstore.New(rc.client(t)), redistest.Prefix(t)
		}, 2 * time.Second})
	}
	requests := [][]*rlcommonv3.RateLimitDescriptor{
		{desc("generic_key", "api", "user", "alice", "remote_address", "10.3.0.1", "path", "/a")},
		{desc("remote_address", "10.3.0.1")}, // the reused map held four properties
		batchDescriptors(),
		// Malformed after its first descriptor was parsed: nothing is
		// checked, and the identifiers it filled go back empty.
		{desc("path", "/b", "user", "bob"), desc("remote_address", "10.3.0.2", "remote_address", "10.3.0.3")},
		{desc("user", "carol"), desc("path", "/b")},
		{desc("generic_key", "api", "user", "bob")},
	}
	for _, dep := range deployments {
		t.Run(dep.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(time.Time{})
			gw := func(reuse bool) (*gateway, *idLog) {
				store, prefix := dep.store(t, clock)
				log := &idLog{}
				l := newLimiter(t, store, prefix, nil, func(c *ratelimit.Config) {
					c.Observer = log.observe
					if dep.tolerance == 0 {
						c.Now = clock.Now
					}
				})
				opts := ratekitenvoy.Options{ReuseIdentifiers: reuse}
				if dep.tolerance == 0 {
					opts.Now = clock.Now
				}
				return startGateway(t, l, nil, opts), log
			}
			reusing, reused := gw(true)
			fresh, made := gw(false)
			sawOver := false
			for round := range 4 {
				for i, descs := range requests {
					req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					got, gotErr := reusing.client.ShouldRateLimit(ctx, req)
					want, wantErr := fresh.client.ShouldRateLimit(ctx, req)
					cancel()
					if status.Code(gotErr) != status.Code(wantErr) {
						t.Fatalf("round %d, request #%d: error %v, want %v", round, i, gotErr, wantErr)
					}
					if got.GetOverallCode() != want.GetOverallCode() || len(got.GetStatuses()) != len(want.GetStatuses()) {
						t.Fatalf("round %d, request #%d: answer\n%v\nwant\n%v", round, i, got, want)
					}
					sawOver = sawOver || got.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
					for j, st := range got.GetStatuses() {
						w := want.GetStatuses()[j]
						if statusText(st) != statusText(w) || !sameReset(st, w, dep.tolerance) {
							t.Fatalf("round %d, request #%d, descriptor #%d: %s, want %s", round, i, j, statusText(st), statusText(w))
						}
					}
				}
			}
			if !sawOver {
				t.Fatal("no request went over its limit: the comparison proved less than it should")
			}
			if len(reused.ids) == 0 || fmt.Sprint(reused.ids) != fmt.Sprint(made.ids) {
				t.Fatalf("the checks saw the identifiers\n%v\nwant\n%v", reused.ids, made.ids)
			}
		})
	}
}
