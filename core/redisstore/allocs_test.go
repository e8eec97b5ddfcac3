package redisstore

import (
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestDialCheckAllocations pins the allocations of a check through a Limiter
// on a Store from Dial: requests and reply buffers are pooled, so what is left
// is the Limiter's own (its per-check timeout context, the counter key, the
// evaluations it hands to the caller) and the outcomes. Under -race sync.Pool
// drops some of the reused buffers, so the bound is looser there.
func TestDialCheckAllocations(t *testing.T) {
	tests := []struct {
		name  string
		rules int
		max   float64
	}{
		{"1 rule", 1, 10},
		{"5 rules", 5, 14},
	}
	s := dialStore(t, redistest.URL(t))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := make([]ratelimit.Rule, tt.rules)
			for i := range rules {
				rules[i] = ratelimit.Rule{Name: "r" + string(rune('a'+i)), Action: ratelimit.ActionLimit,
					Characteristics: []string{"user"}, Limit: 1 << 40, Period: time.Hour}
			}
			l, err := ratelimit.New(ratelimit.Config{Name: "allocs", Store: s, KeyPrefix: redistest.Prefix(t), Rules: rules, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			id := ratelimit.Identifier{"user": "u"}
			l.Check(ctx, id) // the counters exist from here on
			max := tt.max
			if raceEnabled {
				max += 8 // a dropped request costs its struct, channel and buffers
			}
			got := testing.AllocsPerRun(200, func() {
				if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
					t.Fatalf("check: %+v", r)
				}
			})
			t.Logf("%v allocations per check", got)
			if got > max {
				t.Fatalf("%v allocations per check, want at most %v", got, max)
			}
		})
	}
}
