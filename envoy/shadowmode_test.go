package ratekitenvoy_test

import (
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
)

func TestShadowModeLimiter(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
	if err := l.SetEnforcement(ratelimit.Shadow); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, l, nil, ratekitenvoy.Options{})
	plain := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}}
	for i := 0; i < 7; i++ {
		if resp := g.ask(t, plain); resp.GetOverallCode() != ok {
			t.Fatalf("shadow-mode limiter blocked at %d: %v", i, resp)
		}
	}
	d := desc("remote_address", "10.0.0.2")
	d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}
	g.ask(t, req)
	resp := g.ask(t, req)
	if resp.GetOverallCode() != over || headers(resp)["Retry-After"] == "" {
		t.Fatalf("override in a shadow-mode limiter: %v", resp)
	}
}
