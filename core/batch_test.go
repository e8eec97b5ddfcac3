package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/ratelimittest"
)

// describe renders everything a Result says, rules by name, so that results
// of limiters built apart (whose rule pointers differ) compare as text.
func describe(r ratelimit.Result) string { return render(r, true, true) }

// withoutDegraded renders what describe does but Degraded, which differs by
// where a block came from: the rules after a block the store finds were
// planned (and may lack a property), those after a cached block were not.
func withoutDegraded(r ratelimit.Result) string { return render(r, true, false) }

// verdict renders what withoutDegraded does but the counts and resets: what
// a blocked-cache answer may report differently (see CheckBatch).
func verdict(r ratelimit.Result) string { return render(r, false, false) }

func render(r ratelimit.Result, counts, degraded bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s action=%s exceeded=%t matched=%t skipped=%t shadow=%t err=%t rule=%s",
		r.Limiter, r.Action, r.Exceeded, r.Matched, r.Skipped, r.Shadow, r.Err != nil, r.RuleName())
	if degraded {
		fmt.Fprintf(&b, " degraded=%t", r.Degraded)
	}
	if r.Info != nil && counts {
		fmt.Fprintf(&b, " info=%+v", *r.Info)
	}
	for _, e := range r.Evaluations {
		fmt.Fprintf(&b, "\n  %s exceeded=%t blocked=%t perRequest=%t tier=%q banned=%t", e.Rule.Name, e.Exceeded, e.Blocked, e.PerRequest, e.Tier, e.Info.Banned)
		if counts {
			fmt.Fprintf(&b, " %+v", e.Info)
		}
	}
	return b.String()
}

// worldSpec is a set of limiters, built the same way twice so that a batch
// in one and the same checks one by one in the other can be compared.
type worldSpec struct {
	rules  [][]ratelimit.Rule
	shadow []bool
	cache  ratelimit.BlockedCacheConfig
}

func (w worldSpec) build(t *testing.T, clock *ratelimittest.Clock, store ratelimit.Store) []*ratelimit.Limiter {
	t.Helper()
	var ls []*ratelimit.Limiter
	for i, rules := range w.rules {
		cfg := ratelimit.Config{
			Name: fmt.Sprintf("l%d", i), Store: store, Rules: rules, Now: clock.Now,
			BlockedCache: w.cache, Breaker: ratelimit.BreakerConfig{Failures: -1}, Timeout: time.Minute,
		}
		if w.shadow[i] {
			cfg.Enforcement = ratelimit.Shadow
		}
		l, err := ratelimit.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

// batchStores are the stores a batch is tried on: the memory store (checked
// one by one in process), ratelimittest's, which implements BatchStore in
// process, and the same as a store outside the process (remoteStore).
var batchStores = []struct {
	name string
	new  func(*ratelimittest.Clock) (ratelimit.Store, func() int)
}{
	{"memory", func(c *ratelimittest.Clock) (ratelimit.Store, func() int) {
		return ratelimit.MemoryConfig{Now: c.Now}.New(), nil
	}},
	{"batch_store", func(c *ratelimittest.Clock) (ratelimit.Store, func() int) {
		s := ratelimittest.NewStore(c)
		return s, s.Calls
	}},
	{"remote_batch_store", func(c *ratelimittest.Clock) (ratelimit.Store, func() int) {
		s := ratelimittest.NewStore(c)
		return remoteStore{s}, s.Calls
	}},
}

// remoteStore forwards to a ratelimittest store without being one: the
// limiter takes it for a store outside the process, which it calls under
// its timeout from a guard goroutine (batches included).
type remoteStore struct{ s *ratelimittest.Store }

func (r remoteStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return r.s.Eval(ctx, m, ops)
}

func (r remoteStore) EvalBatch(ctx context.Context, m ratelimit.Mode, batch [][]ratelimit.Op) ([][]ratelimit.OpResult, error) {
	return r.s.EvalBatch(ctx, m, batch)
}

func (r remoteStore) Delete(ctx context.Context, keys []string) (int, error) {
	return r.s.Delete(ctx, keys)
}

// compareBatch runs one batch of reqs (built against world a's limiters) on
// world a with CheckBatch and on world b check by check, and fails on the
// first result that differs.
func compareBatch(t *testing.T, round int, a, b []*ratelimit.Limiter, reqs []ratelimit.Request) {
	t.Helper()
	compareBatchBy(t, describe, round, a, b, reqs)
}

func compareBatchBy(t *testing.T, describe func(ratelimit.Result) string, round int, a, b []*ratelimit.Limiter, reqs []ratelimit.Request) {
	t.Helper()
	got := ratelimit.CheckBatch(context.Background(), reqs)
	if len(got) != len(reqs) {
		t.Fatalf("round %d: %d results for %d requests", round, len(got), len(reqs))
	}
	for i, rq := range reqs {
		idx := -1
		for j, l := range a {
			if l == rq.Limiter {
				idx = j
			}
		}
		want := b[idx].Check(context.Background(), rq.Identifier, rq.Options...)
		if g, w := describe(got[i]), describe(want); g != w {
			t.Fatalf("round %d, request #%d (%s %v):\nbatch:      %s\none by one: %s", round, i, rq.Limiter.Name(), rq.Identifier, g, w)
		}
	}
}

func TestCheckBatchEqualsOneByOne(t *testing.T) {
	user := func(u string) ratelimit.Identifier { return ratelimit.Identifier{"user": u, "path": "/a"} }
	perUser := func(name string, limit int64, action ratelimit.Action) ratelimit.Rule {
		return ratelimit.Rule{Name: name, Characteristics: []string{"user"}, Limit: limit, Period: time.Minute, Action: action}
	}
	banned := perUser("banned", 1, ratelimit.ActionLimit)
	banned.BanFor = time.Hour
	tests := []struct {
		name   string
		spec   worldSpec
		rounds [][]int // per round, the limiter of each request
		ids    []ratelimit.Identifier
		opts   [][]ratelimit.CheckOption
	}{
		{
			name:   "one limiter, the same caller three times: later checks see earlier charges",
			spec:   worldSpec{rules: [][]ratelimit.Rule{{perUser("two", 2, ratelimit.ActionLimit)}}, shadow: []bool{false}},
			rounds: [][]int{{0, 0, 0}, {0, 0}},
			ids:    []ratelimit.Identifier{user("u"), user("u"), user("u")},
		},
		{
			name: "a terminal block in one check does not stop another's counting",
			spec: worldSpec{rules: [][]ratelimit.Rule{
				{perUser("one", 1, ratelimit.ActionLimit), perUser("after", 5, ratelimit.ActionLog)},
			}, shadow: []bool{false}},
			rounds: [][]int{{0, 0, 0}, {0, 0, 0}},
			ids:    []ratelimit.Identifier{user("u"), user("v"), user("u")},
		},
		{
			name:   "bans, then banned callers from the blocked cache beside others",
			spec:   worldSpec{rules: [][]ratelimit.Rule{{banned, perUser("log", 1, ratelimit.ActionLog)}}, shadow: []bool{false}},
			rounds: [][]int{{0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
			ids:    []ratelimit.Identifier{user("u"), user("u"), user("v")},
		},
		{
			name: "several limiters, one in shadow mode, one with a skip",
			spec: worldSpec{rules: [][]ratelimit.Rule{
				{perUser("a", 1, ratelimit.ActionLimit)},
				{perUser("b", 1, ratelimit.ActionLimit)},
				{{Name: "skip_a", Match: map[string]ratelimit.Matcher{"path": ratelimit.Equal("/a")}, Action: ratelimit.ActionSkip}, perUser("c", 1, ratelimit.ActionLimit)},
			}, shadow: []bool{false, true, false}},
			rounds: [][]int{{0, 1, 2}, {2, 1, 0}, {1, 1, 1}},
			ids:    []ratelimit.Identifier{user("u"), user("u"), user("u")},
		},
		{
			name:   "costs: zero reads, two counts double, an invalid one fails open alone",
			spec:   worldSpec{rules: [][]ratelimit.Rule{{perUser("three", 3, ratelimit.ActionLimit)}}, shadow: []bool{false}},
			rounds: [][]int{{0, 0, 0}, {0, 0, 0}},
			ids:    []ratelimit.Identifier{user("u"), user("u"), user("u")},
			opts:   [][]ratelimit.CheckOption{{ratelimit.Cost(0)}, {ratelimit.Cost(2)}, {ratelimit.Cost(-1)}},
		},
		{
			name:   "a missing characteristic degrades its check only",
			spec:   worldSpec{rules: [][]ratelimit.Rule{{perUser("u", 3, ratelimit.ActionLimit)}}, shadow: []bool{false}},
			rounds: [][]int{{0, 0}},
			ids:    []ratelimit.Identifier{{"path": "/a"}, user("u")},
		},
	}
	for _, st := range batchStores {
		for _, tt := range tests {
			t.Run(st.name+"/"+tt.name, func(t *testing.T) {
				clock := ratelimittest.NewClock(time.Time{})
				sa, _ := st.new(clock)
				a := tt.spec.build(t, clock, sa)
				b := tt.spec.build(t, clock, ratelimit.MemoryConfig{Now: clock.Now}.New())
				for r, round := range tt.rounds {
					reqs := make([]ratelimit.Request, len(round))
					for i, li := range round {
						reqs[i] = ratelimit.Request{Limiter: a[li], Identifier: tt.ids[i]}
						if tt.opts != nil {
							reqs[i].Options = tt.opts[i]
						}
					}
					compareBatch(t, r, a, b, reqs)
					clock.Advance(time.Second)
				}
			})
		}
	}
}

// TestCheckBatchRandomized compares batches with one-by-one checks on random
// rules (limit, log and skip; bans; distinct counts; missing properties;
// per-request rules; shadow limiters), random callers, costs and batch
// sizes, with time moving between batches. Without a blocked cache
// everything is compared. With one, Degraded may differ (see
// withoutDegraded); with one whose entries age out (the default MaxAge) or
// that caches over-limit counters, so may the counts of cached answers (see
// CheckBatch): there the verdicts are compared.
func TestCheckBatchRandomized(t *testing.T) {
	caches := []struct {
		name    string
		cfg     ratelimit.BlockedCacheConfig
		compare func(ratelimit.Result) string
	}{
		{"no_cache", ratelimit.BlockedCacheConfig{Size: -1}, describe},
		{"cache_until_reset", ratelimit.BlockedCacheConfig{MaxAge: -1}, withoutDegraded},
		{"cache_default", ratelimit.BlockedCacheConfig{}, verdict},
		{"cache_over_limit", ratelimit.BlockedCacheConfig{OverLimit: true}, verdict},
	}
	for _, st := range batchStores {
		for _, cache := range caches {
			for seed := range uint64(8) {
				t.Run(fmt.Sprintf("%s/%s/seed=%d", st.name, cache.name, seed), func(t *testing.T) {
					randomBatches(t, seed, st.new, cache.cfg, cache.compare)
				})
			}
		}
	}
}

// randomBatches runs 300 random batches on a world of seed's random rules.
func randomBatches(t *testing.T, seed uint64, newStore func(*ratelimittest.Clock) (ratelimit.Store, func() int), cache ratelimit.BlockedCacheConfig, describe func(ratelimit.Result) string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 26))
	spec := randomSpec(rng)
	spec.cache = cache
	clock := ratelimittest.NewClock(time.Time{})
	sa, _ := newStore(clock)
	a := spec.build(t, clock, sa)
	b := spec.build(t, clock, ratelimit.MemoryConfig{Now: clock.Now}.New())
	extra, err := ratelimit.CompileRules("remote", []ratelimit.Rule{{Name: "extra", Characteristics: []string{"ip"}, Limit: 2, Period: 3 * time.Second, Action: ratelimit.ActionLimit}})
	if err != nil {
		t.Fatal(err)
	}
	costs := []float64{0, 0.5, 1, 1, 2}
	for round := range 300 {
		reqs := make([]ratelimit.Request, 1+rng.IntN(6))
		for i := range reqs {
			rq := ratelimit.Request{Limiter: a[rng.IntN(len(a))], Identifier: randomID(rng)}
			if rng.IntN(3) == 0 {
				rq.Options = append(rq.Options, ratelimit.Cost(costs[rng.IntN(len(costs))]))
			}
			if rng.IntN(6) == 0 {
				rq.Options = append(rq.Options, ratelimit.WithRules(extra))
			}
			reqs[i] = rq
		}
		compareBatchBy(t, describe, round, a, b, reqs)
		clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
	}
}

func randomSpec(rng *rand.Rand) worldSpec {
	var w worldSpec
	for li := range 3 {
		var rules []ratelimit.Rule
		for ri := range 1 + rng.IntN(4) {
			r := ratelimit.Rule{Name: fmt.Sprintf("r%d", ri), Period: time.Duration(1+rng.IntN(5)) * time.Second, Limit: int64(1 + rng.IntN(4))}
			switch rng.IntN(10) {
			case 0, 1:
				r = ratelimit.Rule{Name: r.Name, Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Equal("/skip")}}
				rules = append(rules, r)
				continue
			case 2, 3, 4:
				r.Action = ratelimit.ActionLog
			default:
				r.Action = ratelimit.ActionLimit
			}
			r.Characteristics = [][]string{{"user"}, {"ip"}, {"user", "ip"}}[rng.IntN(3)]
			r.CountMissing = rng.IntN(4) == 0
			if rng.IntN(3) == 0 {
				r.Match = map[string]ratelimit.Matcher{"path": ratelimit.OneOf("/a", "/b")}
			}
			switch rng.IntN(4) {
			case 0:
				r.CountDistinct = "path"
			case 1:
				r.BanFor = time.Duration(2+rng.IntN(8)) * time.Second
			}
			rules = append(rules, r)
		}
		w.rules = append(w.rules, rules)
		w.shadow = append(w.shadow, li == 2)
	}
	return w
}

func randomID(rng *rand.Rand) ratelimit.Identifier {
	id := ratelimit.Identifier{}
	if v := rng.IntN(4); v > 0 {
		id["user"] = fmt.Sprintf("u%d", v)
	}
	if v := rng.IntN(3); v > 0 {
		id["ip"] = fmt.Sprintf("10.0.0.%d", v)
	}
	if v := rng.IntN(5); v > 0 {
		id["path"] = []string{"", "/a", "/b", "/c", "/skip"}[v]
	}
	return id
}

// evalOnly hides a store's EvalBatch: the limiter must fall back to one
// Eval per check.
type evalOnly struct{ *ratelimittest.Store }

func (s evalOnly) EvalBatch() {} // shadows the embedded method: not a BatchStore

func TestCheckBatchStoreCalls(t *testing.T) {
	rules := []ratelimit.Rule{
		{Name: "ban", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, BanFor: time.Hour, Action: ratelimit.ActionLimit},
		{Name: "log", Characteristics: []string{"user"}, Limit: 100, Period: time.Minute, Action: ratelimit.ActionLog},
	}
	newLimiter := func(t *testing.T, name string, store ratelimit.Store) *ratelimit.Limiter {
		t.Helper()
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, Rules: rules, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ids := func(us ...string) []ratelimit.Identifier {
		var out []ratelimit.Identifier
		for _, u := range us {
			out = append(out, ratelimit.Identifier{"user": u})
		}
		return out
	}
	t.Run("one call for every check of the limiters of one batch store", func(t *testing.T) {
		store := ratelimittest.NewStore(nil)
		a, b := newLimiter(t, "a", store), newLimiter(t, "b", store)
		reqs := []ratelimit.Request{}
		for _, id := range ids("u1", "u2", "u3") {
			reqs = append(reqs, ratelimit.Request{Limiter: a, Identifier: id}, ratelimit.Request{Limiter: b, Identifier: id})
		}
		before := store.Calls()
		res := ratelimit.CheckBatch(context.Background(), reqs)
		if got := store.Calls() - before; got != 1 {
			t.Fatalf("%d store calls for a batch of %d checks, want 1", got, len(reqs))
		}
		for i, r := range res {
			if r.Err != nil || r.Blocked() || len(r.Evaluations) != 2 || r.Count() != 1 {
				t.Fatalf("result #%d: %s", i, describe(r))
			}
		}
	})
	t.Run("one call per store", func(t *testing.T) {
		s1, s2 := ratelimittest.NewStore(nil), ratelimittest.NewStore(nil)
		a, b := newLimiter(t, "a", s1), newLimiter(t, "b", s2)
		var reqs []ratelimit.Request
		for _, id := range ids("u1", "u2") {
			reqs = append(reqs, ratelimit.Request{Limiter: a, Identifier: id}, ratelimit.Request{Limiter: b, Identifier: id})
		}
		ratelimit.CheckBatch(context.Background(), reqs)
		if s1.Calls() != 1 || s2.Calls() != 1 {
			t.Fatalf("store calls %d and %d, want 1 each", s1.Calls(), s2.Calls())
		}
	})
	t.Run("one call per check on a store without EvalBatch", func(t *testing.T) {
		store := evalOnly{ratelimittest.NewStore(nil)}
		if _, ok := ratelimit.Store(store).(ratelimit.BatchStore); ok {
			t.Fatal("evalOnly is a BatchStore")
		}
		a := newLimiter(t, "a", store)
		var reqs []ratelimit.Request
		for _, id := range ids("u1", "u2", "u3") {
			reqs = append(reqs, ratelimit.Request{Limiter: a, Identifier: id})
		}
		res := ratelimit.CheckBatch(context.Background(), reqs)
		if store.Calls() != 3 {
			t.Fatalf("%d store calls, want 3", store.Calls())
		}
		for i, r := range res {
			if r.Err != nil || r.Count() != 1 {
				t.Fatalf("result #%d: %s", i, describe(r))
			}
		}
	})
	t.Run("a banned caller is answered from the blocked cache, the others go to the store", func(t *testing.T) {
		store := ratelimittest.NewStore(nil)
		a := newLimiter(t, "a", store)
		ctx := context.Background()
		a.Check(ctx, ratelimit.Identifier{"user": "bad"})
		if r := a.Check(ctx, ratelimit.Identifier{"user": "bad"}); !r.Banned() {
			t.Fatalf("not banned: %s", describe(r))
		}
		// The ban rule comes first: its cached ban leaves no op for "bad".
		reqs := []ratelimit.Request{{Limiter: a, Identifier: ratelimit.Identifier{"user": "bad"}}}
		before := store.Calls()
		res := ratelimit.CheckBatch(ctx, reqs)
		if store.Calls() != before {
			t.Fatalf("a batch of one banned caller called the store")
		}
		if !res[0].Blocked() || !res[0].Banned() {
			t.Fatalf("banned caller: %s", describe(res[0]))
		}
		reqs = append(reqs, ratelimit.Request{Limiter: a, Identifier: ratelimit.Identifier{"user": "good"}})
		before = store.Calls()
		res = ratelimit.CheckBatch(ctx, reqs)
		if got := store.Calls() - before; got != 1 {
			t.Fatalf("%d store calls, want 1", got)
		}
		if !res[0].Blocked() || res[1].Blocked() || res[1].Count() != 1 {
			t.Fatalf("results:\n%s\n%s", describe(res[0]), describe(res[1]))
		}
		if got := store.RuleCount(a, "ban", ratelimit.Identifier{"user": "bad"}); got != 2 {
			t.Fatalf("banned caller's count %v, want 2 (not charged while banned)", got)
		}
	})
}

func TestCheckBatchFailsOpenPerBatch(t *testing.T) {
	store := ratelimittest.NewStore(nil)
	rules := []ratelimit.Rule{{Name: "ban", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, BanFor: time.Hour, Action: ratelimit.ActionLimit}}
	l, err := ratelimit.New(ratelimit.Config{Name: "a", Store: store, Rules: rules, Timeout: time.Minute, Breaker: ratelimit.BreakerConfig{Failures: 2, Cooldown: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := ratelimit.Identifier{"user": "bad"}
	l.Check(ctx, bad)
	l.Check(ctx, bad) // banned, and cached
	store.FailWith(errors.New("redis is down"))
	reqs := []ratelimit.Request{{Limiter: l, Identifier: bad}, {Limiter: l, Identifier: ratelimit.Identifier{"user": "u1"}}, {Limiter: l, Identifier: ratelimit.Identifier{"user": "u2"}}}
	before := store.Calls()
	res := ratelimit.CheckBatch(ctx, reqs)
	if got := store.Calls() - before; got != 1 {
		t.Fatalf("%d store calls, want 1", got)
	}
	if !res[0].Blocked() || res[0].Err != nil {
		t.Fatalf("the cached ban must answer without the store: %s", describe(res[0]))
	}
	for _, r := range res[1:] {
		if r.Blocked() || r.Err == nil || !strings.Contains(r.Err.Error(), "redis is down") {
			t.Fatalf("want a fail-open result: %s (%v)", describe(r), r.Err)
		}
	}
	// Two failed checks of the batch count as two failures: the breaker is
	// open, and the next batch fails open without the store.
	if got := l.BreakerState(); got == "closed" {
		t.Fatalf("breaker %s after two failed checks, want open", got)
	}
	before = store.Calls()
	res = ratelimit.CheckBatch(ctx, reqs[1:])
	if store.Calls() != before {
		t.Fatal("the store was called through an open breaker")
	}
	for _, r := range res {
		if !errors.Is(r.Err, ratelimit.ErrCircuitOpen) {
			t.Fatalf("want ErrCircuitOpen: %v", r.Err)
		}
	}
}

func TestCheckBatchObserverAndNilLimiter(t *testing.T) {
	var mu sync.Mutex
	var events []ratelimit.Event
	l, err := ratelimit.New(ratelimit.Config{Name: "a", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("r")},
		Observer: func(_ context.Context, e ratelimit.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	res := ratelimit.CheckBatch(context.Background(), []ratelimit.Request{
		{Limiter: l, Identifier: ratelimit.Identifier{"user": "u"}},
		{},
		{Limiter: l, Identifier: ratelimit.Identifier{"user": "u"}},
	})
	if res[1].Err == nil || res[1].Blocked() {
		t.Fatalf("a request without a limiter: %s", describe(res[1]))
	}
	if res[0].Count() != 1 || res[2].Count() != 2 {
		t.Fatalf("counts %v, %v, want 1, 2", res[0].Count(), res[2].Count())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[0].Kind != ratelimit.EventCheck || events[1].Result.Count() != 2 {
		t.Fatalf("events: %+v", events)
	}
}

// BenchmarkCheckBatch compares a batch of five one-rule checks with the same
// five checks one by one, on the memory store and on ratelimittest's store
// (a BatchStore: one call per batch instead of five).
func BenchmarkCheckBatch(b *testing.B) {
	stores := []struct {
		name string
		new  func() ratelimit.Store
	}{
		{"memory", func() ratelimit.Store { return ratelimit.NewMemoryStore() }},
		{"batch_store", func() ratelimit.Store { return ratelimittest.NewStore(nil) }},
	}
	for _, st := range stores {
		l, err := ratelimit.New(ratelimit.Config{Name: "bench", Store: st.new(), Rules: benchRules(1), Timeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]ratelimit.Request, 5)
		for i := range reqs {
			reqs[i] = ratelimit.Request{Limiter: l, Identifier: ratelimit.Identifier{"user": fmt.Sprintf("u%d", i)}}
		}
		ctx := context.Background()
		b.Run(st.name+"/batch", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ratelimit.CheckBatch(ctx, reqs)
			}
		})
		b.Run(st.name+"/one_by_one", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, rq := range reqs {
					l.Check(ctx, rq.Identifier)
				}
			}
		})
	}
}
