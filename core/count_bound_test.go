package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestLimitOverMaxCountRefused: a rule's Limit is at most MaxCount, where a
// float64 still holds every whole count; past it the memory store and Redis
// counted apart.
func TestLimitOverMaxCountRefused(t *testing.T) {
	for _, tc := range []struct {
		limit int64
		ok    bool
	}{
		{ratelimit.MaxCount, true},
		{ratelimit.MaxCount + 1, false},
		{1 << 62, false},
	} {
		r := ratelimit.Rule{Name: "r", Limit: tc.limit, Period: time.Minute}
		_, err := ratelimit.New(ratelimit.Config{Name: "l", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{r}})
		if (err == nil) != tc.ok {
			t.Errorf("limit %d: New error %v, want ok %v", tc.limit, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "is over 9007199254740991") {
			t.Errorf("limit %d: error %q does not name the bound", tc.limit, err)
		}
	}
}

// TestCountsPastMaxCount: what a caller can reach past MaxCount (a
// LimitFunc's large limit, a huge cost) is bounded by the Limiter, so that
// every Store counts it alike. A LimitFunc's limit of 2^53 counted as 2^53:
// after costs of 2^53 - 1 and 2 the memory store's float64 held 2^53 (the
// sum rounded) and admitted the check, which Redis's INCRBY (2^53 + 1)
// blocked.
func TestCountsPastMaxCount(t *testing.T) {
	huge := func(context.Context) (int64, error) { return 1 << 53, nil }
	type check struct {
		cost      float64
		blocked   bool
		never     bool
		count     float64
		limitSeen int64
	}
	for _, tc := range []struct {
		name   string
		rule   ratelimit.Rule
		checks []check
	}{
		{"a LimitFunc's limit over MaxCount", ratelimit.Rule{LimitFunc: huge}, []check{
			{cost: ratelimit.MaxCount, count: ratelimit.MaxCount, limitSeen: ratelimit.MaxCount},
			{cost: 2, blocked: true, count: 1 << 53, limitSeen: ratelimit.MaxCount},
		}},
		{"a cost over MaxCount", ratelimit.Rule{Limit: 5}, []check{
			{cost: 1e19, blocked: true, never: true, count: 1 << 53, limitSeen: 5},
			{cost: 1e300, blocked: true, never: true, count: 1 << 53, limitSeen: 5},
		}},
		{"a sliding window, a cost over MaxCount", ratelimit.Rule{Limit: ratelimit.MaxCount, Algorithm: ratelimit.SlidingWindow}, []check{
			{cost: 1e19, blocked: true, never: true, count: 0, limitSeen: ratelimit.MaxCount},
			{cost: ratelimit.MaxCount, count: ratelimit.MaxCount, limitSeen: ratelimit.MaxCount},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			r.Name, r.Period, r.Characteristics = "r", time.Hour, []string{"user"}
			l, err := ratelimit.New(ratelimit.Config{Name: "l", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{r}})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range tc.checks {
				res := l.Check(context.Background(), ratelimit.Identifier{"user": "u"}, ratelimit.Cost(c.cost))
				if res.Err != nil || res.Info == nil {
					t.Fatalf("check %d (cost %v): %+v", i, c.cost, res)
				}
				got := check{c.cost, res.Action == ratelimit.ActionBlock, res.Info.Never, res.Info.Count, res.Info.Limit}
				if got != c {
					t.Fatalf("check %d: got %+v, want %+v", i, got, c)
				}
			}
		})
	}
}
