package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestAlgorithmValidation(t *testing.T) {
	base := Rule{Name: "r", Limit: 10, Period: time.Minute, Action: ActionLimit}
	tests := []struct {
		name string
		edit func(r *Rule)
		want string // "" for valid
	}{
		{"fixed by default", func(r *Rule) {}, ""},
		{"fixed by name", func(r *Rule) { r.Algorithm = FixedWindow }, ""},
		{"sliding", func(r *Rule) { r.Algorithm = SlidingWindow; r.BanFor = time.Minute }, ""},
		{"token bucket with burst", func(r *Rule) { r.Algorithm = TokenBucket; r.Burst = 50 }, ""},
		{"unknown", func(r *Rule) { r.Algorithm = "leaky" }, `algorithm "leaky" is not fixed_window, sliding_window or token_bucket`},
		{"distinct sliding", func(r *Rule) { r.Algorithm = SlidingWindow; r.CountDistinct = "ip" }, "count_distinct counts in fixed windows only, not with algorithm sliding_window"},
		{"distinct bucket", func(r *Rule) { r.Algorithm = TokenBucket; r.CountDistinct = "ip" }, "count_distinct counts in fixed windows only, not with algorithm token_bucket"},
		{"burst without bucket", func(r *Rule) { r.Burst = 5 }, "burst is valid with algorithm token_bucket only"},
		{"negative burst", func(r *Rule) { r.Algorithm = TokenBucket; r.Burst = -1 }, "burst -1 must be between 1 and"},
		{"huge burst", func(r *Rule) { r.Algorithm = TokenBucket; r.Burst = MaxBurst + 1 }, "must be between 1 and"},
		{"skip with algorithm", func(r *Rule) { *r = Rule{Name: "r", Action: ActionSkip, Algorithm: TokenBucket} }, "algorithm and burst are not valid on skip rules"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			_, err := New(Config{Name: "lim", Store: NewMemoryStore(), Rules: []Rule{r}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "rule r:") {
				t.Fatalf("New: %v, want an error naming rule r with %q", err, tt.want)
			}
		})
	}
}

// TestAlgorithmIsPartOfTheKey proves that each algorithm counts under a key of
// its own, so that a change of algorithm starts a fresh counter.
func TestAlgorithmIsPartOfTheKey(t *testing.T) {
	id := Identifier{"user": "u"}
	seen := map[string]Algorithm{}
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
		r := Rule{Name: "r", Characteristics: []string{"user"}, Algorithm: a}
		k := counterKey("p:", "lim", &r, id)
		if b, dup := seen[k]; dup {
			t.Fatalf("%s and %s share key %s", a, b, k)
		}
		seen[k] = a
	}
	def := Rule{Name: "r", Characteristics: []string{"user"}}
	fixed := def
	fixed.Algorithm = FixedWindow
	if counterKey("p:", "lim", &def, id) != counterKey("p:", "lim", &fixed, id) {
		t.Fatal("the default and fixed_window count under different keys")
	}
}

// TestTokenBucketZeroLimitDeniesAll: a LimitFunc may return 0 to deny all,
// which a token bucket must honour without dividing by zero.
func TestTokenBucketZeroLimitDeniesAll(t *testing.T) {
	for _, a := range []Algorithm{SlidingWindow, TokenBucket} {
		l, err := New(Config{Name: "lim", Store: NewMemoryStore(), Rules: []Rule{{
			Name: "r", Period: time.Minute, Action: ActionLimit, Algorithm: a,
			LimitFunc: func(ctxArg context.Context) (int64, error) { return 0, nil },
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if r := l.Check(context.Background(), Identifier{}); r.Err != nil || r.Action != ActionBlock {
			t.Fatalf("%s: limit 0 gave %+v, want a block", a, r)
		}
	}
}

// TestAlgorithmsOverLongSpans: a token bucket whose refill outlasts the
// longest time.Duration (10 a year, burst 10000: filled, it is full again in
// 1,000 years) and a sliding window of a period over half of it must keep
// limiting; a state whose expiry overflowed would read as already expired,
// every check would find a fresh counter and admit.
func TestAlgorithmsOverLongSpans(t *testing.T) {
	const year = 365 * 24 * time.Hour
	tests := []struct {
		name  string
		rule  Rule
		costs []float64 // each admitted
	}{
		{"token bucket", Rule{Limit: 10, Period: year, Algorithm: TokenBucket, Burst: 10000}, []float64{5000, 5000}},
		{"sliding window", Rule{Limit: 2, Period: 200 * year, Algorithm: SlidingWindow}, []float64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := time.Unix(1_000_000_000, 0)
			clock := func() time.Time { return at }
			r := tt.rule
			r.Name, r.Action = "r", ActionLimit
			l, err := New(Config{Name: "lim", Store: MemoryConfig{Now: clock}.New(), Now: clock, Rules: []Rule{r}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i, c := range tt.costs {
				if res := l.Check(ctx, Identifier{}, Cost(c)); res.Action != ActionAllow || res.Err != nil {
					t.Fatalf("check #%d of cost %v: %+v, want it admitted", i, c, res)
				}
			}
			res := l.Check(ctx, Identifier{})
			if res.Action != ActionBlock || res.Info == nil {
				t.Fatalf("check past the limit: %+v, want a block", res)
			}
			if !res.Info.ResetAt.After(at) {
				t.Fatalf("blocked until %v, before now (%v)", res.Info.ResetAt, at)
			}
		})
	}
}

// TestSlidingWindowClockStepsBack: an injected clock that steps back (a
// test's Clock.Set) puts a sliding window's current window partly in the
// future; the previous window still weighs at most its whole count. It
// weighed 1.5 times it: 8 hits of the previous window read as 12, over the
// limit of 10, and the check was blocked with a count no window held.
func TestSlidingWindowClockStepsBack(t *testing.T) {
	at := time.Unix(1_000_000_000, 0)
	clock := func() time.Time { return at }
	l, err := New(Config{Name: "lim", Store: MemoryConfig{Now: clock}.New(), Now: clock, Rules: []Rule{{
		Name: "r", Action: ActionLimit, Algorithm: SlidingWindow, Limit: 10, Period: time.Minute,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res := l.Check(ctx, Identifier{}, Cost(8)); res.Action != ActionAllow {
		t.Fatalf("first window: %+v", res)
	}
	at = at.Add(time.Minute) // the next window starts with this check
	if res := l.Check(ctx, Identifier{}, Cost(1)); res.Action != ActionAllow || res.Info == nil || res.Info.Count != 9 {
		t.Fatalf("next window: %s, info %+v; want admitted at count 8 + 1", res.Action, res.Info)
	}
	at = at.Add(-30 * time.Second)
	res := l.Check(ctx, Identifier{}, Cost(1))
	if res.Action != ActionAllow || res.Info == nil || res.Info.Count != 10 {
		t.Fatalf("30s back: %s, info %+v; want admitted at count 8 + 1 + 1", res.Action, res.Info)
	}
}
