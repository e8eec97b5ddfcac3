package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestDifferentialLimiters is TestDifferential one level up: limiters of
// random rules (every algorithm and action, bans, distinct counts, limits
// of 0 and near the bounds, several limiters of one name sharing counters)
// run one seeded sequence of checks, peeks, clears and batches on the
// memory store and on each Redis target, and every result must be the same:
// verdict, the rule that decided it, every evaluation's count, remaining,
// ban and reset. It runs with the blocked cache off, and on until each
// block ends (no MaxAge, which would make the answers depend on time).
func TestDifferentialLimiters(t *testing.T) {
	steps, seed := diffSettings(t)
	for _, tg := range diffTargets() {
		t.Run(tg.name, func(t *testing.T) {
			s, c := tg.store(t)
			for _, cache := range []ratelimit.BlockedCacheConfig{{Size: -1}, {MaxAge: -1, OverLimit: true}} {
				t.Run(fmt.Sprintf("cache_%d", cache.Size), func(t *testing.T) {
					differentialLimiters(t, s, c, cache, steps, seed)
				})
			}
		})
	}
}

// diffLimiterGen draws the rules and the requests of the test.
type diffLimiterGen struct{ rng *rand.Rand }

func (g *diffLimiterGen) pick(n int) int { return g.rng.IntN(n) }

// diffRuleNames are few, so that two limiters of one name share counters.
var diffRuleNames = []string{"r1", "r2", "r3", "r4"}

// rules draws one limiter's rule list.
func (g *diffLimiterGen) rules() []ratelimit.Rule {
	names := slices.Clone(diffRuleNames)
	g.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	rules := make([]ratelimit.Rule, 1+g.pick(len(names)))
	for i := range rules {
		rules[i] = g.rule(names[i])
	}
	return rules
}

// rule draws one rule named name. A rule's period depends on its name and
// algorithm alone: a key keeps one period in every store.
func (g *diffLimiterGen) rule(name string) ratelimit.Rule {
	r := ratelimit.Rule{Name: name, Characteristics: []string{"user"}}
	switch g.pick(8) {
	case 0:
		r.Action = ratelimit.ActionSkip
		r.Characteristics = nil
		r.Match = map[string]ratelimit.Matcher{"path": ratelimit.Equal("/c")}
		return r
	case 1, 2:
		r.Action = ratelimit.ActionLog
	default:
		r.Action = ratelimit.ActionLimit
	}
	switch g.pick(4) {
	case 0:
		r.Characteristics = []string{"ip"}
	case 1:
		r.Characteristics = []string{"user", "ip"}
	}
	if g.pick(4) == 0 {
		r.Match = map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/a", "/b")}
	}
	alg := g.pick(3)
	r.Period = time.Duration(1+slices.Index(diffRuleNames, name)+alg) * diffWindow
	switch alg {
	case 1:
		r.Algorithm = ratelimit.SlidingWindow
	case 2:
		r.Algorithm = ratelimit.TokenBucket
		r.Period = diffBucket
		if g.pick(3) == 0 {
			r.Burst = []int64{1, 2, 5, ratelimit.MaxBurst}[g.pick(4)]
		}
	}
	r.Limit = []int64{1, 2, 3, 5, 20}[g.pick(5)]
	if g.pick(6) == 0 && alg != 2 {
		r.Limit = []int64{1 << 31, ratelimit.MaxCount - 1, ratelimit.MaxCount}[g.pick(3)]
		if g.pick(3) == 0 {
			// Over MaxCount only a LimitFunc goes: it counts as MaxCount.
			n := []int64{ratelimit.MaxCount + 1, math.MaxInt64}[g.pick(2)]
			r.Limit, r.LimitFunc = 0, func(context.Context) (int64, error) { return n, nil }
		}
	}
	if g.pick(8) == 0 {
		// A limit of 0 denies all: only a LimitFunc gives one.
		r.Limit, r.LimitFunc = 0, func(context.Context) (int64, error) { return 0, nil }
	}
	if alg == 0 && g.pick(4) == 0 {
		r.CountDistinct = "path"
	} else if g.pick(3) == 0 {
		r.BanFor = time.Duration(1+g.pick(3)) * diffWindow
	}
	return r
}

// identifier draws an identifier; ip and path may be missing.
func (g *diffLimiterGen) identifier() ratelimit.Identifier {
	id := ratelimit.Identifier{"user": []string{"u1", "u2", "u3"}[g.pick(3)]}
	if g.pick(4) > 0 {
		id["ip"] = []string{"192.0.2.1", "192.0.2.2"}[g.pick(2)]
	}
	if p := g.pick(5); p < 4 {
		id["path"] = []string{"/a", "/b", "/c", "/d"}[p]
	}
	return id
}

// cost draws a check's cost: whole, fractional, 0, or large: near
// MaxCount and over it (counted as MaxCount + 1), so that counters pass
// 2^53, where the memory store's float64 stops holding whole counts, and
// fractions come after large costs, where it holds no half.
func (g *diffLimiterGen) cost() float64 {
	if g.pick(8) == 0 {
		return []float64{1 << 31, 1 << 52, ratelimit.MaxCount - 1, ratelimit.MaxCount, ratelimit.MaxCount + 1, 1e19, 1e300}[g.pick(7)]
	}
	return []float64{1, 1, 1, 1, 0, 0.5, 0.25, 2, 3}[g.pick(9)]
}

// differentialLimiters is TestDifferentialLimiters on s, whose keys c reads.
func differentialLimiters(t *testing.T, s *Store, c redis.UniversalClient, cache ratelimit.BlockedCacheConfig, steps int, seed uint64) {
	t.Logf("seed %d, %d steps (-diff.seed, -diff.steps)", seed, steps)
	g := &diffLimiterGen{rng: rand.New(rand.NewPCG(seed, 39))}
	// Time passes as in TestDifferential: the memory store's limiters and
	// the store itself run ahead of the real clock.
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	mem := ratelimit.MemoryConfig{Now: clock}.New()
	t.Cleanup(func() { _ = mem.Close() })
	prefix := newKeyer(t)
	// Three limiters, two of one name (two versions of a service whose
	// rules share counters where a rule's name, kind and algorithm agree).
	limiterNames := []string{"shared", "shared", "other"}
	var onMem, onRedis []*ratelimit.Limiter
	for i, name := range limiterNames {
		rules := g.rules()
		for _, st := range []ratelimit.Store{mem, s} {
			cfg := ratelimit.Config{
				Name: name, Store: st, Rules: rules, KeyPrefix: string(prefix),
				Timeout: 10 * time.Second, Breaker: ratelimit.BreakerConfig{Failures: -1},
				BlockedCache: cache, Logger: slog.New(slog.DiscardHandler), // degraded checks are the point
			}
			if st == ratelimit.Store(mem) {
				cfg.Now = clock
			}
			l, err := ratelimit.New(cfg)
			if err != nil {
				t.Fatalf("limiter %d %v: %v", i, rules, err)
			}
			if st == ratelimit.Store(mem) {
				onMem = append(onMem, l)
			} else {
				onRedis = append(onRedis, l)
			}
		}
		t.Logf("limiter %d (%s): %s", i, name, describeRules(rules))
	}
	for step := range steps {
		where := fmt.Sprintf("seed %d step %d (%v ahead)", seed, step, time.Duration(ahead.Load()))
		li, id := g.pick(len(limiterNames)), g.identifier()
		if step%40 == 39 {
			// New rules, as a rule store's refresh gives them; the
			// counters stay.
			for i := range limiterNames {
				rules := g.rules()
				if err := onMem[i].SetRules(rules); err != nil {
					t.Fatalf("%s: limiter %d rules %v: %v", where, i, rules, err)
				}
				if err := onRedis[i].SetRules(rules); err != nil {
					t.Fatalf("%s: limiter %d rules %v: %v", where, i, rules, err)
				}
				t.Logf("%s: limiter %d: %s", where, i, describeRules(rules))
			}
		}
		switch r := g.pick(40); {
		case r == 0:
			d := diffAdvances[g.pick(len(diffAdvances))]
			if cache.Size >= 0 {
				// A blocked cache holds when each block ends by the
				// limiter's clock, which for Redis is the real one: it
				// would answer from blocks that advance ended.
				continue
			}
			ahead.Add(int64(d))
			advance(t, s, c, string(prefix), d)
		case r <= 4:
			got, err := onRedis[li].Clear(ctx, id)
			if err != nil {
				t.Fatalf("%s: clear %v: %v", where, id, err)
			}
			want, _ := onMem[li].Clear(ctx, id)
			if got != want {
				t.Fatalf("%s: limiter %d clear %v = %d, memory store %d", where, li, id, got, want)
			}
		case r <= 8:
			var onM, onR []ratelimit.Request
			for range 1 + g.pick(4) {
				li, id, cost := g.pick(len(limiterNames)), g.identifier(), g.cost()
				onM = append(onM, ratelimit.Request{Limiter: onMem[li], Identifier: id, Options: []ratelimit.CheckOption{ratelimit.Cost(cost)}})
				onR = append(onR, ratelimit.Request{Limiter: onRedis[li], Identifier: id, Options: []ratelimit.CheckOption{ratelimit.Cost(cost)}})
			}
			got, want := ratelimit.CheckBatch(ctx, onR), ratelimit.CheckBatch(ctx, onM)
			for i := range got {
				compareResults(t, fmt.Sprintf("%s batch #%d (limiter %s, %v)", where, i, onR[i].Limiter.Name(), onR[i].Identifier), &got[i], &want[i], time.Duration(ahead.Load()))
			}
		default:
			cost := ratelimit.Cost(g.cost())
			do := (*ratelimit.Limiter).Check
			op := "check"
			if r <= 16 {
				do, op = (*ratelimit.Limiter).Peek, "peek"
			}
			got, want := do(onRedis[li], ctx, id, cost), do(onMem[li], ctx, id, cost)
			compareResults(t, fmt.Sprintf("%s: limiter %d %s %v", where, li, op, id), &got, &want, time.Duration(ahead.Load()))
		}
	}
}

// describeRules is rules in short, for the log of a failing run.
func describeRules(rules []ratelimit.Rule) string {
	s := ""
	for _, r := range rules {
		s += fmt.Sprintf("[%s %s %s by %v limit %d burst %d ban %v distinct %q match %v] ", r.Name, r.Action, r.Algorithm, r.Characteristics, r.Limit, r.Burst, r.BanFor, r.CountDistinct, r.Match != nil)
	}
	return s
}

// compareResults fails unless got (Redis) and want (the memory store) are
// the same result. Reset times agree within a second (each store read its
// clock; the memory store's runs ahead by ahead); a token bucket's count
// within far less than a token, a sliding window's within a thousandth.
func compareResults(t *testing.T, where string, got, want *ratelimit.Result, ahead time.Duration) {
	t.Helper()
	fail := func(what string, g, w any) {
		t.Helper()
		t.Fatalf("%s: %s = %v, memory store %v\n got %+v\nwant %+v", where, what, g, w, *got, *want)
	}
	if got.Err != nil || want.Err != nil {
		fail("error", got.Err, want.Err)
	}
	type head struct {
		action                               ratelimit.Verdict
		exceeded, matched, skipped, degraded bool
		rule                                 string
		evaluations                          int
		info                                 bool
	}
	hg := head{got.Action, got.Exceeded, got.Matched, got.Skipped, got.Degraded, got.RuleName(), len(got.Evaluations), got.Info != nil}
	hw := head{want.Action, want.Exceeded, want.Matched, want.Skipped, want.Degraded, want.RuleName(), len(want.Evaluations), want.Info != nil}
	if hg != hw {
		fail("result", hg, hw)
	}
	if got.Info != nil {
		compareInfo(t, where+" info", got.Info, want.Info, got.Rule.Algorithm, ahead)
	}
	for i := range got.Evaluations {
		g, w := &got.Evaluations[i], &want.Evaluations[i]
		if g.Rule.Name != w.Rule.Name || g.Exceeded != w.Exceeded || g.Blocked != w.Blocked {
			fail(fmt.Sprintf("evaluation %d", i), *g, *w)
		}
		compareInfo(t, fmt.Sprintf("%s evaluation %d (%s)", where, i, g.Rule.Name), &g.Info, &w.Info, g.Rule.Algorithm, ahead)
	}
}

// compareInfo is compareResults for one Info.
func compareInfo(t *testing.T, where string, g, w *ratelimit.Info, alg ratelimit.Algorithm, ahead time.Duration) {
	t.Helper()
	tol := 1e-9
	switch alg {
	case ratelimit.TokenBucket:
		tol = 1e-3
	case ratelimit.SlidingWindow:
		tol = math.Abs(w.Count)*1e-3 + 1e-6
	}
	wReset := w.ResetAt.Add(-ahead)
	reset := g.ResetAt.Sub(wReset)
	if g.Limit != w.Limit || g.Period != w.Period || g.Banned != w.Banned ||
		math.Abs(g.Count-w.Count) > tol || math.Abs(g.Remaining-w.Remaining) > tol ||
		(reset > time.Second || reset < -time.Second) && !(time.Until(g.ResetAt) > 100*365*24*time.Hour && time.Until(wReset) > 100*365*24*time.Hour) {
		t.Fatalf("%s:\n got %+v\nwant %+v", where, *g, *w)
	}
}
