package ratelimit_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestCheckAllocations pins the allocations of a memory-store check: the
// store reads the keys in place, and the evaluations (which the Result hands
// to the caller) come from a block of eleven that checks share, so the block
// is all that is left: one allocation per eleven one-rule checks, per two
// five-rule checks. Under -race sync.Pool drops some of the reused buffers,
// so the bound is looser there.
func TestCheckAllocations(t *testing.T) {
	tests := []struct {
		name  string
		rules int
		max   float64
	}{
		{"1 rule", 1, 1.0/11 + slack},
		{"5 rules", 5, 1.0/2 + slack},
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
			got := allocsPerRun(2200, func() {
				if r := l.Check(ctx, id); r.Err != nil || !r.Matched {
					t.Fatalf("check: %+v", r)
				}
			})
			if got > max {
				t.Fatalf("%.3f allocations per check, want at most %.3f", got, max)
			}
		})
	}
}

// slack is what a bound of allocsPerRun allows beyond the allocations it
// expects: a garbage collection empties sync.Pool, and the next check then
// allocates a scratch again (a few allocations in thousands of checks).
const slack = 0.05

// allocsPerRun is testing.AllocsPerRun without its rounding down to a whole
// number, which would hide an allocation shared by several checks: the
// average number of allocations of f over runs calls, after one to warm up.
func allocsPerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}

// nopStore answers every op as counted once, without doing anything, so that
// a check's allocations are the limiter's own.
type nopStore struct{ bounded bool }

func (s nopStore) Eval(_ context.Context, _ ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return nopOutcomes[:len(ops)], nil
}

func (nopStore) Delete(context.Context, []string) (int, error) { return 0, nil }
func (s nopStore) ContextBounded() bool                        { return s.bounded }

var nopOutcomes = func() []ratelimit.OpResult {
	o := make([]ratelimit.OpResult, 16)
	for i := range o {
		o[i] = ratelimit.OpResult{Evaluated: true, Count: 1, TTL: time.Hour}
	}
	return o
}()

// TestLimiterAllocationsOnNetworkStore pins the limiter's own allocations on
// the path of a network store (a store that does nothing stands in for
// Redis): the keys of all ops in one string, and the evaluations' share of
// their block (see TestCheckAllocations). The per-check timeout costs
// nothing: the caller's earlier deadline is kept as it is, and the timeout of
// a caller's context that is never canceled is reused (deadlineCtx).
func TestLimiterAllocationsOnNetworkStore(t *testing.T) {
	rules := func(n int) []ratelimit.Rule {
		rs := make([]ratelimit.Rule, n)
		for i := range rs {
			rs[i] = ratelimit.Rule{Name: "r" + string(rune('a'+i)), Characteristics: []string{"user"},
				Limit: 100, Period: time.Hour, BanFor: time.Minute}
		}
		return rs
	}
	id := ratelimit.Identifier{"user": "u:1"}
	// The caller's deadline comes before the limiter's timeout, so the check
	// derives no context: what is left is the limiter's own.
	dctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	tests := []struct {
		name  string
		rules int
		max   float64
	}{
		{"1 rule", 1, 1 + 1.0/11 + slack},
		{"5 rules", 5, 1 + 1.0/2 + slack}, // one string for every key and ban key
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ratelimit.New(ratelimit.Config{Name: "nop", Store: nopStore{bounded: true}, Rules: rules(tt.rules), Timeout: 2 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			max := tt.max
			if raceEnabled {
				max += 3 // sync.Pool drops some of the reused buffers under -race
			}
			for _, ctx := range []context.Context{dctx, context.Background()} {
				got := allocsPerRun(2200, func() {
					if r := l.Check(ctx, id); r.Err != nil || len(r.Evaluations) != tt.rules {
						t.Fatalf("check: %+v", r)
					}
				})
				if got > max {
					t.Fatalf("%.3f allocations per check (caller's context %v), want at most %.3f", got, ctx, max)
				}
			}
		})
	}
}

// TestCheckBatchAllocations pins the allocations of a batch of five
// one-rule checks on the memory store: the results it returns, and the
// evaluations' share of their blocks; the batch's own bookkeeping is pooled.
func TestCheckBatchAllocations(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "allocs", Store: ratelimit.NewMemoryStore(), Rules: benchRules(1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reqs := make([]ratelimit.Request, 5)
	for i := range reqs {
		reqs[i] = ratelimit.Request{Limiter: l, Identifier: ratelimit.Identifier{"user": "u" + string(rune('1'+i))}}
	}
	ratelimit.CheckBatch(ctx, reqs) // the counters exist from here on
	max := 1 + 5.0/11 + slack
	if raceEnabled {
		max += 10 // five pooled scratches and the pooled list, each dropped now and then
	}
	got := allocsPerRun(2200, func() {
		if r := ratelimit.CheckBatch(ctx, reqs); r[4].Err != nil || !r[4].Matched {
			t.Fatalf("check: %+v", r[4])
		}
	})
	if got > max {
		t.Fatalf("%.3f allocations per batch of 5, want at most %.3f", got, max)
	}
}
