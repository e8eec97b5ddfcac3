package ratekitenvoy_test

import (
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	ratelimit "github.com/ratekit/ratekit/core"
	ratekitenvoy "github.com/ratekit/ratekit/envoy"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Options.Headers picks the header profile, as in the HTTP adapters; every
// profile sends Retry-After on OVER_LIMIT.
func TestHeaderProfiles(t *testing.T) {
	for _, c := range []struct {
		profile  ratelimitheaders.Profile
		allowed  []string
		overOnly []string
	}{
		{ratelimitheaders.IETF, []string{"RateLimit-Policy", "RateLimit"}, []string{"Retry-After", "Cache-Control"}},
		{ratelimitheaders.Legacy, []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}, []string{"Retry-After"}},
		{ratelimitheaders.GitLab, []string{"RateLimit-Name", "RateLimit-Limit", "RateLimit-Observed", "RateLimit-Remaining", "RateLimit-Reset"}, []string{"RateLimit-ResetTime", "Retry-After"}},
		{ratelimitheaders.None, nil, []string{"Retry-After"}},
	} {
		t.Run(c.profile.String(), func(t *testing.T) {
			l := newLimiter(t, ratelimit.NewMemoryStore(), "", nil)
			g := startGateway(t, l, nil, ratekitenvoy.Options{Headers: c.profile})
			d := desc("user", "u1")
			d.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
			req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}
			first, second := headers(g.ask(t, req)), headers(g.ask(t, req))
			if len(first) != len(c.allowed) {
				t.Errorf("allowed: %v, want %v", first, c.allowed)
			}
			for _, h := range c.allowed {
				if first[h] == "" || second[h] == "" {
					t.Errorf("%s missing: allowed %v, over %v", h, first, second)
				}
			}
			for _, h := range c.overOnly {
				if first[h] != "" || second[h] == "" {
					t.Errorf("%s: allowed %v, over %v", h, first, second)
				}
			}
		})
	}
}
