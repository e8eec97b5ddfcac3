package ratelimitasynq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
)

func newLimiter(t *testing.T, name string, store ratelimit.Store, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	if store == nil {
		store = ratelimit.NewMemoryStore()
	}
	l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, Rules: rules, Logger: quiet, Breaker: ratelimit.BreakerConfig{Failures: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func rule(name string, limit int64, period time.Duration, action ratelimit.Action, chars ...string) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Characteristics: chars, Limit: limit,
		Period: period, Action: action}
}

// quiet drops the limiters' fail-open warnings, which the tests provoke.
var quiet = slog.New(slog.DiscardHandler)

// failingStore fails every call, as a store that is down does.
type failingStore struct{}

func (failingStore) Eval(context.Context, ratelimit.Mode, []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return nil, errors.New("store down")
}
func (failingStore) Delete(context.Context, []string) (int, error) {
	return 0, errors.New("store down")
}

func TestRetryIn(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name       string
		now, reset time.Time
		want       time.Duration
	}{
		{"whole seconds", base, base.Add(5 * time.Second), 5 * time.Second},
		{"reset mid-second rounds up", base, base.Add(4500 * time.Millisecond), 5 * time.Second},
		// now 0.7 s into its second, reset 0.5 s later: ceil(reset)-floor(now)
		// = 1 s, and asynq's due second (floor(now+1s)) begins after reset.
		{"now mid-second", base.Add(700 * time.Millisecond), base.Add(1200 * time.Millisecond), 2 * time.Second},
		{"reset in the past gives 1s", base, base.Add(-time.Second), time.Second},
		{"zero reset gives 1s", base, time.Time{}, time.Second},
		// A wait past the longest Duration (a saturated reset) is the longest
		// whole-second Duration, never a negative one.
		{"reset past the longest duration", base, base.Add(math.MaxInt64), ratelimit.MaxRetryAfter},
		{"reset in a thousand years", base, base.AddDate(1000, 0, 0), ratelimit.MaxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retryIn(tt.now, tt.reset)
			if got != tt.want {
				t.Fatalf("retryIn = %v, want %v", got, tt.want)
			}
			if got%time.Second != 0 {
				t.Fatalf("retryIn %v is not whole seconds", got)
			}
			// asynq's due time is floor(now+got) in Unix seconds; it must not
			// precede reset, unless reset lies beyond any Duration.
			if due := time.Unix(tt.now.Add(got).Unix(), 0); !tt.reset.IsZero() && got != ratelimit.MaxRetryAfter && due.Before(tt.reset) {
				t.Fatalf("due second %v precedes reset %v", due, tt.reset)
			}
		})
	}
}

// The jitter added to a saturated RetryIn does not overflow it.
func TestBlockedRetryInSaturates(t *testing.T) {
	c := &config{}
	c.RetryAfterJitter = time.Hour
	now := time.Now()
	info := ratelimit.Info{Limit: 1, Period: time.Hour, ResetAt: now.Add(math.MaxInt64)}
	res := ratelimit.Result{Limiter: "jobs", Action: ratelimit.ActionBlock, Rule: &ratelimit.Rule{Name: "r"}, Info: &info}
	for range 20 { // random jitters of 0 to 3600 s: every one must leave RetryIn saturated
		err := c.blocked(context.Background(), asynq.NewTask("t", nil), res, now)
		rl, ok := AsRateLimitError(err)
		if !ok || rl.RetryIn != ratelimit.MaxRetryAfter {
			t.Fatalf("blocked until the longest Duration: %v, want RetryIn %v", err, ratelimit.MaxRetryAfter)
		}
	}
}

func TestIsFailure(t *testing.T) {
	rl := &RateLimitError{RetryIn: time.Second, Limiter: "jobs", Rule: "r"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), true},
		{"rate limit", rl, false},
		{"wrapped rate limit", fmt.Errorf("task x: %w", rl), false},
		{"joined rate limit", errors.Join(errors.New("a"), rl), false},
		{"skip retry", asynq.SkipRetry, true},
		{"typed nil", (*RateLimitError)(nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsFailure(tt.err); got != tt.want {
				t.Fatalf("IsFailure(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	task := asynq.NewTask("email:send", nil)
	rl := &RateLimitError{RetryIn: 7 * time.Second, Limiter: "jobs", Rule: "r"}
	if got := RetryDelay(3, fmt.Errorf("wrapped: %w", rl), task); got != 7*time.Second {
		t.Fatalf("RetryDelay(rate limit) = %v, want 7s", got)
	}
	// asynq's default for n=0 is 15s + rand(30)s.
	for range 20 {
		if got := RetryDelay(0, errors.New("boom"), task); got < 15*time.Second || got >= 45*time.Second {
			t.Fatalf("RetryDelay(other) = %v, want asynq's default in [15s,45s)", got)
		}
	}
	custom := RetryDelayFunc(func(n int, _ error, _ *asynq.Task) time.Duration { return time.Duration(n) * time.Minute })
	if got := custom(2, errors.New("boom"), task); got != 2*time.Minute {
		t.Fatalf("custom fallback = %v, want 2m", got)
	}
	if got := custom(2, rl, task); got != 7*time.Second {
		t.Fatalf("custom(rate limit) = %v, want 7s", got)
	}
}

// A task whose cost alone is over its rule can never run: its error skips
// asynq's retries (asynq archives it), where a RetryIn would bring it back
// every window for good; a task that only has to wait is retried.
func TestCostThatNeverPassesSkipsRetry(t *testing.T) {
	tests := []struct {
		name  string
		cost  float64
		never bool
	}{
		{"cost over the limit", 4, true},
		{"cost at the limit", 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw := Middleware(newLimiter(t, "jobs", nil, rule("budget", 3, time.Minute, ratelimit.ActionLimit)),
				WithCost(func(context.Context, *asynq.Task) float64 { return tt.cost }))
			errs, _ := run(t, mw, context.Background(), asynq.NewTask("bulk", nil), 2)
			err := errs[1]
			rl, ok := AsRateLimitError(err)
			if !ok {
				t.Fatalf("second task: %v, want a *RateLimitError", err)
			}
			if rl.Never != tt.never || errors.Is(err, asynq.SkipRetry) != tt.never {
				t.Errorf("%v: Never %v, skips retry %v, want both %v", err, rl.Never, errors.Is(err, asynq.SkipRetry), tt.never)
			}
		})
	}
}

func TestRateLimitErrorMessage(t *testing.T) {
	err := &RateLimitError{RetryIn: 3 * time.Second, Limiter: "jobs", Rule: "per_type"}
	want := "ratelimitasynq: rate limited by limiter jobs rule per_type, retry in 3s"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

// run processes task n times through the middleware and returns the errors
// and how many times the handler ran.
func run(t *testing.T, mw asynq.MiddlewareFunc, ctx context.Context, task *asynq.Task, n int) ([]error, int) {
	t.Helper()
	ran := 0
	h := mw(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran++; return nil }))
	errs := make([]error, n)
	for i := range errs {
		errs[i] = h.ProcessTask(ctx, task)
	}
	return errs, ran
}

func TestMiddleware(t *testing.T) {
	perType := rule("per_type", 2, time.Minute, ratelimit.ActionLimit, "task_type")
	clock := time.Now()
	tests := []struct {
		name     string
		limiters func(t *testing.T) []*ratelimit.Limiter
		opts     []Option
		task     *asynq.Task
		n        int
		wantRan  int
		wantErr  []bool // per call: a *RateLimitError expected
		wantRule string
		check    func(t *testing.T, errs []error)
	}{
		{
			name: "limit admits 2, blocks the 3rd",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, perType)}
			},
			task: asynq.NewTask("email:send", nil), n: 3, wantRan: 2,
			wantErr: []bool{false, false, true}, wantRule: "per_type",
			check: func(t *testing.T, errs []error) {
				rl, _ := AsRateLimitError(errs[2])
				if rl.Limiter != "jobs" || rl.RetryIn < 59*time.Second || rl.RetryIn > 61*time.Second {
					t.Fatalf("error = %+v, want limiter jobs, RetryIn ~60s", rl)
				}
			},
		},
		{
			name: "task types counted apart",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				l := newLimiter(t, "jobs", nil, perType)
				l.Check(context.Background(), ratelimit.Identifier{"task_type": "other"})
				l.Check(context.Background(), ratelimit.Identifier{"task_type": "other"})
				return []*ratelimit.Limiter{l}
			},
			task: asynq.NewTask("email:send", nil), n: 2, wantRan: 2, wantErr: []bool{false, false},
		},
		{
			name: "shadow log rule never blocks",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, rule("shadow", 1, time.Minute, ratelimit.ActionLog))}
			},
			task: asynq.NewTask("email:send", nil), n: 3, wantRan: 3, wantErr: []bool{false, false, false},
		},
		{
			name: "fail-open runs the task",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", failingStore{}, perType)}
			},
			task: asynq.NewTask("email:send", nil), n: 4, wantRan: 4, wantErr: []bool{false, false, false, false},
		},
		{
			name: "a failed limiter never blocks; a healthy one after it does",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{
					newLimiter(t, "down", failingStore{}, rule("one", 1, time.Minute, ratelimit.ActionLimit)),
					newLimiter(t, "healthy", nil, rule("narrow", 2, time.Minute, ratelimit.ActionLimit)),
				}
			},
			opts: []Option{WithDeferred(CountFailures(newLimiter(t, "down_failures", failingStore{}, rule("failures", 1, time.Minute, ratelimit.ActionLimit))))},
			task: asynq.NewTask("sync", nil), n: 3, wantRan: 2, wantErr: []bool{false, false, true}, wantRule: "narrow",
			check: func(t *testing.T, errs []error) {
				if rl, _ := AsRateLimitError(errs[2]); rl.Limiter != "healthy" {
					t.Fatalf("blocked by %q, want healthy", rl.Limiter)
				}
			},
		},
		{
			name: "second limiter blocks",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{
					newLimiter(t, "general", nil, rule("wide", 100, time.Minute, ratelimit.ActionLimit)),
					newLimiter(t, "exports", nil, rule("narrow", 1, time.Minute, ratelimit.ActionLimit)),
				}
			},
			task: asynq.NewTask("export", nil), n: 2, wantRan: 1, wantErr: []bool{false, true}, wantRule: "narrow",
			check: func(t *testing.T, errs []error) {
				if rl, _ := AsRateLimitError(errs[1]); rl.Limiter != "exports" {
					t.Fatalf("blocked by %q, want exports", rl.Limiter)
				}
			},
		},
		{
			name: "skip exempts tasks",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, perType)}
			},
			opts: []Option{WithSkip(func(_ context.Context, t *asynq.Task) bool { return t.Type() == "critical" })},
			task: asynq.NewTask("critical", nil), n: 5, wantRan: 5, wantErr: []bool{false, false, false, false, false},
		},
		{
			name: "custom identifier from the payload",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, ratelimit.Rule{
					Name: "tenant_a", Match: map[string]ratelimit.Matcher{"tenant": ratelimit.Equal("a")},
					Characteristics: []string{"tenant", "task_type"}, Limit: 1,
					Period: time.Minute})}
			},
			opts: []Option{WithProperties(func(_ context.Context, t *asynq.Task, id ratelimit.Identifier) {
				id["tenant"] = string(t.Payload())
			})},
			task: asynq.NewTask("sync", []byte("a")), n: 2, wantRan: 1, wantErr: []bool{false, true}, wantRule: "tenant_a",
		},
		{
			name: "cost weighs a task",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, rule("budget", 10, time.Minute, ratelimit.ActionLimit))}
			},
			opts: []Option{WithCost(func(context.Context, *asynq.Task) float64 { return 4 })},
			task: asynq.NewTask("bulk", nil), n: 3, wantRan: 2, wantErr: []bool{false, false, true}, wantRule: "budget",
		},
		{
			name: "deny handler wraps the error",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, rule("one", 1, time.Minute, ratelimit.ActionLimit))}
			},
			opts: []Option{WithDenyHandler(func(_ context.Context, task *asynq.Task, res ratelimit.Result, err *RateLimitError) error {
				if !res.Blocked() {
					t.Errorf("deny handler got a result that is not blocked")
				}
				return fmt.Errorf("task %s: %w", task.Type(), err)
			})},
			task: asynq.NewTask("wrapped", nil), n: 2, wantRan: 1, wantErr: []bool{false, true}, wantRule: "one",
			check: func(t *testing.T, errs []error) {
				if got := errs[1].Error(); got[:len("task wrapped: ")] != "task wrapped: " {
					t.Fatalf("error %q is not wrapped by the deny handler", got)
				}
			},
		},
		{
			// nil would tell asynq the task succeeded, and it would be
			// forgotten without ever running.
			name: "deny handler returning nil keeps the task",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, rule("one", 1, time.Minute, ratelimit.ActionLimit))}
			},
			opts: []Option{WithDenyHandler(func(context.Context, *asynq.Task, ratelimit.Result, *RateLimitError) error {
				return nil
			})},
			task: asynq.NewTask("logged", nil), n: 2, wantRan: 1, wantErr: []bool{false, true}, wantRule: "one",
		},
		{
			name: "jitter adds whole seconds",
			limiters: func(t *testing.T) []*ratelimit.Limiter {
				return []*ratelimit.Limiter{newLimiter(t, "jobs", nil, rule("one", 1, 10*time.Second, ratelimit.ActionLimit))}
			},
			opts: []Option{WithJitter(3 * time.Second), WithClock(func() time.Time { return clock })},
			task: asynq.NewTask("jittered", nil), n: 30, wantRan: 1, wantRule: "one",
			check: func(t *testing.T, errs []error) {
				seen := map[time.Duration]bool{}
				for _, err := range errs[1:] {
					rl, _ := AsRateLimitError(err)
					if rl.RetryIn%time.Second != 0 || rl.RetryIn < 10*time.Second || rl.RetryIn > 14*time.Second {
						t.Fatalf("RetryIn %v, want whole seconds in [10s,14s]", rl.RetryIn)
					}
					seen[rl.RetryIn] = true
				}
				if len(seen) < 2 {
					t.Fatalf("29 jittered delays took %d distinct values, want several", len(seen))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ls := tt.limiters(t)
			opts := append([]Option{WithLimiters(ls[1:]...)}, tt.opts...)
			errs, ran := run(t, Middleware(ls[0], opts...), context.Background(), tt.task, tt.n)
			if ran != tt.wantRan {
				t.Fatalf("handler ran %d times, want %d", ran, tt.wantRan)
			}
			for i, err := range errs {
				rl, limited := AsRateLimitError(err)
				if tt.wantErr != nil && limited != tt.wantErr[i] {
					t.Fatalf("call %d: err = %v, want rate-limit error %v", i+1, err, tt.wantErr[i])
				}
				if !limited && err != nil {
					t.Fatalf("call %d: unexpected error %v", i+1, err)
				}
				if limited && rl.Rule != tt.wantRule {
					t.Fatalf("call %d: rule %q, want %q", i+1, rl.Rule, tt.wantRule)
				}
				if limited && IsFailure(err) {
					t.Fatalf("call %d: IsFailure(%v) = true", i+1, err)
				}
			}
			if tt.check != nil {
				tt.check(t, errs)
			}
		})
	}
}

func TestMiddlewareHandlerError(t *testing.T) {
	boom := errors.New("boom")
	l := newLimiter(t, "jobs", nil, rule("per_type", 5, time.Minute, ratelimit.ActionLimit))
	h := Middleware(l)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom }))
	if err := h.ProcessTask(context.Background(), asynq.NewTask("x", nil)); !errors.Is(err, boom) || !IsFailure(err) {
		t.Fatalf("handler error = %v, want boom (a failure)", err)
	}
}

func TestMiddlewareNilLimiterPanics(t *testing.T) {
	for name, tc := range map[string]struct {
		f    func()
		want string // in the panic
	}{
		"no limiter":   {func() { Middleware(nil) }, "no limiter"},
		"with limiter": {func() { Middleware(newLimiter(t, "a", nil), WithLimiters(nil)) }, "limiter 1 is nil"},
		"deferred":     {func() { Middleware(newLimiter(t, "a", nil), WithDeferred(Metered(nil, "x"))) }, "deferred limiter 0"},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.HasPrefix(msg, "ratelimitasynq: ") || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic %q, want one from ratelimitasynq naming %q", msg, tc.want)
				}
			}()
			tc.f()
		})
	}
}

// TestCallerGone: a task whose context ended during its checks (a shutdown,
// its deadline: the check fails open with ratelimit.ErrCanceled, counting
// nothing) does not run, as in the other adapters: a task over its limit
// would otherwise run, uncounted. It returns the context's error, as asynq
// fails such a task.
func TestCallerGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(l *ratelimit.Limiter) Option
	}{
		{"limiter", func(l *ratelimit.Limiter) Option { return WithLimiters(l) }},
		{"deferred limiter", func(l *ratelimit.Limiter) Option { return WithDeferred(Metered(l, "db_s")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLimiter(t, "jobs", nil, rule("per_type", 1, time.Minute, ratelimit.ActionLimit, "task_type"))
			ran := 0
			h := Middleware(nil, tc.opt(l))(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				ran++
				adapter.AddCost(ctx, "db_s", 2) // over the budget once charged
				return nil
			}))
			task := asynq.NewTask("report", nil)
			if err := h.ProcessTask(context.Background(), task); err != nil {
				t.Fatalf("first task: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := h.ProcessTask(ctx, task)
			if ran != 1 {
				t.Errorf("the handler ran %d times, want 1: not for the task whose context ended", ran)
			}
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ratelimit.ErrCanceled) {
				t.Errorf("the task whose context ended returned %v, want the context's error", err)
			}
		})
	}
}

// TestMiddlewareNilLimiterWithOptions: as in the HTTP adapters, the limiter
// may be nil when the options give every limiter, a failure budget alone
// included, with no request limiter of no rules beside it.
func TestMiddlewareNilLimiterWithOptions(t *testing.T) {
	boom := errors.New("partner down")
	for name, opt := range map[string]func(l *ratelimit.Limiter) Option{
		"WithLimiters": func(l *ratelimit.Limiter) Option { return WithLimiters(l) },
		"WithDeferred": func(l *ratelimit.Limiter) Option { return WithDeferred(CountFailures(l)) },
	} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, "sync", nil, rule("per_type", 2, time.Minute, ratelimit.ActionLimit, "task_type"))
			h := Middleware(nil, opt(l))(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return boom }))
			var limited []bool
			for range 3 {
				_, ok := AsRateLimitError(h.ProcessTask(context.Background(), asynq.NewTask("sync", nil)))
				limited = append(limited, ok)
			}
			if want := []bool{false, false, true}; !slices.Equal(limited, want) {
				t.Fatalf("rate limited %v, want %v", limited, want)
			}
		})
	}
}

func TestDefaultIdentifier(t *testing.T) {
	id := DefaultIdentifier(context.Background(), asynq.NewTask("email:send", nil))
	if len(id) != 1 || id["task_type"] != "email:send" {
		t.Fatalf("DefaultIdentifier outside a server = %v, want only task_type", id)
	}
}

func TestWithIdentifierReplaces(t *testing.T) {
	var seen ratelimit.Identifier
	obs := func(_ context.Context, e ratelimit.Event) { seen = e.Identifier }
	l, err := ratelimit.New(ratelimit.Config{Name: "jobs", Store: ratelimit.NewMemoryStore(), Observer: obs,
		Rules: []ratelimit.Rule{rule("per_tenant", 1, time.Minute, ratelimit.ActionLimit, "tenant")}})
	if err != nil {
		t.Fatal(err)
	}
	mw := Middleware(l, WithIdentifier(func(_ context.Context, t *asynq.Task) ratelimit.Identifier {
		return ratelimit.Identifier{"tenant": string(t.Payload())}
	}))
	errs, ran := run(t, mw, context.Background(), asynq.NewTask("a", []byte("acme")), 2)
	if ran != 1 || errs[0] != nil || IsFailure(errs[1]) || errs[1] == nil {
		t.Fatalf("ran %d, errors %v; want 1 run then a rate-limit error", ran, errs)
	}
	if fmt.Sprint(seen) != fmt.Sprint(ratelimit.Identifier{"tenant": "acme"}) {
		t.Fatalf("identifier = %v, want only tenant", seen)
	}
	if _, ran := run(t, mw, context.Background(), asynq.NewTask("a", []byte("globex")), 1); ran != 1 {
		t.Fatal("another tenant was blocked")
	}
}

// WithProperties adds to the identifier WithIdentifier built, as it does to
// DefaultIdentifier.
func TestWithPropertiesAfterWithIdentifier(t *testing.T) {
	var seen ratelimit.Identifier
	obs := func(_ context.Context, e ratelimit.Event) { seen = e.Identifier }
	l, err := ratelimit.New(ratelimit.Config{Name: "jobs", Store: ratelimit.NewMemoryStore(), Observer: obs,
		Rules: []ratelimit.Rule{rule("per_tenant_type", 1, time.Minute, ratelimit.ActionLimit, "tenant", "task_type")}})
	if err != nil {
		t.Fatal(err)
	}
	mw := Middleware(l,
		WithIdentifier(func(_ context.Context, t *asynq.Task) ratelimit.Identifier {
			return ratelimit.Identifier{"tenant": string(t.Payload())}
		}),
		WithProperties(func(_ context.Context, t *asynq.Task, id ratelimit.Identifier) { id["task_type"] = t.Type() }))
	errs, ran := run(t, mw, context.Background(), asynq.NewTask("a", []byte("acme")), 2)
	if ran != 1 || errs[0] != nil || errs[1] == nil {
		t.Fatalf("ran %d, errors %v; want 1 run then a rate-limit error", ran, errs)
	}
	if want := (ratelimit.Identifier{"tenant": "acme", "task_type": "a"}); fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("identifier = %v, want %v", seen, want)
	}
	if _, ran := run(t, mw, context.Background(), asynq.NewTask("b", []byte("acme")), 1); ran != 1 {
		t.Fatal("another task type of the tenant was blocked")
	}
}

// The clock of WithClock is read once per checked task, blocked or not, and
// RetryIn comes from that reading; a skipped task does not read it. The clock
// stands an hour back, so the reset is more than an hour away by it.
func TestClockReadOncePerTask(t *testing.T) {
	var reads atomic.Int64
	back := time.Now().Add(-time.Hour)
	l := newLimiter(t, "jobs", nil, rule("one", 1, time.Minute, ratelimit.ActionLimit))
	mw := Middleware(l,
		WithClock(func() time.Time { reads.Add(1); return back }),
		WithSkip(func(_ context.Context, t *asynq.Task) bool { return t.Type() == "critical" }))
	errs, ran := run(t, mw, context.Background(), asynq.NewTask("a", nil), 2)
	if ran != 1 || errs[0] != nil {
		t.Fatalf("ran %d, errors %v; want 1 run then a rate-limit error", ran, errs)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("clock read %d times for 2 tasks, want 2", n)
	}
	rl, ok := AsRateLimitError(errs[1])
	if !ok || rl.RetryIn < time.Hour+time.Minute {
		t.Fatalf("error %v, want RetryIn over 1h1m by the clock an hour back", errs[1])
	}
	if _, ran := run(t, mw, context.Background(), asynq.NewTask("critical", nil), 1); ran != 1 || reads.Load() != 2 {
		t.Fatalf("skipped task: ran %d, clock reads %d; want 1 and 2", ran, reads.Load())
	}
}

func TestCostLimiters(t *testing.T) {
	general := newLimiter(t, "jobs", nil, rule("many", 100, time.Minute, ratelimit.ActionLimit))
	t.Run("metered", func(t *testing.T) {
		db := newLimiter(t, "db", nil, rule("db_seconds", 5, time.Minute, ratelimit.ActionLimit, "task_type"))
		ran := 0
		h := Middleware(general, WithDeferred(Metered(db, "db_s")))(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			ran++
			adapter.AddCost(ctx, "db_s", 3)
			return nil
		}))
		task := asynq.NewTask("report", nil)
		for i := range 2 { // 3, then 6: over budget only after the second has run
			if err := h.ProcessTask(context.Background(), task); err != nil {
				t.Fatalf("task %d: %v", i+1, err)
			}
		}
		err := h.ProcessTask(context.Background(), task)
		rl, ok := AsRateLimitError(err)
		if !ok || rl.Limiter != "db" || rl.Rule != "db_seconds" || ran != 2 {
			t.Fatalf("third task: err %v, ran %d; want blocked by db/db_seconds before running", err, ran)
		}
		if res := db.Peek(context.Background(), ratelimit.Identifier{"task_type": "report"}, ratelimit.Cost(0)); res.Info.Count != 6 {
			t.Fatalf("db counter = %v, want 6", res.Info.Count)
		}
	})
	t.Run("outcome", func(t *testing.T) {
		failures := newLimiter(t, "partner_failures", nil, rule("failures", 2, time.Minute, ratelimit.ActionLimit))
		boom := errors.New("partner down")
		ran := 0
		h := Middleware(general, WithDeferred(CountFailures(failures)))(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
			ran++
			if string(t.Payload()) == "fail" {
				return boom
			}
			return nil
		}))
		ok, fail := asynq.NewTask("sync", []byte("ok")), asynq.NewTask("sync", []byte("fail"))
		for _, task := range []*asynq.Task{ok, ok, ok, fail, fail} {
			if err := h.ProcessTask(context.Background(), task); err != nil && !errors.Is(err, boom) {
				t.Fatalf("unexpected %v", err)
			}
		}
		err := h.ProcessTask(context.Background(), ok)
		if rl, limited := AsRateLimitError(err); !limited || rl.Rule != "failures" || ran != 5 {
			t.Fatalf("after 2 failures: err %v, ran %d; want a rate-limit error and 5 runs", err, ran)
		}
	})
	// asynq recovers a handler's panic as a failed task: the work metered
	// before it is charged, and the task counts as a failure.
	t.Run("handler panics", func(t *testing.T) {
		db := newLimiter(t, "db_panics", nil, rule("db_seconds", 100, time.Minute, ratelimit.ActionLimit, "task_type"))
		failures := newLimiter(t, "failures_panics", nil, rule("failures", 100, time.Minute, ratelimit.ActionLimit, "task_type"))
		h := Middleware(general, WithDeferred(Metered(db, "db_s"), CountFailures(failures)))(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			adapter.AddCost(ctx, "db_s", 3)
			panic("the handler's bug")
		}))
		func() {
			defer func() {
				if r := recover(); r != "the handler's bug" {
					t.Errorf("recovered %v, want the handler's panic", r)
				}
			}()
			_ = h.ProcessTask(context.Background(), asynq.NewTask("report", nil))
		}()
		id := ratelimit.Identifier{"task_type": "report"}
		if c := db.Peek(context.Background(), id, ratelimit.Cost(0)).Count(); c != 3 {
			t.Errorf("db counter = %v, want 3 (metered before the panic)", c)
		}
		if c := failures.Peek(context.Background(), id, ratelimit.Cost(0)).Count(); c != 1 {
			t.Errorf("failures counter = %v, want 1", c)
		}
	})
}
