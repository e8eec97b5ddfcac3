package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Run runs every conformance case against fresh harnesses from newHarness.
func Run(t *testing.T, newHarness NewHarness) {
	t.Run("Scenarios", func(t *testing.T) { RunScenarios(t, newHarness) })
	t.Run("ScenariosBatched", func(t *testing.T) { RunScenariosBatched(t, newHarness) })
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.runOn(t, newHarness(t)) })
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, h *Harness)
}

// runOn runs the case on a fresh harness h.
func (c *testCase) runOn(t *testing.T, h *Harness) {
	h.start = time.Now() // real time, whatever h's clock: see tolerance
	c.run(t, h)
}

var ctx = context.Background()

func limiter(t *testing.T, h *Harness, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	l, err := newLimiter(h, "conformance", ratelimit.Enforce, rules)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newLimiter returns a limiter named name on h's store, in mode.
func newLimiter(h *Harness, name string, mode ratelimit.Enforcement, rules []ratelimit.Rule) (*ratelimit.Limiter, error) {
	return ratelimit.New(ratelimit.Config{
		Name:        name,
		Store:       h.Store,
		Rules:       rules,
		KeyPrefix:   h.Prefix,
		Now:         h.Now,
		Timeout:     10 * time.Second, // the race detector is slow; fail-open has its own tests
		Breaker:     ratelimit.BreakerConfig{Failures: -1},
		Enforcement: mode,
	})
}

func rule(name string, limit int64, period time.Duration, chars ...string) ratelimit.Rule {
	return ratelimit.Rule{
		Name:            name,
		Characteristics: chars,
		Limit:           limit,
		Period:          period,
		Action:          ratelimit.ActionLimit,
	}
}

func with(r ratelimit.Rule, f func(*ratelimit.Rule)) ratelimit.Rule { f(&r); return r }

func logRule(r ratelimit.Rule) ratelimit.Rule {
	r.Action = ratelimit.ActionLog
	return r
}

type want struct {
	action    ratelimit.Verdict
	exceeded  bool
	rule      string // "" means nil
	count     float64
	remaining float64
	banned    bool
	noInfo    bool
}

func expect(t *testing.T, step string, r ratelimit.Result, w want) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("%s: unexpected error: %v", step, r.Err)
	}
	if r.Action != w.action || r.Exceeded != w.exceeded {
		t.Fatalf("%s: action=%s exceeded=%v, want action=%s exceeded=%v (%+v)", step, r.Action, r.Exceeded, w.action, w.exceeded, r)
	}
	got := ""
	if r.Rule != nil {
		got = r.Rule.Name
	}
	if got != w.rule {
		t.Fatalf("%s: rule=%q, want %q", step, got, w.rule)
	}
	if w.noInfo {
		if r.Info != nil {
			t.Fatalf("%s: info=%+v, want nil", step, r.Info)
		}
		return
	}
	if r.Info == nil {
		t.Fatalf("%s: info is nil", step)
	}
	if !near(r.Info.Count, w.count) || !near(r.Info.Remaining, w.remaining) || r.Info.Banned != w.banned {
		t.Fatalf("%s: count=%v remaining=%v banned=%v, want count=%v remaining=%v banned=%v",
			step, r.Info.Count, r.Info.Remaining, r.Info.Banned, w.count, w.remaining, w.banned)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// expectReset checks that ResetAt is d from now, within the harness tolerance.
func expectReset(t *testing.T, h *Harness, step string, r ratelimit.Result, d time.Duration) {
	t.Helper()
	if r.Info == nil {
		t.Fatalf("%s: no info", step)
	}
	got := r.Info.ResetAt.Sub(h.Now())
	tol := h.tolerance() // after now: it covers the real time up to it
	if got > d+10*time.Millisecond || got < d-tol-10*time.Millisecond {
		t.Fatalf("%s: reset in %v, want %v (tolerance %v)", step, got, d, tol)
	}
}

func checkN(t *testing.T, l *ratelimit.Limiter, id ratelimit.Identifier, n int, opts ...ratelimit.CheckOption) ratelimit.Result {
	t.Helper()
	var r ratelimit.Result
	for i := 0; i < n; i++ {
		r = l.Check(ctx, id, opts...)
		if r.Err != nil {
			t.Fatalf("check %d: %v", i+1, r.Err)
		}
	}
	return r
}

func evalOf(r ratelimit.Result, name string) *ratelimit.Evaluation {
	for i := range r.Evaluations {
		if r.Evaluations[i].Rule.Name == name {
			return &r.Evaluations[i]
		}
	}
	return nil
}

// countOf peeks (cost 0: no write) at the current count of one rule of l,
// through a limiter holding only that rule, so that no earlier rule's verdict
// stops the peek before it.
func countOf(t *testing.T, h *Harness, l *ratelimit.Limiter, id ratelimit.Identifier, name string) float64 {
	t.Helper()
	for _, r := range l.Rules() {
		if r.Name != name {
			continue
		}
		r.Match = nil
		res := limiter(t, h, r).Peek(ctx, id, ratelimit.Cost(0))
		if res.Err != nil || len(res.Evaluations) != 1 {
			t.Fatalf("peek %s: %+v", name, res)
		}
		return res.Evaluations[0].Info.Count
	}
	t.Fatalf("no rule %s", name)
	return 0
}

var user1 = ratelimit.Identifier{"user": "user:1", "ip": "203.0.113.7"}

var cases = []testCase{
	{"LimitAdmitsExactlyLimit", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 5, time.Minute, "user"))
		for i := 1; i <= 5; i++ {
			expect(t, fmt.Sprint("check ", i), l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "per_user", count: float64(i), remaining: float64(5 - i)})
		}
		r := l.Check(ctx, user1)
		expect(t, "6th", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 6, remaining: 0})
		if r.Info.Limit != 5 || r.Info.Period != time.Minute {
			t.Fatalf("resolved limit/period = %d/%v", r.Info.Limit, r.Info.Period)
		}
		expectReset(t, h, "6th", r, time.Minute)
		if !r.Evaluations[0].Blocked || len(r.Evaluations) != 1 {
			t.Fatalf("evaluations = %+v", r.Evaluations)
		}
	}},
	{"WindowStartsAtFirstHitAndIsNeverExtended", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 3, time.Minute, "user"))
		expectReset(t, h, "first", l.Check(ctx, user1), time.Minute)
		h.Advance(t, 20*time.Second)
		expectReset(t, h, "second", l.Check(ctx, user1), 40*time.Second)
		h.Advance(t, 20*time.Second)
		r := checkN(t, l, user1, 2)
		expect(t, "4th", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 4})
		expectReset(t, h, "4th", r, 20*time.Second)
	}},
	{"WindowResets", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 2, time.Minute, "user"))
		expect(t, "exhausted", checkN(t, l, user1, 3), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 3})
		h.Advance(t, time.Minute)
		expect(t, "new window", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "per_user", count: 1, remaining: 1})
	}},
	{"CharacteristicsScopeCounters", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 1, time.Minute, "user"))
		expect(t, "u1", l.Check(ctx, ratelimit.Identifier{"user": "a"}), want{action: ratelimit.ActionAllow, rule: "per_user", count: 1})
		expect(t, "u2", l.Check(ctx, ratelimit.Identifier{"user": "b"}), want{action: ratelimit.ActionAllow, rule: "per_user", count: 1})
		expect(t, "u1 again", l.Check(ctx, ratelimit.Identifier{"user": "a"}), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 2})
		// integers and their decimal strings are one caller
		expect(t, "int 7", l.Check(ctx, ratelimit.Identifier{"user": 7}), want{action: ratelimit.ActionAllow, rule: "per_user", count: 1})
		expect(t, "string 7", l.Check(ctx, ratelimit.Identifier{"user": "7"}), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 2})
		// a rule whose characteristic is missing does not apply: no shared bucket
		for _, id := range []ratelimit.Identifier{{}, {"user": nil}} {
			r := l.Check(ctx, id)
			expect(t, "missing", r, want{action: ratelimit.ActionAllow, noInfo: true})
			if !r.Degraded || len(r.Evaluations) != 0 {
				t.Fatalf("missing characteristic: want degraded and no evaluation, got %+v", r)
			}
		}
		// with CountMissing, identifiers lacking the property share the sentinel
		// counter, apart from the empty string
		l = limiter(t, h, with(rule("per_user_or_missing", 1, time.Minute, "user"), func(r *ratelimit.Rule) { r.CountMissing = true }))
		expect(t, "missing", l.Check(ctx, ratelimit.Identifier{}), want{action: ratelimit.ActionAllow, rule: "per_user_or_missing", count: 1})
		expect(t, "nil", l.Check(ctx, ratelimit.Identifier{"user": nil}), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user_or_missing", count: 2})
		expect(t, "empty", l.Check(ctx, ratelimit.Identifier{"user": ""}), want{action: ratelimit.ActionAllow, rule: "per_user_or_missing", count: 1})
	}},
	{"KeyEncodingKeepsLookalikeIdentifiersApart", func(t *testing.T, h *Harness) {
		l := limiter(t, h, with(rule("pair", 1, time.Minute, "a", "b"), func(r *ratelimit.Rule) { r.CountMissing = true }))
		long := strings.Repeat("x", 300)
		ids := []ratelimit.Identifier{
			{"a": "1:b=2", "b": "3"},
			{"a": "1", "b": "2:b=3"},
			{"a": "2001:db8::1", "b": "{x}"},
			{"a": "2001:db8::1", "b": "x"},
			{"a": "2001:db8:", "b": ":1"},
			{"a": "!", "b": "x"},
			{"b": "x"},
			{"a": "%21", "b": "x"},
			{"a": long + "1", "b": "x"},
			{"a": long + "2", "b": "x"},
			{"a": "日本", "b": "x"},
		}
		for i, id := range ids {
			expect(t, fmt.Sprint("id ", i), l.Check(ctx, id), want{action: ratelimit.ActionAllow, rule: "pair", count: 1})
		}
	}},
	{"NoMatchAllows", func(t *testing.T, h *Harness) {
		l := limiter(t, h, with(rule("api_only", 1, time.Minute, "user"), func(r *ratelimit.Rule) {
			r.Match = map[string]ratelimit.Matcher{"request_type": ratelimit.Equal("api")}
		}))
		r := l.Check(ctx, user1)
		expect(t, "no match", r, want{action: ratelimit.ActionAllow, noInfo: true})
		if r.Matched || len(r.Evaluations) != 0 {
			t.Fatalf("matched=%v evaluations=%v", r.Matched, r.Evaluations)
		}
	}},
	{"MatchForms", func(t *testing.T, h *Harness) {
		l := limiter(t, h,
			with(rule("eq", 100, time.Minute), func(r *ratelimit.Rule) {
				r.Match = map[string]ratelimit.Matcher{"plan": ratelimit.Equal("free")}
			}),
			with(rule("re", 100, time.Minute), func(r *ratelimit.Rule) {
				r.Match = map[string]ratelimit.Matcher{"path": ratelimit.Regex(`^/api/v\d+/projects`)}
			}),
			with(rule("set", 100, time.Minute), func(r *ratelimit.Rule) {
				r.Match = map[string]ratelimit.Matcher{"method": ratelimit.OneOf("POST", "PUT")}
			}),
			with(rule("all", 100, time.Minute), func(r *ratelimit.Rule) {
				r.Match = map[string]ratelimit.Matcher{"plan": ratelimit.Equal("free"), "method": ratelimit.Equal("GET")}
			}),
		)
		tests := []struct {
			id   ratelimit.Identifier
			want []string
		}{
			{ratelimit.Identifier{"plan": "free"}, []string{"eq"}},
			{ratelimit.Identifier{"plan": "premium", "path": "/api/v4/projects/1"}, []string{"re"}},
			{ratelimit.Identifier{"path": "/web/api/v4/projects"}, nil},
			{ratelimit.Identifier{"method": "PUT"}, []string{"set"}},
			{ratelimit.Identifier{"method": "GET", "plan": "free"}, []string{"eq", "all"}},
			{ratelimit.Identifier{"method": "GET"}, nil},
		}
		for i, tt := range tests {
			r := l.Check(ctx, tt.id)
			var got []string
			for _, e := range r.Evaluations {
				got = append(got, e.Rule.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || r.Matched != (len(tt.want) > 0) {
				t.Errorf("case %d %v: evaluated %v (matched %v), want %v", i, tt.id, got, r.Matched, tt.want)
			}
		}
	}},
	{"SkipIsTerminalAndCountsNothing", func(t *testing.T, h *Harness) {
		l := limiter(t, h,
			with(rule("bypass", 0, 0), func(r *ratelimit.Rule) {
				r.Action = ratelimit.ActionSkip
				r.Limit, r.Period = 0, 0
				r.Match = map[string]ratelimit.Matcher{"bypass": ratelimit.Equal("1")}
			}),
			rule("per_user", 1, time.Minute, "user"),
		)
		id := ratelimit.Identifier{"user": "u", "bypass": "1"}
		for i := 0; i < 3; i++ {
			r := l.Check(ctx, id)
			expect(t, "skip", r, want{action: ratelimit.ActionAllow, rule: "bypass", noInfo: true})
			if !r.Skipped || !r.Matched || len(r.Evaluations) != 0 {
				t.Fatalf("skip result = %+v", r)
			}
		}
		if n := countOf(t, h, l, ratelimit.Identifier{"user": "u"}, "per_user"); n != 0 {
			t.Fatalf("per_user counted %v while skipped", n)
		}
		if n, err := l.Clear(ctx, id); err != nil || n != 0 {
			t.Fatalf("skip created keys: clear removed %d (%v)", n, err)
		}
	}},
	{"SkipAfterCountingRule", func(t *testing.T, h *Harness) {
		skip := ratelimit.Rule{Name: "claim", Action: ratelimit.ActionSkip}
		l := limiter(t, h, rule("first", 2, time.Minute, "user"), skip, rule("never", 1, time.Minute, "user"))
		r := l.Check(ctx, user1)
		expect(t, "1", r, want{action: ratelimit.ActionAllow, rule: "claim", noInfo: true})
		if len(r.Evaluations) != 1 || r.Evaluations[0].Rule.Name != "first" || r.Evaluations[0].Info.Count != 1 {
			t.Fatalf("evaluations = %+v", r.Evaluations)
		}
		checkN(t, l, user1, 1)
		r = l.Check(ctx, user1)
		expect(t, "blocked before the skip", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "first", count: 3})
		if r.Skipped {
			t.Fatal("a block must end evaluation before a later skip")
		}
	}},
	{"LogRuleIsShadow", func(t *testing.T, h *Harness) {
		l := limiter(t, h, logRule(rule("shadow", 2, time.Minute, "user")), rule("enforced", 10, time.Minute, "user"))
		checkN(t, l, user1, 2)
		r := l.Check(ctx, user1)
		expect(t, "3rd", r, want{action: ratelimit.ActionAllow, exceeded: true, rule: "shadow", count: 3, remaining: 0})
		if e := evalOf(r, "enforced"); e == nil || e.Info.Count != 3 || e.Exceeded || e.Blocked {
			t.Fatalf("enforced evaluation = %+v", e)
		}
		if e := r.Enforcing(); e == nil || e.Rule.Name != "enforced" {
			t.Fatalf("Enforcing() = %+v", e)
		}
	}},
	{"BlockStopsLaterRules", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("tight", 1, time.Minute, "user"), logRule(rule("later_log", 100, time.Minute, "user")), rule("later", 100, time.Minute, "user"))
		checkN(t, l, user1, 1)
		r := l.Check(ctx, user1)
		expect(t, "blocked", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "tight", count: 2})
		if len(r.Evaluations) != 1 {
			t.Fatalf("rules after the block were evaluated: %+v", r.Evaluations)
		}
		for _, name := range []string{"later_log", "later"} {
			if n := countOf(t, h, l, user1, name); n != 1 {
				t.Fatalf("%s count = %v, want 1 (not charged after the block)", name, n)
			}
		}
	}},
	{"MultipleLimitRulesAllMustPass", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 2, time.Minute, "user"), rule("per_org", 3, time.Minute, "org"))
		a := ratelimit.Identifier{"user": "a", "org": "o"}
		b := ratelimit.Identifier{"user": "b", "org": "o"}
		checkN(t, l, a, 2)
		expect(t, "user limit", l.Check(ctx, a), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 3})
		r := l.Check(ctx, b)
		expect(t, "org at limit", r, want{action: ratelimit.ActionAllow, rule: "per_org", count: 3, remaining: 0})
		expect(t, "org limit", l.Check(ctx, b), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_org", count: 4})
	}},
	{"MostConstrainingRanking", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("loose", 10, time.Minute, "user"), rule("tight", 4, time.Minute, "user"), rule("tight_too", 4, time.Minute, "user"))
		expect(t, "least remaining, first on ties", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "tight", count: 1, remaining: 3})
		lg := limiter(t, h, logRule(rule("shadow", 1, time.Minute, "ip")), rule("enforced", 2, time.Minute, "ip"))
		checkN(t, lg, user1, 1)
		expect(t, "exceeded before remaining", lg.Check(ctx, user1), want{action: ratelimit.ActionAllow, exceeded: true, rule: "shadow", count: 2})
		expect(t, "blocking first", lg.Check(ctx, user1), want{action: ratelimit.ActionBlock, exceeded: true, rule: "enforced", count: 3})
	}},
	{"BanOutlivesWindowAndSuppressesCounting", func(t *testing.T, h *Harness) {
		l := limiter(t, h, with(rule("login", 2, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = 10 * time.Minute }))
		checkN(t, l, user1, 2)
		r := l.Check(ctx, user1)
		expect(t, "ban starts", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "login", count: 3, banned: true})
		expectReset(t, h, "ban starts", r, 10*time.Minute)
		r = checkN(t, l, user1, 3)
		expect(t, "banned retries do not count", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "login", count: 3, banned: true})
		h.Advance(t, 2*time.Minute)
		r = l.Check(ctx, user1)
		expect(t, "window gone, ban stays", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "login", count: 0, remaining: 0, banned: true}) // nothing remains while banned
		expectReset(t, h, "window gone", r, 8*time.Minute)
		h.Advance(t, 8*time.Minute)
		expect(t, "ban over", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "login", count: 1, remaining: 1})
	}},
	{"ShadowBan", func(t *testing.T, h *Harness) {
		l := limiter(t, h, logRule(with(rule("login", 1, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = 5 * time.Minute })))
		checkN(t, l, user1, 1)
		r := l.Check(ctx, user1)
		expect(t, "shadow ban starts", r, want{action: ratelimit.ActionAllow, exceeded: true, rule: "login", count: 2, banned: true})
		expectReset(t, h, "shadow ban", r, 5*time.Minute)
		expect(t, "shadow banned: no count", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, exceeded: true, rule: "login", count: 2, banned: true})
		if n, err := l.Clear(ctx, user1); err != nil || n != 2 {
			t.Fatalf("clear = %d, %v; want counter and shadow ban", n, err)
		}
		expect(t, "cleared", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "login", count: 1})
	}},
	{"FractionalCost", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("db_seconds", 1, time.Minute, "namespace"))
		id := ratelimit.Identifier{"namespace": "ns"}
		for i := 1; i <= 4; i++ {
			expect(t, fmt.Sprint("quarter ", i), l.Check(ctx, id, ratelimit.Cost(0.25)),
				want{action: ratelimit.ActionAllow, rule: "db_seconds", count: 0.25 * float64(i), remaining: 1 - 0.25*float64(i)})
		}
		expect(t, "over", l.Check(ctx, id, ratelimit.Cost(0.5)), want{action: ratelimit.ActionBlock, exceeded: true, rule: "db_seconds", count: 1.5})
		expect(t, "default cost 1", l.Check(ctx, ratelimit.Identifier{"namespace": "other"}, ratelimit.Cost(1.125)),
			want{action: ratelimit.ActionBlock, exceeded: true, rule: "db_seconds", count: 1.125})
	}},
	{"FractionalCostsAddUpToALargeLimit", func(t *testing.T, h *Harness) {
		// Costs that add up to the limit stay within it at any limit, not
		// only where 1e-9 is more than a float64's rounding: at a limit of
		// 10^9 (one a config file takes) the sum of 999999999, 0.1, 0.2 and
		// 0.7 is 1000000000.0000001, and the last cost was blocked in every
		// store. A whole unit more is still over the limit.
		const limit = 1_000_000_000
		for _, tc := range []struct {
			algorithm ratelimit.Algorithm
			period    time.Duration
			costs     []float64
			over      float64 // then blocked
		}{
			{ratelimit.FixedWindow, time.Hour, []float64{limit - 1, 0.1, 0.2, 0.7}, 1},
			{ratelimit.SlidingWindow, time.Hour, []float64{limit - 1, 0.1, 0.2, 0.7}, 1},
			// A bucket sums time, not costs: another sum rounds up. Refilled
			// at 10^9 a century, a token every 3.2 s: 1,000 of them come
			// back in 53 minutes, longer than a store on Redis takes
			// between two checks in real time.
			{ratelimit.TokenBucket, 100 * 365 * 24 * time.Hour, []float64{limit - 1, 0.2, 0.1, 0.7}, 1000},
		} {
			r := rule(string(tc.algorithm), limit, tc.period, "user")
			r.Algorithm = tc.algorithm
			l := limiter(t, h, r)
			for i, c := range tc.costs {
				if res := l.Check(ctx, user1, ratelimit.Cost(c)); res.Err != nil || res.Action != ratelimit.ActionAllow {
					t.Fatalf("%s: cost #%d (%v) of %v: %+v, want it admitted", tc.algorithm, i+1, c, tc.costs, res)
				}
			}
			if res := l.Check(ctx, user1, ratelimit.Cost(tc.over)); res.Err != nil || res.Action != ratelimit.ActionBlock {
				t.Fatalf("%s: cost %v at the limit: %+v, want a block", tc.algorithm, tc.over, res)
			}
		}
	}},
	{"CostZeroCreatesNoKey", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 1, time.Minute, "user"))
		expect(t, "cost 0", l.Check(ctx, user1, ratelimit.Cost(0)), want{action: ratelimit.ActionAllow, rule: "per_user", count: 0, remaining: 1})
		if n, err := l.Clear(ctx, user1); err != nil || n != 0 {
			t.Fatalf("cost 0 created %d keys (%v)", n, err)
		}
		checkN(t, l, user1, 2)
		expect(t, "cost 0 reads the verdict", l.Check(ctx, user1, ratelimit.Cost(0)), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 2})
		if r := l.Check(ctx, user1, ratelimit.Cost(-1)); r.Err == nil || r.Action != ratelimit.ActionAllow {
			t.Fatalf("negative cost: %+v", r)
		}
	}},
	{"CountDistinct", func(t *testing.T, h *Harness) {
		l := limiter(t, h, with(rule("users_per_ip", 2, time.Hour, "ip"), func(r *ratelimit.Rule) { r.CountDistinct = "username" }))
		id := func(u string) ratelimit.Identifier { return ratelimit.Identifier{"ip": "198.51.100.1", "username": u} }
		expect(t, "a", l.Check(ctx, id("a")), want{action: ratelimit.ActionAllow, rule: "users_per_ip", count: 1, remaining: 1})
		expect(t, "b", l.Check(ctx, id("b")), want{action: ratelimit.ActionAllow, rule: "users_per_ip", count: 2, remaining: 0})
		expect(t, "a again", l.Check(ctx, id("a"), ratelimit.Cost(5)), want{action: ratelimit.ActionAllow, rule: "users_per_ip", count: 2, remaining: 0})
		expect(t, "peek known", l.Peek(ctx, id("b")), want{action: ratelimit.ActionAllow, rule: "users_per_ip", count: 2, remaining: 0})
		expect(t, "peek new", l.Peek(ctx, id("c")), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 2, remaining: 0})
		expect(t, "c", l.Check(ctx, id("c")), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 3})
		expectReset(t, h, "c", l.Check(ctx, id("c")), time.Hour)
	}},
	{"CountDistinctMissingPropertyDegrades", func(t *testing.T, h *Harness) {
		l := limiter(t, h,
			with(rule("users_per_ip", 1, time.Hour, "ip"), func(r *ratelimit.Rule) { r.CountDistinct = "username" }),
			rule("per_ip", 5, time.Minute, "ip"))
		r := l.Check(ctx, ratelimit.Identifier{"ip": "198.51.100.2"})
		expect(t, "degraded", r, want{action: ratelimit.ActionAllow, rule: "per_ip", count: 1, remaining: 4})
		if !r.Degraded || len(r.Evaluations) != 1 {
			t.Fatalf("degraded=%v evaluations=%+v", r.Degraded, r.Evaluations)
		}
	}},
	{"PeekGivesCheckVerdictWithoutMutating", func(t *testing.T, h *Harness) {
		l := limiter(t, h, rule("per_user", 3, time.Minute, "user"), with(rule("ban", 100, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = time.Hour }))
		for i := 0; i < 5; i++ {
			expect(t, "fresh peek", l.Peek(ctx, user1), want{action: ratelimit.ActionAllow, rule: "per_user", count: 0, remaining: 3})
		}
		if n, err := l.Clear(ctx, user1); err != nil || n != 0 {
			t.Fatalf("peek created %d keys (%v)", n, err)
		}
		checkN(t, l, user1, 2)
		expect(t, "peek at 2", l.Peek(ctx, user1), want{action: ratelimit.ActionAllow, rule: "per_user", count: 2, remaining: 1})
		expect(t, "peek cost 2 at 2", l.Peek(ctx, user1, ratelimit.Cost(2)), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 2, remaining: 1})
		checkN(t, l, user1, 1)
		expect(t, "peek at limit: next check blocks", l.Peek(ctx, user1), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 3})
		expect(t, "peek cost 0: not yet over", l.Peek(ctx, user1, ratelimit.Cost(0)), want{action: ratelimit.ActionAllow, rule: "per_user", count: 3})
		expect(t, "check agrees", l.Check(ctx, user1), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 4})
		expectReset(t, h, "peek keeps the window", l.Peek(ctx, user1), time.Minute)
		if n := countOf(t, h, l, user1, "ban"); n != 3 {
			t.Fatalf("ban rule count = %v, want 3", n)
		}
		lb := limiter(t, h, with(rule("login", 1, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = time.Hour }))
		checkN(t, lb, user1, 2)
		r := lb.Peek(ctx, user1)
		expect(t, "peek while banned", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "login", count: 2, banned: true})
		expectReset(t, h, "peek ban", r, time.Hour)
	}},
	{"ClearRemovesCountersAndBansOfEveryRule", func(t *testing.T, h *Harness) {
		l := limiter(t, h,
			with(rule("login", 1, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = time.Hour }),
			logRule(with(rule("shadow", 1, time.Minute, "ip"), func(r *ratelimit.Rule) { r.BanFor = time.Hour })),
			with(rule("api", 10, time.Minute, "ip"), func(r *ratelimit.Rule) {
				r.Match = map[string]ratelimit.Matcher{"request_type": ratelimit.Equal("api")}
			}),
		)
		api := ratelimit.Identifier{"ip": "203.0.113.7", "request_type": "api"}
		l.Check(ctx, api) // login 1, shadow 1, api 1
		r := l.Check(ctx, api)
		expect(t, "banned", r, want{action: ratelimit.ActionBlock, exceeded: true, rule: "login", count: 2, banned: true})
		n, err := l.Clear(ctx, user1) // not matching the api rule: cleared anyway
		if err != nil || n != 4 {
			t.Fatalf("clear removed %d keys (%v), want 4 (login counter+ban, shadow, api)", n, err)
		}
		expect(t, "fresh", l.Check(ctx, api), want{action: ratelimit.ActionAllow, rule: "login", count: 1, remaining: 0})
		if n, err := l.Clear(ctx, ratelimit.Identifier{"ip": "192.0.2.99"}); err != nil || n != 0 {
			t.Fatalf("clear of unknown identifier = %d, %v", n, err)
		}
	}},
	{"ResolvedLimitAndPeriod", func(t *testing.T, h *Harness) {
		var limit atomic.Int64
		limit.Store(2)
		r := ratelimit.Rule{
			Name:            "dynamic",
			Characteristics: []string{"user"},
			LimitFunc:       func(context.Context) (int64, error) { return limit.Load(), nil },
			PeriodFunc:      func(context.Context) (time.Duration, error) { return 30 * time.Second, nil },
		}
		l := limiter(t, h, r)
		res := checkN(t, l, user1, 3)
		expect(t, "limit 2", res, want{action: ratelimit.ActionBlock, exceeded: true, rule: "dynamic", count: 3})
		if res.Info.Period != 30*time.Second || res.Info.Limit != 2 {
			t.Fatalf("info = %+v", res.Info)
		}
		limit.Store(10)
		expect(t, "raised to 10", l.Check(ctx, user1), want{action: ratelimit.ActionAllow, rule: "dynamic", count: 4, remaining: 6})
		limit.Store(0)
		expect(t, "0 denies all", l.Check(ctx, ratelimit.Identifier{"user": "new"}), want{action: ratelimit.ActionBlock, exceeded: true, rule: "dynamic", count: 1})
		bad := r
		bad.Name = "broken"
		bad.LimitFunc = func(context.Context) (int64, error) { return 0, errors.New("settings unavailable") }
		lb := limiter(t, h, bad)
		if res := lb.Check(ctx, user1); res.Err == nil || res.Action != ratelimit.ActionAllow || res.Info != nil {
			t.Fatalf("resolver error must fail open: %+v", res)
		}
	}},
	{"OverrideBetweenKindsStartsAFreshCounter", func(t *testing.T, h *Harness) {
		// A higher tier replaces a rule by name: the same counting kind inherits
		// the counter, the other kind starts a fresh one (never a crash, never a
		// wrong-type error that disables the limiter).
		volume := rule("login", 2, time.Minute, "ip")
		distinct := with(volume, func(r *ratelimit.Rule) { r.CountDistinct = "username" })
		id := ratelimit.Identifier{"ip": "192.0.2.1", "username": "alice"}
		l := limiter(t, h, volume)
		expect(t, "volume 1", l.Check(ctx, id), want{action: ratelimit.ActionAllow, rule: "login", count: 1, remaining: 1})
		for i, step := range []struct {
			rule ratelimit.Rule
			want want
		}{
			{distinct, want{action: ratelimit.ActionAllow, rule: "login", count: 1, remaining: 1}},
			{volume, want{action: ratelimit.ActionAllow, rule: "login", count: 2, remaining: 0}},
			{distinct, want{action: ratelimit.ActionAllow, rule: "login", count: 1, remaining: 1}},
			{with(volume, func(r *ratelimit.Rule) { r.Limit = 5 }), want{action: ratelimit.ActionAllow, rule: "login", count: 3, remaining: 2}},
		} {
			if err := l.SetRules([]ratelimit.Rule{step.rule}); err != nil {
				t.Fatal(err)
			}
			expect(t, fmt.Sprint("override ", i), l.Check(ctx, id), step.want)
			expect(t, fmt.Sprint("peek ", i), l.Peek(ctx, id, ratelimit.Cost(0)), step.want)
		}
	}},
	{"DistinctSetStopsGrowingOverItsLimit", func(t *testing.T, h *Harness) {
		l := limiter(t, h, with(rule("users_per_ip", 3, time.Minute, "ip"), func(r *ratelimit.Rule) { r.CountDistinct = "username" }))
		at := func(name string) ratelimit.Identifier {
			return ratelimit.Identifier{"ip": "192.0.2.2", "username": name}
		}
		for i := range 3 {
			expect(t, fmt.Sprint("user ", i), l.Check(ctx, at(fmt.Sprint("u", i))), want{action: ratelimit.ActionAllow, rule: "users_per_ip", count: float64(i + 1), remaining: float64(2 - i)})
		}
		expect(t, "4th user", l.Check(ctx, at("u3")), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 4})
		for i := 4; i < 40; i++ {
			expect(t, fmt.Sprint("user ", i), l.Check(ctx, at(fmt.Sprint("u", i))), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 4})
		}
		expect(t, "known user", l.Check(ctx, at("u0")), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 4})
		expect(t, "peek", l.Peek(ctx, at("new")), want{action: ratelimit.ActionBlock, exceeded: true, rule: "users_per_ip", count: 4})
	}},
	{"BlockedCallerChargesNoLaterRule", func(t *testing.T, h *Harness) {
		// A caller blocked by an early rule must not count on later rules, on
		// any store: its neighbours' verdicts equal sequential evaluation. On
		// Redis Cluster the two rules live in different slots.
		const rounds, fresh, hammers = 20, 50, 32
		for round := range rounds {
			global := fmt.Sprint("global_", round)
			l := limiter(t, h,
				rule("per_user", 1, time.Minute, "user"),
				with(rule(global, fresh+1, time.Minute), func(r *ratelimit.Rule) { r.BanFor = 10 * time.Second }))
			x := ratelimit.Identifier{"user": fmt.Sprint("hammer_", round)}
			expect(t, "x first", l.Check(ctx, x), want{action: ratelimit.ActionAllow, rule: "per_user", count: 1, remaining: 0})
			expect(t, "x blocked", l.Check(ctx, x), want{action: ratelimit.ActionBlock, exceeded: true, rule: "per_user", count: 2})
			var stop atomic.Bool
			var hammer sync.WaitGroup
			var admittedX atomic.Int64
			for range hammers {
				hammer.Add(1)
				go func() {
					defer hammer.Done()
					for !stop.Load() {
						if r := l.Check(ctx, x); r.Action != ratelimit.ActionBlock || r.Err != nil {
							admittedX.Add(1)
						}
					}
				}()
			}
			var admitted atomic.Int64
			var users sync.WaitGroup
			for u := range fresh {
				users.Add(1)
				go func() {
					defer users.Done()
					r := l.Check(ctx, ratelimit.Identifier{"user": fmt.Sprint("fresh_", round, "_", u)})
					if r.Err != nil {
						t.Error(r.Err)
					}
					if r.Action == ratelimit.ActionAllow {
						admitted.Add(1)
					}
				}()
			}
			users.Wait()
			stop.Store(true)
			hammer.Wait()
			if admitted.Load() != fresh || admittedX.Load() != 0 {
				t.Fatalf("round %d: %d of %d fresh users admitted, hammering user admitted %d times", round, admitted.Load(), fresh, admittedX.Load())
			}
			next := l.Peek(ctx, ratelimit.Identifier{"user": "next"})
			if ev := evalOf(next, global); ev == nil || ev.Info.Banned || ev.Info.Count != fresh+1 {
				t.Fatalf("round %d: global after the round: %+v", round, next)
			}
		}
	}},
	{"NonFiniteCostRefusedWhole", func(t *testing.T, h *Harness) {
		// A Limiter never sends such a cost (it fails the check open), but a
		// caller of the Store may: every store refuses the call before it
		// writes anything. The memory store added +Inf to its counter, which
		// then read over every limit for the rest of its window, where Redis
		// refused the call.
		op := func(key string, kind ratelimit.OpKind, cost float64) ratelimit.Op {
			return ratelimit.Op{Kind: kind, Key: h.Prefix + "{nonfinite}:" + key, Cost: cost, Limit: 10, Period: time.Minute, Burst: 10}
		}
		for _, cost := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			for _, mode := range []ratelimit.Mode{ratelimit.ModeCheck, ratelimit.ModePeek} {
				ops := []ratelimit.Op{op("fixed", ratelimit.OpCount, 1), op("sliding", ratelimit.OpSliding, 1), op("bucket", ratelimit.OpTokenBucket, 1), op("bad", ratelimit.OpCount, cost)}
				if _, err := h.Store.Eval(ctx, mode, ops); err == nil {
					t.Errorf("Eval (%s) of a cost of %v: no error", mode, cost)
				}
				if b, ok := h.Store.(ratelimit.BatchStore); ok {
					if _, err := b.EvalBatch(ctx, mode, [][]ratelimit.Op{ops[:1], ops[1:]}); err == nil {
						t.Errorf("EvalBatch (%s) of a cost of %v: no error", mode, cost)
					}
				}
			}
		}
		read := []ratelimit.Op{op("fixed", ratelimit.OpCount, 0), op("sliding", ratelimit.OpSliding, 0), op("bucket", ratelimit.OpTokenBucket, 0), op("bad", ratelimit.OpCount, 0)}
		outs, err := h.Store.Eval(ctx, ratelimit.ModePeek, read)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range outs {
			if o.Count != 0 || o.Exceeded {
				t.Errorf("%s after the refused calls: %+v, want nothing written", read[i].Key, o)
			}
		}
	}},
	{"ConcurrentAdmissionIsExact", func(t *testing.T, h *Harness) {
		const limit, workers, each = 100, 64, 4
		l := limiter(t, h, rule("per_user", limit, time.Minute, "user"), logRule(rule("shadow", 1000, time.Minute, "user")))
		var allowed, blocked atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					r := l.Check(ctx, user1)
					if r.Err != nil {
						errs <- r.Err
						return
					}
					if r.Action == ratelimit.ActionAllow {
						allowed.Add(1)
					} else {
						blocked.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if allowed.Load() != limit || blocked.Load() != workers*each-limit {
			t.Fatalf("allowed %d blocked %d, want exactly %d allowed", allowed.Load(), blocked.Load(), limit)
		}
		if n := countOf(t, h, l, user1, "per_user"); n != workers*each {
			t.Fatalf("counter = %v, want %d", n, workers*each)
		}
		if n := countOf(t, h, l, user1, "shadow"); n != limit {
			t.Fatalf("shadow counter = %v, want %d (charged only when not blocked before it)", n, limit)
		}
	}},
}
