package ratekitenvoy_test

import (
	"context"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
)

// Envoy's deadline (the filter's timeout, 20ms by default) reaches the
// checks: a call whose deadline passes while Redis is silent ends then, not
// at the limiter's timeout, and is answered DEADLINE_EXCEEDED and counted as
// canceled. It is neither an OK answer (Envoy never saw one: it failed the
// call at its deadline) nor a store failure.
func TestDeadlinePassedIsNoAnswer(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: blackHole(t), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	l := newLimiter(t, redisstore.New(client), redistest.Prefix(t), nil, func(c *ratelimit.Config) {
		c.Timeout = time.Minute                           // the caller's deadline comes first
		c.Breaker = ratelimit.BreakerConfig{Failures: -1} // every call reaches the silent store
	})
	g := startGateway(t, l, nil, ratekitenvoy.Options{})
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.8"), desc("generic_key", "api", "user", "u8")}}

	// Through gRPC: the client gives up at its deadline, the server's call
	// ends with it. A first call (malformed: it touches no store) sets up
	// the connection, so that the second reaches the server before its
	// deadline even on a loaded machine.
	if _, err := g.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("warm-up call: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := g.client.ShouldRateLimit(ctx, req)
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("client: %v, want DEADLINE_EXCEEDED", err)
	}
	canceled := map[string]string{"domain": "edge", "code": "canceled"}
	for deadline := time.Now().Add(15 * time.Second); counter(t, g.reg, "ratekit_envoy_requests_total", canceled) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the call past its deadline was not counted as canceled (ok: %v)",
				counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": "ok"}))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// In process, with a deadline already past: the answer says so.
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	resp, err := g.svc.ShouldRateLimit(past, req)
	if status.Code(err) != codes.DeadlineExceeded || resp != nil {
		t.Fatalf("deadline past: %v, %v, want DEADLINE_EXCEEDED", resp, err)
	}
	for code, want := range map[string]float64{"canceled": 2, "ok": 0, "over_limit": 0} {
		if got := counter(t, g.reg, "ratekit_envoy_requests_total", map[string]string{"domain": "edge", "code": code}); got != want {
			t.Errorf("requests counted %s: %v, want %v", code, got, want)
		}
	}
	if got := counter(t, g.reg, "ratekit_envoy_fail_open_descriptors_total", map[string]string{"domain": "edge"}); got != 0 {
		t.Errorf("a caller's deadline counted as %v descriptors failed open", got)
	}
}
