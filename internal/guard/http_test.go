package guard

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Handle gives a Deferred's Charge the status, the meter the handler filled
// and the response headers; a blocked request reaches deny, not the handler.
func TestHandleOutcome(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "misses", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "cache_misses", Limit: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []Outcome
	g := &HTTP[*http.Request]{}
	g.Deferred = []adapter.Deferred[Outcome]{{Limiter: l, PeekCost: 0, Charge: func(_ context.Context, o Outcome) (float64, bool) {
		seen = append(seen, o)
		return o.Meter.Value("miss_s"), o.Header.Get("X-Cache") == "miss"
	}}}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	denied := 0
	for i := 0; i < 3; i++ {
		h := http.Header{}
		g.Handle(context.Background(), nil, h, func(*ratelimitheaders.Decision, *ratelimitheaders.Problem) { denied++ },
			func(int) { t.Error("a request no caller canceled was answered as gone") }, func(ctx context.Context) int {
				adapter.AddCost(ctx, "miss_s", 0.75)
				h.Set("X-Cache", "miss")
				return http.StatusTeapot
			})
	}
	// 0.75, then 1.5 (over 1): the third request is blocked by the peek.
	if len(seen) != 2 || denied != 1 {
		t.Fatalf("charged %d times, denied %d; want 2 and 1", len(seen), denied)
	}
	if o := seen[0]; o.Status != http.StatusTeapot || o.Meter.Value("miss_s") != 0.75 || o.Header.Get("X-Cache") != "miss" {
		t.Errorf("outcome %+v", o)
	}
	if res := l.Peek(context.Background(), nil, ratelimit.Cost(0)); res.Info == nil || res.Info.Count != 1.5 {
		t.Errorf("counted %+v, want 1.5", res.Info)
	}
}

// The guard's jitter lengthens Retry-After by whole seconds up to the
// maximum, and varies; allowed requests get none.
func TestRetryAfterJitter(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	rule := &ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit}
	decision := func(count float64) *ratelimitheaders.Decision {
		ev := ratelimit.Evaluation{Rule: rule, Exceeded: count > 5, Blocked: count > 5,
			Info: ratelimit.Info{Limit: 5, Period: time.Minute, Count: count, Remaining: max(5-count, 0), ResetAt: now.Add(9 * time.Second)}}
		res := ratelimit.Result{Action: ratelimit.ActionAllow, Matched: true, Exceeded: ev.Exceeded, Evaluations: []ratelimit.Evaluation{ev}}
		if ev.Blocked {
			res.Action = ratelimit.ActionBlock
		}
		return &ratelimitheaders.Decision{Results: []ratelimit.Result{res}}
	}
	for _, tt := range []struct {
		name   string
		jitter time.Duration
		count  float64
		want   []string // the values Retry-After may take; nil: none
	}{
		{"none", 0, 6, []string{"9"}},
		{"under a second is none", 900 * time.Millisecond, 6, []string{"9"}},
		{"three seconds", 3 * time.Second, 6, []string{"9", "10", "11", "12"}},
		{"allowed: no Retry-After", 3 * time.Second, 2, []string{""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &HTTP[*http.Request]{}
			g.RetryAfterJitter = tt.jitter
			seen := map[string]bool{}
			for range 200 {
				h := http.Header{}
				g.SetHeaders(h, decision(tt.count), now)
				seen[h.Get(ratelimitheaders.HeaderRetryAfter)] = true
			}
			for v := range seen {
				if !slices.Contains(tt.want, v) {
					t.Fatalf("Retry-After %q, want one of %q", v, tt.want)
				}
			}
			if len(tt.want) > 1 && len(seen) < 2 { // 200 equal draws from 4 values: about 1 in 4^199
				t.Fatalf("no jitter in 200 responses: %v", seen)
			}
		})
	}
}

// Hook and PropertiesHook hand the request, not the context, to an HTTP
// adapter's hooks, and return what they return.
func TestHooks(t *testing.T) {
	ctx := context.Background()
	if got := Hook(func(r string) float64 { return float64(len(r)) })(ctx, "four"); got != 4 {
		t.Fatalf("Hook cost = %v, want 4", got)
	}
	id := ratelimit.Identifier{}
	PropertiesHook(func(r string, id ratelimit.Identifier) { id["user"] = r })(ctx, "u1", id)
	if id["user"] != "u1" {
		t.Fatalf("PropertiesHook left %v, want user u1", id)
	}
}
