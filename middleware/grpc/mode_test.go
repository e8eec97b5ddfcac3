package ratelimitgrpc

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// TestShadowMode: a limiter in shadow mode (a rollout beside a legacy check)
// lets every call through on a real gRPC server with no ratelimit metadata,
// counting as it goes; switched to enforce, the next call is
// ResourceExhausted.
func TestShadowMode(t *testing.T) {
	l := redisLimiter(t, "grpc_request", []ratelimit.Rule{rule("per_ip", 2, time.Minute, ratelimit.ActionLimit, identifiers.IP)},
		func(c *ratelimit.Config) { c.Enforcement = ratelimit.Shadow })
	env := start(t, unary(l))
	for range 4 {
		r := env.check(t)
		wantCode(t, r, codes.OK)
		wantRateMD(t, r.header, -1, 0, 0)
	}
	if err := l.SetEnforcement(ratelimit.Enforce); err != nil {
		t.Fatal(err)
	}
	wantCode(t, env.check(t), codes.ResourceExhausted)
}
