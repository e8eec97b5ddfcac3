package ratelimit

import (
	"context"
	"testing"
	"time"
)

// TestTokenBucketWaitForWholeBurst: a cost of the whole burst passes once the
// bucket is full, so a blocked check of it resets when the bucket is full,
// the reset of the check that took the last token. The wait was computed as
// d + cost*t - burst*t, whose products (2^40 tokens of 50 years) float64
// rounds by hours: it was 6 hours late.
func TestTokenBucketWaitForWholeBurst(t *testing.T) {
	at := time.Unix(1_000_000_000, 0)
	clock := func() time.Time { return at }
	l, err := New(Config{Name: "lim", Store: MemoryConfig{Now: clock}.New(), Now: clock, Rules: []Rule{{
		Name: "r", Action: ActionLimit, Algorithm: TokenBucket, Limit: 2, Burst: MaxBurst, Period: 100 * 365 * 24 * time.Hour,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first := l.Check(ctx, Identifier{})
	if first.Action != ActionAllow || first.Info == nil {
		t.Fatalf("first check: %+v, want it admitted", first)
	}
	all := l.Check(ctx, Identifier{}, Cost(MaxBurst))
	if all.Action != ActionBlock || all.Info == nil {
		t.Fatalf("check of the whole burst: %+v, want a block", all)
	}
	if got, want := all.Info.ResetAt, first.Info.ResetAt; got.Sub(want).Abs() > time.Microsecond {
		t.Fatalf("the whole burst resets at %v, %v from when the bucket is full (%v)", got, got.Sub(want), want)
	}
}

// TestCeilingKeepsWholeUnitsOver: the allowance for floating-point error
// grows with the limit (2^-44 of it), so that fractional costs adding up to
// a large limit stay within it, and stops at 0.25, so that a count a whole
// unit over the limit is over it at every limit: at 2^53 - 1, where a
// float64 holds no fraction, l + 0.5 would round to l + 1 and admit it.
func TestCeilingKeepsWholeUnitsOver(t *testing.T) {
	for _, l := range []int64{1, 17_592, 1 << 24, 1_000_000_000, 1 << 42, 1<<51 + 1, 1<<52 + 1, MaxCount} {
		if overLimit(float64(l), l) {
			t.Errorf("limit %d: a count of the limit is over it", l)
		}
		if !overLimit(float64(l+1), l) {
			t.Errorf("limit %d: a count of the limit + 1 is within it (ceiling %v)", l, ceiling(float64(l)))
		}
	}
}

// TestTokenBucketPassesAtItsReset: a blocked token bucket check is told a
// reset at which the same check passes, however finely its tokens refill.
// At 2^53 - 1 tokens a century (Burst 0 takes the limit) a token refills in
// 350ns, less than a float64 resolves of the 100 years the full bucket's
// state holds: the wait for one token was computed as 0 or less, the check
// was blocked with a reset of now and blocked again at it.
func TestTokenBucketPassesAtItsReset(t *testing.T) {
	const century = 100 * 365 * 24 * time.Hour
	for _, tc := range []struct {
		limit, burst int64
		full, cost   float64
	}{
		{MaxCount, 0, MaxCount, 1},
		{MaxCount, 0, MaxCount, 1000},
		{MaxCount, 0, MaxCount, 1e9},
		{1 << 40, 0, 1 << 40, 3},
	} {
		at := time.Unix(1_000_000_000, 0)
		clock := func() time.Time { return at }
		l, err := New(Config{Name: "lim", Store: MemoryConfig{Now: clock}.New(), Now: clock, Rules: []Rule{{
			Name: "r", Action: ActionLimit, Algorithm: TokenBucket, Limit: tc.limit, Burst: tc.burst, Period: century,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if res := l.Check(ctx, Identifier{}, Cost(tc.full)); res.Action != ActionAllow {
			t.Fatalf("%+v: the whole burst: %+v, want it admitted", tc, res)
		}
		res := l.Check(ctx, Identifier{}, Cost(tc.cost))
		if res.Action != ActionBlock || res.Info == nil {
			t.Fatalf("%+v: a check of the empty bucket: %+v, want a block", tc, res)
		}
		if !res.Info.ResetAt.After(at) {
			t.Errorf("%+v: blocked, reset at now", tc)
		}
		at = res.Info.ResetAt
		if res := l.Check(ctx, Identifier{}, Cost(tc.cost)); res.Action != ActionAllow {
			t.Errorf("%+v: blocked at its reset (%s, count %v)", tc, res.Action, res.Info.Count)
		}
	}
}
