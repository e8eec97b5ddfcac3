package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// guardEnv builds the limiters of one guard test on one store.
type guardEnv struct {
	t      *testing.T
	store  ratelimit.Store
	prefix string
}

var guardID = ratelimit.Identifier{"user": "u1"}

// quietLogger drops the fail-open warnings the guard tests provoke.
var quietLogger = slog.New(slog.DiscardHandler)

// guardStores are the stores the guard tests run on: the in-process store and
// the real Redis of RATEKIT_TEST_REDIS_URL.
var guardStores = []struct {
	name string
	env  func(t *testing.T) guardEnv
}{
	{"memory", func(t *testing.T) guardEnv { return guardEnv{t: t, store: ratelimit.NewMemoryStore()} }},
	{"redis", func(t *testing.T) guardEnv {
		return guardEnv{t: t, store: redisstore.New(redistest.Client(t)), prefix: redistest.Prefix(t)}
	}},
}

// limiter returns a limiter named name with one rule of the same name, per
// user, limit per minute; down puts it on a store that always fails, shadow
// makes the rule a log rule. Its timeout is 10s, not the default 100ms, which
// a loaded machine descheduling a check on Redis that long would hit.
func (e guardEnv) limiter(name string, limit int64, down, shadow bool) *ratelimit.Limiter {
	e.t.Helper()
	store := e.store
	if down {
		store = downStore{}
	}
	action := ratelimit.ActionLimit
	if shadow {
		action = ratelimit.ActionLog
	}
	l, err := ratelimit.New(ratelimit.Config{
		Name: name, Store: store, KeyPrefix: e.prefix, Logger: quietLogger, Timeout: 10 * time.Second,
		Breaker: ratelimit.BreakerConfig{Failures: -1},
		Rules: []ratelimit.Rule{{Name: name, Characteristics: []string{"user"}, Action: action,
			Limit: limit, Period: time.Minute}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// count returns what l has counted for guardID.
func count(l *ratelimit.Limiter) float64 {
	res := l.Peek(context.Background(), guardID, ratelimit.Cost(0))
	if res.Info == nil {
		return 0
	}
	return res.Info.Count
}

type limiterSpec struct {
	name   string
	limit  int64
	down   bool    // on a failing store
	shadow bool    // a log rule
	before float64 // counted before the test's checks
	peek   float64 // deferred only: PeekCost
}

func TestGuardCheck(t *testing.T) {
	tests := []struct {
		name         string
		limiters     []limiterSpec
		deferred     []limiterSpec
		checks       int // Check calls; the last decision is examined
		blockedBy    string
		results      []string // limiters with a result in the last decision, in order
		enforcing    string   // rule of Decision.Enforcing ("" for nil)
		failed       bool
		counts       map[string]float64
		violated     []string
		retryAtLeast time.Duration
	}{
		{
			name:     "every limiter checked, least remaining enforces",
			limiters: []limiterSpec{{name: "wide", limit: 5}, {name: "narrow", limit: 3}},
			checks:   1, results: []string{"wide", "narrow"}, enforcing: "narrow",
			counts: map[string]float64{"wide": 1, "narrow": 1},
		},
		{
			name:     "first block ends the checks",
			limiters: []limiterSpec{{name: "tight", limit: 1}, {name: "other", limit: 5}},
			checks:   2, blockedBy: "tight", results: []string{"tight"}, enforcing: "tight",
			counts:   map[string]float64{"tight": 2, "other": 1},
			violated: []string{"tight"}, retryAtLeast: 59 * time.Second,
		},
		{
			name:     "a later limiter blocks after the earlier counted",
			limiters: []limiterSpec{{name: "wide", limit: 5}, {name: "tight", limit: 1}},
			checks:   2, blockedBy: "tight", results: []string{"wide", "tight"}, enforcing: "tight",
			counts:   map[string]float64{"wide": 2, "tight": 2},
			violated: []string{"tight"}, retryAtLeast: 59 * time.Second,
		},
		{
			name:     "peek cost 0 admits a caller at the limit",
			limiters: []limiterSpec{{name: "req", limit: 10}},
			deferred: []limiterSpec{{name: "budget", limit: 2, before: 2, peek: 0}},
			checks:   1, results: []string{"req"}, enforcing: "req", // an allowing peek is not in the decision
			counts: map[string]float64{"req": 1, "budget": 2},
		},
		{
			name:     "peek cost 0 blocks a caller over the limit",
			limiters: []limiterSpec{{name: "req", limit: 10}},
			deferred: []limiterSpec{{name: "budget", limit: 2, before: 2.5, peek: 0}},
			checks:   1, blockedBy: "budget", results: []string{"budget"}, enforcing: "budget",
			counts:   map[string]float64{"req": 0, "budget": 2.5}, // peeks count nothing, and block before the limiters count
			violated: []string{"budget"}, retryAtLeast: 59 * time.Second,
		},
		{
			name:     "peek cost 1 blocks a caller one outcome from over",
			limiters: []limiterSpec{{name: "req", limit: 10}},
			deferred: []limiterSpec{{name: "failures", limit: 2, before: 2, peek: 1}},
			checks:   1, blockedBy: "failures", results: []string{"failures"}, enforcing: "failures",
			counts:   map[string]float64{"req": 0, "failures": 2},
			violated: []string{"failures"}, retryAtLeast: 59 * time.Second,
		},
		{
			name:     "peek cost 1 admits a caller two outcomes from over",
			limiters: []limiterSpec{{name: "req", limit: 10}},
			deferred: []limiterSpec{{name: "failures", limit: 2, before: 1, peek: 1}},
			checks:   1, results: []string{"req"}, enforcing: "req",
			counts: map[string]float64{"req": 1, "failures": 1},
		},
		{
			name:     "a failed limiter says nothing; the healthy one's rule enforces",
			limiters: []limiterSpec{{name: "down", limit: 1, down: true}, {name: "up", limit: 10}},
			checks:   3, results: []string{"down", "up"}, enforcing: "up", failed: true,
			counts: map[string]float64{"up": 3},
		},
		{
			name:     "a failed limiter never blocks; a healthy one after it still does",
			limiters: []limiterSpec{{name: "down", limit: 1, down: true}, {name: "up", limit: 1}},
			checks:   2, blockedBy: "up", results: []string{"down", "up"}, enforcing: "up", failed: true,
			counts: map[string]float64{"up": 2}, violated: []string{"up"}, retryAtLeast: 59 * time.Second,
		},
		{
			name:     "every limiter failed: allowed, nothing enforces",
			limiters: []limiterSpec{{name: "down", limit: 1, down: true}},
			deferred: []limiterSpec{{name: "budget_down", limit: 1, down: true, peek: 1}},
			checks:   3, results: []string{"down"}, failed: true,
		},
		{
			name:     "shadow rules never enforce",
			limiters: []limiterSpec{{name: "shadow", limit: 1, shadow: true}},
			checks:   3, results: []string{"shadow"}, counts: map[string]float64{"shadow": 3},
		},
	}
	for _, st := range guardStores {
		t.Run(st.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					e := st.env(t)
					ctx := context.Background()
					byName := map[string]*ratelimit.Limiter{}
					build := func(s limiterSpec) *ratelimit.Limiter {
						l := e.limiter(s.name, s.limit, s.down, s.shadow)
						if s.before > 0 {
							l.Check(ctx, guardID, ratelimit.Cost(s.before))
						}
						byName[s.name] = l
						return l
					}
					var g guard.Guard[int]
					for _, s := range tt.limiters {
						g.Limiters = append(g.Limiters, build(s))
					}
					for _, s := range tt.deferred {
						d := guard.CountWhen(build(s), func(int) bool { return true })
						d.PeekCost = s.peek
						g.Deferred = append(g.Deferred, d)
					}
					var d *ratelimitheaders.Decision
					for range tt.checks {
						d = g.Decide(ctx, guardID)
					}
					var got []string
					for _, r := range d.Results {
						got = append(got, r.Limiter)
					}
					if !reflect.DeepEqual(got, tt.results) {
						t.Errorf("results from %v, want %v", got, tt.results)
					}
					if by := d.BlockedBy(); (by == nil) != (tt.blockedBy == "") || (by != nil && by.Limiter != tt.blockedBy) {
						t.Errorf("blocked by %+v, want %q", by, tt.blockedBy)
					}
					if d.Blocked() != (tt.blockedBy != "") {
						t.Errorf("Blocked = %v", d.Blocked())
					}
					if e := d.Enforcing(); (e == nil) != (tt.enforcing == "") || (e != nil && e.Rule.Name != tt.enforcing) {
						t.Errorf("enforcing %+v, want %q", e, tt.enforcing)
					}
					if d.Failed() != tt.failed {
						t.Errorf("Failed = %v, want %v", d.Failed(), tt.failed)
					}
					if v := d.ViolatedPolicies(); !reflect.DeepEqual(v, tt.violated) {
						t.Errorf("violated %v, want %v", v, tt.violated)
					}
					if ra := d.RetryAfter(time.Now()); ra < tt.retryAtLeast || ra > time.Minute || (tt.retryAtLeast == 0 && ra != 0) {
						t.Errorf("RetryAfter = %v, want at least %v", ra, tt.retryAtLeast)
					}
					for name, want := range tt.counts {
						if c := count(byName[name]); c != want {
							t.Errorf("%s counted %v, want %v", name, c, want)
						}
					}
				})
			}
		})
	}
}

// outcome is what the settle tests' handlers report.
type outcome struct{ failed bool }

func TestGuardSettle(t *testing.T) {
	tests := []struct {
		name    string
		charge  func(ctx context.Context, o outcome) (float64, bool)
		o       outcome
		meter   float64 // added to the context's meter before Settle
		want    float64 // counted afterwards
		results int
	}{
		{"declined", func(context.Context, outcome) (float64, bool) { return 5, false }, outcome{}, 0, 0, 0},
		{"zero cost", func(context.Context, outcome) (float64, bool) { return 0, true }, outcome{}, 0, 0, 0},
		{"negative cost", func(context.Context, outcome) (float64, bool) { return -1, true }, outcome{}, 0, 0, 0},
		// Non-finite costs are bad measurements (a division by zero), ignored
		// as Meter.Add ignores them: charged, they fail the check open, a
		// store failure in the logs and metrics that is none.
		{"NaN cost", func(context.Context, outcome) (float64, bool) { return math.NaN(), true }, outcome{}, 0, 0, 0},
		{"infinite cost", func(context.Context, outcome) (float64, bool) { return math.Inf(1), true }, outcome{}, 0, 0, 0},
		{"largest finite cost", func(context.Context, outcome) (float64, bool) { return math.MaxFloat64, true }, outcome{}, 0, 1 << 53, 1},
		{"fractional cost", func(context.Context, outcome) (float64, bool) { return 2.5, true }, outcome{}, 0, 2.5, 1},
		{"counted outcome", guard.CountWhen(nil, func(o outcome) bool { return o.failed }).Charge, outcome{failed: true}, 0, 1, 1},
		{"uncounted outcome", guard.CountWhen(nil, func(o outcome) bool { return o.failed }).Charge, outcome{}, 0, 0, 0},
		{"metered", guard.Metered[outcome](nil, "db_s").Charge, outcome{}, 1.25, 1.25, 1},
		{"metered, nothing measured", guard.Metered[outcome](nil, "db_s").Charge, outcome{}, 0, 0, 0},
	}
	for _, st := range guardStores {
		t.Run(st.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					l := st.env(t).limiter("deferred", 100, false, false)
					g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{{Limiter: l, Charge: tt.charge}}}
					ctx, m := adapter.WithMeter(context.Background())
					m.Add("db_s", tt.meter)
					if res := g.Settle(ctx, guardID, tt.o); len(res) != tt.results {
						t.Errorf("%d results, want %d", len(res), tt.results)
					}
					if c := count(l); c != tt.want {
						t.Errorf("counted %v, want %v", c, tt.want)
					}
				})
			}
		})
	}
}

// downStore fails every call, as an unreachable store does.
type downStore struct{}

func (downStore) Eval(context.Context, ratelimit.Mode, []ratelimit.Op) ([]ratelimit.OpResult, error) {
	return nil, errors.New("connection refused")
}

func (downStore) Delete(context.Context, []string) (int, error) {
	return 0, errors.New("connection refused")
}

// ctxStore fails a call whose context is done, as a network store does.
type ctxStore struct{ ratelimit.Store }

func (s ctxStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Store.Eval(ctx, m, ops)
}

// A caller that hangs up still pays for the work it caused.
func TestGuardSettleIgnoresCancellation(t *testing.T) {
	for _, st := range guardStores {
		t.Run(st.name, func(t *testing.T) {
			e := st.env(t)
			e.store = ctxStore{e.store}
			l := e.limiter("db", 100, false, false)
			g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](l, "db_s")}}
			ctx, cancel := context.WithCancel(context.Background())
			ctx, m := adapter.WithMeter(ctx)
			m.Add("db_s", 3)
			cancel()
			if res := l.Check(ctx, guardID); !res.Failed() {
				t.Fatal("the store answered a cancelled check: this test would prove nothing")
			}
			res := g.Settle(ctx, guardID, outcome{})
			if len(res) != 1 || res[0].Failed() {
				t.Fatalf("settle results %+v, want one successful charge", res)
			}
			if c := count(l); c != 3 {
				t.Errorf("counted %v after the caller left, want 3", c)
			}
		})
	}
}

// A check or peek its caller canceled ends the decision, as its last result,
// and Canceled reports it: the request was not decided, and the limiters
// after it are not asked about a request that will not run.
func TestGuardDecideCanceled(t *testing.T) {
	for _, st := range guardStores {
		t.Run(st.name, func(t *testing.T) {
			e := st.env(t)
			a, b, db := e.limiter("a", 100, false, false), e.limiter("b", 100, false, false), e.limiter("db", 100, false, false)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for name, g := range map[string]guard.Guard[outcome]{
				"limiters": {Limiters: []*ratelimit.Limiter{a, b}},
				"deferred": {Limiters: []*ratelimit.Limiter{a, b},
					Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](db, "db_s")}},
			} {
				if d := g.Decide(context.Background(), guardID); guard.Canceled(d) != nil {
					t.Errorf("%s: Canceled = %v for a decision its caller did not cancel", name, guard.Canceled(d))
				}
				d := g.Decide(ctx, guardID)
				if err := guard.Canceled(d); !errors.Is(err, ratelimit.ErrCanceled) || !errors.Is(err, context.Canceled) {
					t.Errorf("%s: Canceled = %v, want the caller's cancellation", name, err)
				}
				if len(d.Results) != 1 || d.Blocked() {
					t.Errorf("%s: %d results, blocked %v; want the canceled one alone, not blocking", name, len(d.Results), d.Blocked())
				}
			}
		})
	}
}

func TestGuardRun(t *testing.T) {
	e := guardEnv{t: t, store: ratelimit.NewMemoryStore()}
	t.Run("without deferred limiters the context is the caller's", func(t *testing.T) {
		g := guard.Guard[outcome]{Limiters: []*ratelimit.Limiter{e.limiter("req", 5, false, false)}}
		ctx := context.Background()
		o := g.Run(ctx, guardID, func(hctx context.Context) outcome {
			if hctx != ctx || adapter.MeterFrom(hctx) != nil {
				t.Error("the handler got a new context although nothing is metered")
			}
			return outcome{failed: true}
		}, nil)
		if !o.failed {
			t.Error("Run did not return the handler's outcome")
		}
	})
	t.Run("deferred limiters are charged from the meter and the outcome", func(t *testing.T) {
		db, failures := e.limiter("db", 100, false, false), e.limiter("failures", 100, false, false)
		g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{
			guard.Metered[outcome](db, "db_s"),
			guard.CountWhen(failures, func(o outcome) bool { return o.failed }),
		}}
		for _, failed := range []bool{true, false, true} {
			g.Run(context.Background(), guardID, func(ctx context.Context) outcome {
				adapter.AddCost(ctx, "db_s", 0.5)
				return outcome{failed: failed}
			}, nil)
		}
		if c := count(db); c != 1.5 {
			t.Errorf("db counted %v, want 1.5", c)
		}
		if c := count(failures); c != 2 {
			t.Errorf("failures counted %v, want 2", c)
		}
	})
	t.Run("an outer meter is shared", func(t *testing.T) {
		db := e.limiter("db_outer", 100, false, false)
		g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](db, "db_s")}}
		ctx, outer := adapter.WithMeter(context.Background())
		g.Run(ctx, guardID, func(ctx context.Context) outcome {
			adapter.AddCost(ctx, "db_s", 2)
			return outcome{}
		}, nil)
		if outer.Value("db_s") != 2 || count(db) != 2 {
			t.Errorf("outer meter %v, counted %v; want 2 and 2", outer.Value("db_s"), count(db))
		}
	})
}

// A handler that panics has done work too (a reverse proxy panics with
// http.ErrAbortHandler when its client hangs up): the deferred limiters are
// charged, with the panicked outcome, and the panic goes on with its value.
func TestGuardRunChargesAPanickingHandler(t *testing.T) {
	for _, st := range guardStores {
		t.Run(st.name, func(t *testing.T) {
			e := st.env(t)
			db, failures := e.limiter("db", 100, false, false), e.limiter("failures", 100, false, false)
			g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{
				guard.Metered[outcome](db, "db_s"),
				guard.CountWhen(failures, func(o outcome) bool { return o.failed }),
			}}
			aborted := errors.New("client went away")
			for _, panicked := range []func(context.Context) outcome{
				func(context.Context) outcome { return outcome{failed: true} },
				nil, // the zero outcome: not a failure
			} {
				func() {
					defer func() {
						if err, _ := recover().(error); !errors.Is(err, aborted) {
							t.Errorf("recovered %v, want the handler's panic %v", err, aborted)
						}
					}()
					g.Run(context.Background(), guardID, func(ctx context.Context) outcome {
						adapter.AddCost(ctx, "db_s", 1.5)
						panic(aborted)
					}, panicked)
				}()
			}
			if c := count(db); c != 3 {
				t.Errorf("db counted %v after two handlers metered 1.5 and panicked, want 3", c)
			}
			if c := count(failures); c != 1 {
				t.Errorf("failures counted %v, want 1 (the panicked outcome's)", c)
			}
		})
	}
}

func TestGuardValidate(t *testing.T) {
	l := guardEnv{t: t, store: ratelimit.NewMemoryStore()}.limiter("l", 1, false, false)
	tests := []struct {
		name string
		g    guard.Guard[outcome]
		want string
	}{
		{"zero", guard.Guard[outcome]{}, ""},
		{"valid", guard.Guard[outcome]{Limiters: []*ratelimit.Limiter{l},
			Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](l, "x")}}, ""},
		{"nil limiter", guard.Guard[outcome]{Limiters: []*ratelimit.Limiter{l, nil}}, "limiter 1 is nil"},
		{"nil deferred limiter", guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](nil, "x")}},
			"deferred limiter 0: nil Limiter or Charge"},
		{"nil charge", guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{{Limiter: l}}},
			"deferred limiter 0: nil Limiter or Charge"},
		// A peek with such a cost fails open on every request: the
		// limiter would never block before the handler.
		{"negative peek cost", guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{peekCost(l, -1)}},
			"deferred limiter 0: PeekCost -1 is not a finite cost of at least 0"},
		{"NaN peek cost", guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](l, "x"), peekCost(l, math.NaN())}},
			"deferred limiter 1: PeekCost NaN is not a finite cost of at least 0"},
		{"infinite peek cost", guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{peekCost(l, math.Inf(1))}},
			"deferred limiter 0: PeekCost +Inf is not a finite cost of at least 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.g.Validate()
			if got := ""; err != nil {
				got = err.Error()
				if got != tt.want {
					t.Errorf("Validate() = %q, want %q", got, tt.want)
				}
			} else if tt.want != "" {
				t.Errorf("Validate() = nil, want %q", tt.want)
			}
		})
	}
}

// peekCost is a Deferred of l that peeks with cost c.
func peekCost(l *ratelimit.Limiter, c float64) adapter.Deferred[outcome] {
	d := guard.Metered[outcome](l, "x")
	d.PeekCost = c
	return d
}

// A minimal adapter: the guard checks each call, runs the handler when
// allowed, and counts failed calls after it; a caller with two failures is
// turned away before the handler runs.
func ExampleGuard() {
	newLimiter := func(name string, limit int64) *ratelimit.Limiter {
		l, err := ratelimit.New(ratelimit.Config{Name: name, Store: ratelimit.NewMemoryStore(),
			Rules: []ratelimit.Rule{{Name: name + "_per_user", Characteristics: []string{"user"},
				Limit: limit, Period: time.Minute}}})
		if err != nil {
			panic(err)
		}
		return l
	}
	type outcome struct{ err error }
	g := guard.Guard[outcome]{
		Limiters: []*ratelimit.Limiter{newLimiter("calls", 100)},
		Deferred: []adapter.Deferred[outcome]{
			guard.CountWhen(newLimiter("failures", 2), func(o outcome) bool { return o.err != nil }),
		},
	}
	id := ratelimit.Identifier{"user": "user:42"}
	for i := 1; i <= 4; i++ {
		d := g.Decide(context.Background(), id)
		if d.Blocked() {
			fmt.Printf("call %d: blocked by %v, retry in %v\n", i, d.ViolatedPolicies(), d.RetryAfter(time.Now()).Round(time.Minute))
			continue
		}
		o := g.Run(context.Background(), id, func(context.Context) outcome {
			return outcome{err: errors.New("wrong password")}
		}, nil)
		fmt.Printf("call %d: ran, %v; %s remaining %v\n", i, o.err, d.Enforcing().Rule.Name, d.Enforcing().Info.Remaining)
	}
	// Output:
	// call 1: ran, wrong password; calls_per_user remaining 99
	// call 2: ran, wrong password; calls_per_user remaining 98
	// call 3: blocked by [failures_per_user], retry in 1m0s
	// call 4: blocked by [failures_per_user], retry in 1m0s
}

// A metered budget blocks once spent, whatever its rule's algorithm: the
// cost is known only after the handler, so Settle charges it even past the
// limit (ratelimit.Spent). A sliding window or a token bucket used to refuse
// that charge and record nothing, and the budget never blocked.
func TestMeteredBudgetBlocksOnEveryAlgorithm(t *testing.T) {
	for _, st := range guardStores {
		for _, algo := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.TokenBucket} {
			t.Run(st.name+"/"+string(algo), func(t *testing.T) {
				e := st.env(t)
				l, err := ratelimit.New(ratelimit.Config{
					Name: "db", Store: e.store, KeyPrefix: e.prefix, Logger: quietLogger, Timeout: 10 * time.Second,
					Rules: []ratelimit.Rule{{Name: "db_seconds", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
						Limit: 2, Period: time.Hour, Algorithm: algo}},
				})
				if err != nil {
					t.Fatal(err)
				}
				g := guard.Guard[outcome]{Deferred: []adapter.Deferred[outcome]{guard.Metered[outcome](l, "db_s")}}
				ran := 0
				for range 6 { // 0.75 s of database time each, against 2 s an hour
					d := g.Decide(context.Background(), guardID)
					if d.Blocked() {
						continue
					}
					g.Run(context.Background(), guardID, func(ctx context.Context) outcome {
						ran++
						adapter.MeterFrom(ctx).Add("db_s", 0.75)
						return outcome{}
					}, nil)
				}
				// 0.75, 1.5, 2.25: the third overshoots, and the rest are
				// blocked. (A bucket refills a little as the test runs.)
				if c := count(l); ran != 3 || math.Abs(c-2.25) > 0.01 {
					t.Errorf("%d requests ran, %v db seconds counted; want 3 and 2.25", ran, c)
				}
			})
		}
	}
}
