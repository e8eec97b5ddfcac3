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

// A limiter in shadow mode keeps its would-block evaluation (for WouldBlock
// and the metrics) but allows the request: when another limiter blocks it,
// the shadow rule must not show in the violated policies nor stretch
// Retry-After, since a shadow rule never changes what a client sees.
func TestDecisionBlockingIgnoresShadowLimiter(t *testing.T) {
	newLimiter := func(name string, period time.Duration, mode ratelimit.Enforcement) *ratelimit.Limiter {
		t.Helper()
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: ratelimit.NewMemoryStore(), Enforcement: mode,
			Rules: []ratelimit.Rule{{Name: name + "_rule", Characteristics: []string{"ip"}, Limit: 1, Period: period}}})
		if err != nil {
			t.Fatalf("limiter %s: %v", name, err)
		}
		return l
	}
	shadow := newLimiter("shadowed", time.Hour, ratelimit.Shadow)
	enforced := newLimiter("enforced", time.Minute, ratelimit.Enforce)
	id := ratelimit.Identifier{"ip": "192.0.2.1"}
	ctx := t.Context()
	var d *ratelimitheaders.Decision
	for range 2 {
		d = &ratelimitheaders.Decision{Results: []ratelimit.Result{shadow.Check(ctx, id), enforced.Check(ctx, id)}}
	}
	if !d.Results[0].WouldBlock() || d.Results[0].Blocked() || !d.Blocked() {
		t.Fatalf("setup: shadow would block %v, blocks %v; decision blocks %v", d.Results[0].WouldBlock(), d.Results[0].Blocked(), d.Blocked())
	}
	now := time.Now()
	if got := d.ViolatedPolicies(); len(got) != 1 || got[0] != "enforced_rule" {
		t.Errorf("violated policies %q, want only the enforcing limiter's rule", got)
	}
	if got := d.RetryAfter(now); got > time.Minute {
		t.Errorf("RetryAfter %v, want at most the enforcing rule's minute (the shadow rule's hour leaked)", got)
	}
	if p := ratelimitheaders.NewProblem(d, now); len(p.ViolatedPolicies) != 1 {
		t.Errorf("problem names %q, want only the enforcing rule", p.ViolatedPolicies)
	}
}

// RetryAfter is asked on every blocked answer (Profile.Each, so every adapter
// and the Envoy service): it walks the blocking evaluations without building
// Blocking's slice, which cost an allocation per blocked answer.
func TestRetryAfterDoesNotAllocate(t *testing.T) {
	now := time.Now()
	limit := &ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit}
	ev := func(reset time.Duration) ratelimit.Evaluation {
		return ratelimit.Evaluation{Rule: limit, Exceeded: true, Blocked: true,
			Info: ratelimit.Info{Limit: 1, Period: time.Hour, Count: 2, ResetAt: now.Add(reset)}}
	}
	blocked := func(evs ...ratelimit.Evaluation) ratelimit.Result {
		return ratelimit.Result{Action: ratelimit.ActionBlock, Exceeded: true, Evaluations: evs}
	}
	for _, tt := range []struct {
		name string
		d    *ratelimitheaders.Decision
		want time.Duration
	}{
		{"one rule", &ratelimitheaders.Decision{Results: []ratelimit.Result{blocked(ev(30 * time.Second))}}, 30 * time.Second},
		{"latest of two limiters", &ratelimitheaders.Decision{Results: []ratelimit.Result{
			blocked(ev(30 * time.Second)), blocked(ev(time.Minute), ev(10*time.Second))}}, time.Minute},
		{"at least MinRetryAfter", &ratelimitheaders.Decision{Results: []ratelimit.Result{blocked(ev(0))}}, ratelimit.MinRetryAfter},
		{"nothing blocks", &ratelimitheaders.Decision{Results: []ratelimit.Result{{Action: ratelimit.ActionAllow}}}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.RetryAfter(now); got != tt.want {
				t.Errorf("RetryAfter = %v, want %v", got, tt.want)
			}
			if n := testing.AllocsPerRun(100, func() { tt.d.RetryAfter(now) }); n != 0 {
				t.Errorf("RetryAfter allocates %v times, want 0", n)
			}
		})
	}
}
