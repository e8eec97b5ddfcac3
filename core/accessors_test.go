package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

type downStore struct{}

func (downStore) Eval(context.Context, ratelimit.Mode, []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return nil, errors.New("connection refused")
}
func (downStore) Delete(context.Context, []string) (int, error) {
	return 0, errors.New("connection refused")
}

// The accessors return zero values where Rule or Info is nil: a skip, no
// match, a store failure; and the values of Info otherwise.
func TestResultAccessors(t *testing.T) {
	skip := ratelimit.Rule{Name: "skip_office", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"ip": ratelimit.Equal("192.0.2.1")}}
	limit := ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mem := ratelimit.MemoryConfig{Now: func() time.Time { return now }}.New()
	l, err := ratelimit.New(ratelimit.Config{Name: "l", Store: mem, Now: func() time.Time { return now }, Rules: []ratelimit.Rule{skip, limit}})
	if err != nil {
		t.Fatal(err)
	}
	down, err := ratelimit.New(ratelimit.Config{Name: "l", Store: downStore{}, Rules: []ratelimit.Rule{limit}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l.Check(ctx, ratelimit.Identifier{"ip": "198.51.100.1"})
	type view struct {
		Rule      string
		Limit     int64
		Count     float64
		Remaining float64
		ResetAt   time.Time
		Banned    bool
		Retry     time.Duration
	}
	for _, tt := range []struct {
		name string
		res  ratelimit.Result
		want view
	}{
		{"skip", l.Check(ctx, ratelimit.Identifier{"ip": "192.0.2.1"}), view{Rule: "skip_office"}},
		{"no match", l.Check(ctx, ratelimit.Identifier{"user": "alice"}), view{}},
		{"store down", down.Check(ctx, ratelimit.Identifier{"ip": "192.0.2.9"}), view{}},
		{"zero result", ratelimit.Result{}, view{}},
		{"allow", l.Check(ctx, ratelimit.Identifier{"ip": "198.51.100.2"}), view{"per_ip", 1, 1, 0, now.Add(time.Minute), false, 0}},
		{"block", l.Check(ctx, ratelimit.Identifier{"ip": "198.51.100.1"}), view{"per_ip", 1, 2, 0, now.Add(time.Minute), false, time.Minute}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.res
			got := view{r.RuleName(), r.Limit(), r.Count(), r.Remaining(), r.ResetAt(), r.Banned(), r.RetryAfter(now)}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Reading a result needs no nil checks, whatever happened to the check.
func ExampleResult_Remaining() {
	limiter, _ := ratelimit.New(ratelimit.Config{
		Name:  "api",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"}, Limit: 100, Period: time.Minute}},
	})
	r := limiter.Check(context.Background(), ratelimit.Identifier{"user": "alice"})
	fmt.Println(r.RuleName(), r.Limit(), r.Remaining())
	r = limiter.Check(context.Background(), ratelimit.Identifier{"ip": "192.0.2.1"}) // no rule applies: no Rule, no Info
	fmt.Printf("%q %d %g\n", r.RuleName(), r.Limit(), r.Remaining())
	// Output:
	// per_user 100 99
	// "" 0 0
}

// Evaluations whose remaining allowances differ by floating-point error only
// tie, and a tie goes to rule order: a token bucket reports 0.5000000001
// where a sliding window reports 0.5.
func TestMoreConstrainingTiesWithinFloatError(t *testing.T) {
	first := &ratelimit.Rule{Name: "first", Action: ratelimit.ActionLimit}
	second := &ratelimit.Rule{Name: "second", Action: ratelimit.ActionLimit}
	tests := []struct {
		name       string
		a, b       float64 // remaining of the first and the second rule
		wantSecond bool
	}{
		{"equal", 0.5, 0.5, false},
		{"second lower by float error", 0.5000000001, 0.5, false},
		{"first lower by float error", 0.5, 0.5000000001, false},
		{"second really lower", 0.5, 0.4, true},
		{"first really lower", 0.4, 0.5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ratelimit.Result{Evaluations: []ratelimit.Evaluation{
				{Rule: first, Info: ratelimit.Info{Remaining: tt.a}},
				{Rule: second, Info: ratelimit.Info{Remaining: tt.b}},
			}}
			got := r.Enforcing().Rule.Name
			want := "first"
			if tt.wantSecond {
				want = "second"
			}
			if got != want {
				t.Fatalf("most constraining of remaining %v and %v: %s, want %s", tt.a, tt.b, got, want)
			}
		})
	}
}

// Info.RetryAfter rounds up to whole seconds and saturates at MaxRetryAfter:
// a reset past the longest Duration (a saturated wait) rounded up used to
// overflow into a negative wait, which headers sent as "come back at once".
func TestInfoRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name  string
		reset time.Time
		want  time.Duration
	}{
		{"past", now.Add(-time.Second), 0},
		{"now", now, 0},
		{"a fraction", now.Add(1500 * time.Millisecond), 2 * time.Second},
		{"the longest whole seconds", now.Add(ratelimit.MaxRetryAfter), ratelimit.MaxRetryAfter},
		{"the longest Duration", now.Add(math.MaxInt64), ratelimit.MaxRetryAfter},
		{"a thousand years", now.AddDate(1000, 0, 0), ratelimit.MaxRetryAfter},
	} {
		t.Run(tt.name, func(t *testing.T) {
			i := ratelimit.Info{ResetAt: tt.reset}
			if got := i.RetryAfter(now); got != tt.want {
				t.Fatalf("RetryAfter = %v, want %v", got, tt.want)
			}
		})
	}
}
