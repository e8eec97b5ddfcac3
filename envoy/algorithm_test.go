package ratekitenvoy_test

import (
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	"github.com/ratekit/ratekit/internal/redistest"
)

// A token bucket rule answers Envoy in its own terms: the tokens left of its
// burst as limit_remaining, and once empty the time its next token comes
// (not a window's end) as duration_until_reset and Retry-After.
func TestTokenBucketStatuses(t *testing.T) {
	for _, rc := range redisClients {
		t.Run(rc.name, func(t *testing.T) {
			l := newLimiter(t, redisstore.New(rc.client(t)), redistest.Prefix(t), nil, func(c *ratelimit.Config) {
				for i := range c.Rules {
					if c.Rules[i].Name == "per_user_api" { // 3 per minute: a token every 20s
						c.Rules[i].Algorithm, c.Rules[i].Burst = ratelimit.TokenBucket, 2
					}
				}
			})
			g := startGateway(t, l, nil, ratekitenvoy.Options{})
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("generic_key", "api", "user", "bob")}}
			for n := uint32(1); n <= 2; n++ {
				resp := g.ask(t, req)
				wantStatus(t, resp.GetStatuses()[0], ok, "per_user_api", 3, 2-n)
			}
			resp := g.ask(t, req)
			if resp.GetOverallCode() != over {
				t.Fatalf("3rd request: %v", resp)
			}
			st := resp.GetStatuses()[0]
			wantStatus(t, st, over, "per_user_api", 3, 0)
			if d := st.GetDurationUntilReset().AsDuration(); d > 20*time.Second || d < 19*time.Second {
				t.Errorf("duration_until_reset %v, want the next token's 20s", d)
			}
			if h := headers(resp); h["Retry-After"] != "20" {
				t.Errorf("Retry-After %q, want 20", h["Retry-After"])
			}
		})
	}
}

// A request whose hits_addend alone is over the rule (here over the token
// bucket's burst) can never pass: OVER_LIMIT without Retry-After, which a
// client obeying it would follow forever.
func TestHitsOverTheBurstSayNoRetry(t *testing.T) {
	l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil, func(c *ratelimit.Config) {
		for i := range c.Rules {
			if c.Rules[i].Name == "per_user_api" {
				c.Rules[i].Algorithm, c.Rules[i].Burst = ratelimit.TokenBucket, 2
			}
		}
	})
	g := startGateway(t, l, nil, ratekitenvoy.Options{})
	resp := g.ask(t, &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3,
		Descriptors: []*rlcommonv3.RateLimitDescriptor{desc("generic_key", "api", "user", "bob")}})
	if resp.GetOverallCode() != over {
		t.Fatalf("3 hits on a burst of 2: %v, want OVER_LIMIT", resp)
	}
	h := headers(resp)
	if v, ok := h["Retry-After"]; ok {
		t.Errorf("Retry-After %q: the request can never pass", v)
	}
	if h["Cache-Control"] != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", h["Cache-Control"])
	}
}
