package ratelimitheaders_test

import (
	"errors"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Hand-made results: a result that failed open never blocks and contributes
// no evaluation, whatever else it carries.
func TestDecisionIgnoresFailedResults(t *testing.T) {
	limit := &ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit}
	ev := ratelimit.Evaluation{Rule: limit, Exceeded: true, Blocked: true,
		Info: ratelimit.Info{Limit: 1, Period: time.Minute, Count: 2, ResetAt: time.Now().Add(time.Minute)}}
	failed := ratelimit.Result{Limiter: "down", Action: ratelimit.ActionBlock, Err: errors.New("down"),
		Evaluations: []ratelimit.Evaluation{ev}}
	d := &ratelimitheaders.Decision{Results: []ratelimit.Result{failed}}
	if d.Blocked() || d.BlockedBy() != nil || d.Enforcing() != nil || d.Blocking() != nil || d.RetryAfter(time.Now()) != 0 {
		t.Errorf("a failed result counted: blocked %v, enforcing %v, blocking %v", d.Blocked(), d.Enforcing(), d.Blocking())
	}
	if !d.Failed() {
		t.Error("Failed = false")
	}
	ok := ratelimit.Result{Limiter: "up", Action: ratelimit.ActionBlock, Evaluations: []ratelimit.Evaluation{ev}}
	d.Results = append(d.Results, ok)
	if by := d.BlockedBy(); by == nil || by.Limiter != "up" || d.Enforcing() != &d.Results[1].Evaluations[0] {
		t.Errorf("blocked by %+v, want up", by)
	}
}
