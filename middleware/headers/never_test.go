package ratelimitheaders

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// A check whose cost is over its rule's limit (a token bucket's burst) can
// never pass: no wait helps, so the answer tells no Retry-After (a client
// obeying one would retry forever) and the problem body says it never
// passes; a check that only has to wait keeps its Retry-After.
func TestCheckThatNeverPassesSaysNoRetry(t *testing.T) {
	tests := []struct {
		name  string
		rule  ratelimit.Rule
		cost  float64
		never bool
	}{
		{"fixed window, cost over the limit", ratelimit.Rule{Limit: 3}, 4, true},
		{"sliding window, cost over the limit", ratelimit.Rule{Limit: 3, Algorithm: ratelimit.SlidingWindow}, 4, true},
		{"token bucket, cost over the burst", ratelimit.Rule{Limit: 10, Burst: 3, Algorithm: ratelimit.TokenBucket}, 4, true},
		{"fixed window, cost at the limit", ratelimit.Rule{Limit: 3}, 3, false},
		{"token bucket, cost at the burst", ratelimit.Rule{Limit: 10, Burst: 3, Algorithm: ratelimit.TokenBucket}, 3, false},
		// Switches an operator turns back (an incident rule): a client told
		// not to retry, or an asynq task archived, would not come back.
		{"a LimitFunc's limit", ratelimit.Rule{LimitFunc: func(context.Context) (int64, error) { return 3, nil }}, 4, false},
		{"a LimitFunc's 0", ratelimit.Rule{LimitFunc: func(context.Context) (int64, error) { return 0, nil }}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rule
			r.Name, r.Action, r.Period, r.Match = "per_ip", ratelimit.ActionLimit, time.Minute, map[string]ratelimit.Matcher{}
			clock := now
			l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(),
				Rules: []ratelimit.Rule{r}, Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatalf("new limiter: %v", err)
			}
			// The first check fills the rule when it can pass, so the second
			// blocks either way.
			var res ratelimit.Result
			for range 2 {
				res = l.Check(context.Background(), ratelimit.Identifier{"ip": "192.0.2.1"}, ratelimit.Cost(tt.cost))
			}
			if !res.Blocked() {
				t.Fatalf("second check of cost %v allowed, want blocked", tt.cost)
			}
			if got := res.Info.Never; got != tt.never {
				t.Errorf("Info.Never = %v, want %v", got, tt.never)
			}
			d := &Decision{Results: []ratelimit.Result{res}}
			h := http.Header{}
			IETF.SetHeaders(h, d, clock, 5*time.Second)
			retry, sent := h[HeaderRetryAfter]
			if sent == tt.never {
				t.Errorf("Retry-After %q (sent: %v), want sent: %v", retry, sent, !tt.never)
			}
			if h.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", h.Get("Cache-Control"))
			}
			if got := d.Never(); got != tt.never {
				t.Errorf("Decision.Never() = %v, want %v", got, tt.never)
			}
			// SetHeaders asks on every blocked request.
			if n := testing.AllocsPerRun(100, func() { d.Never() }); n != 0 {
				t.Errorf("Decision.Never() allocates %v times, want 0", n)
			}
			detail := NewProblem(d, clock).Detail
			if strings.Contains(detail, "never") != tt.never || strings.Contains(detail, "retry after") == tt.never {
				t.Errorf("problem detail %q, never passes: %v", detail, tt.never)
			}
		})
	}
}
