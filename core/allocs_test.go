package ratelimit_test

import (
	"context"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestCheckAllocations pins the allocations of a memory-store check: the
// counter key and the evaluations (which the Result hands to the caller) are
// the only ones left. Under -race sync.Pool drops some of the reused buffers,
// so the bound is looser there.
func TestCheckAllocations(t *testing.T) {
	tests := []struct {
		name  string
		rules int
		max   float64
	}{
		{"1 rule", 1, 2},
		{"5 rules", 5, 6}, // a key per rule and the evaluations
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ratelimit.New(ratelimit.Config{Name: "allocs", Store: ratelimit.NewMemoryStore(), Rules: benchRules(tt.rules)})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := ratelimit.Identifier{"user": "u", "ip": "203.0.113.1"}
			l.Check(ctx, id) // the counters exist from here on
			max := tt.max
			if raceEnabled {
				max += 3
			}
			got := testing.AllocsPerRun(200, func() {
				if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
					t.Fatalf("check: %+v", r)
				}
			})
			if got > max {
				t.Fatalf("%v allocations per check, want at most %v", got, max)
			}
		})
	}
}
