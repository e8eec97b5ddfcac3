package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// limiter returns a Limiter on store whose checks must all succeed: its
// timeout is 10s, not the default 100ms, which a loaded machine descheduling
// a check on Redis that long would hit.
func limiter(t *testing.T, store ratelimit.Store, prefix string, mode ratelimit.Enforcement) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{
		Name: "checkout", Store: store, KeyPrefix: prefix, Enforcement: mode, Timeout: 10 * time.Second,
		Rules: []ratelimit.Rule{{
			Name: "per_user", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
			Limit: 2, Period: time.Minute,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestCompareAgreements(t *testing.T) {
	rule := &ratelimit.Rule{Name: "per_user"}
	blockedEval := []ratelimit.Evaluation{{Rule: rule, Blocked: true, Exceeded: true}}
	for _, tc := range []struct {
		name      string
		res       ratelimit.Result
		legacy    bool
		want      rollout.Agreement
		wantBlock bool
		wantRule  string
	}{
		{"both allow", ratelimit.Result{Action: ratelimit.ActionAllow, Rule: rule}, false, rollout.Agree, false, "per_user"},
		{"both block", ratelimit.Result{Action: ratelimit.ActionBlock, Rule: rule, Evaluations: blockedEval}, true, rollout.Agree, true, "per_user"},
		{"new only, enforcing", ratelimit.Result{Action: ratelimit.ActionBlock, Rule: rule, Evaluations: blockedEval}, false, rollout.NewOnly, true, "per_user"},
		{"legacy only, enforcing", ratelimit.Result{Action: ratelimit.ActionAllow}, true, rollout.LegacyOnly, false, rollout.NoRule},
		{"shadow would block, legacy allows", ratelimit.Result{Action: ratelimit.ActionAllow, Shadow: true, Rule: rule, Evaluations: blockedEval}, false, rollout.NewOnly, false, "per_user"},
		{"shadow would block, legacy blocks", ratelimit.Result{Action: ratelimit.ActionAllow, Shadow: true, Rule: rule, Evaluations: blockedEval}, true, rollout.Agree, true, "per_user"},
		{"shadow allows, legacy blocks", ratelimit.Result{Action: ratelimit.ActionAllow, Shadow: true}, true, rollout.LegacyOnly, true, rollout.NoRule},
		{"fail-open is not compared", ratelimit.Result{Action: ratelimit.ActionAllow, Err: errors.New("down")}, true, rollout.Failed, false, rollout.NoRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tally := rollout.NewTally()
			ro := rollout.New(limiter(t, ratelimit.NewMemoryStore(), "", ratelimit.Enforce), tally)
			d := ro.Compare(context.Background(), tc.res, tc.legacy)
			if d.Agreement != tc.want || d.Block() != tc.wantBlock || d.Rule != tc.wantRule {
				t.Fatalf("agreement=%s block=%v rule=%s, want %s %v %s", d.Agreement, d.Block(), d.Rule, tc.want, tc.wantBlock, tc.wantRule)
			}
			div, ok := tally.Divergence("checkout")
			if !ok || len(div.Rules) != 1 || div.Rules[0].Rule != tc.wantRule {
				t.Fatalf("tally: %+v", div)
			}
			var want rollout.Counts
			want.Add(tc.want, 1)
			if div.Total != want {
				t.Fatalf("tally total %+v, want %+v", div.Total, want)
			}
		})
	}
}

func TestGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    rollout.Counts
		min  uint64
		pass bool
	}{
		{"below threshold", rollout.Counts{Agree: 9960, NewOnly: 20, LegacyOnly: 20, Failed: 500}, rollout.MinDecisions, true}, // 0.40 %
		{"exactly 0.5 % fails", rollout.Counts{Agree: 9950, NewOnly: 50}, rollout.MinDecisions, false},                         // "fewer than"
		{"above", rollout.Counts{Agree: 900, LegacyOnly: 100}, rollout.MinDecisions, false},                                    // 10 %
		{"too little traffic", rollout.Counts{Agree: 999}, rollout.MinDecisions, false},                                        // under MinDecisions
		{"failed decisions do not count as traffic", rollout.Counts{Agree: 10, Failed: 5000}, rollout.MinDecisions, false},     //
		// Without a minimum, one decision is still needed: a ratio of no
		// decisions (a limiter that only failed open) says nothing.
		{"no decision compared, no minimum", rollout.Counts{Failed: 5000}, 0, false},
		{"one decision compared, no minimum", rollout.Counts{Agree: 1, Failed: 5000}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := rollout.Gate("x", tc.c, rollout.MaxDivergence, tc.min)
			if v.Pass != tc.pass || v.Reason == "" {
				t.Fatalf("Gate(%+v, min %d) = %+v, want pass=%v", tc.c, tc.min, v, tc.pass)
			}
		})
	}
}

type panicky struct{}

func (panicky) RecordDecision(context.Context, string, *rollout.Decision) { panic("boom") }

func TestRecorderPanicNeverReachesTheRequest(t *testing.T) {
	ro := rollout.New(limiter(t, ratelimit.NewMemoryStore(), "", ratelimit.Shadow), panicky{})
	d := ro.Check(context.Background(), ratelimit.Identifier{"user": "u"}, true)
	if !d.Block() || d.Agreement != rollout.LegacyOnly {
		t.Fatalf("decision %+v", d)
	}
}

// TestRolloutOnRedis walks the rollout on a real Redis: in shadow the legacy
// decision is obeyed and divergence is tallied; after switching to enforce
// the limiter's verdict is obeyed, on counters the shadow checks made.
func TestRolloutOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) ratelimit.Store
	}{
		{"standalone", func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.Client(t)) }},
		{"cluster", func(t *testing.T) ratelimit.Store { return redisstore.New(redistest.ClusterClient(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limiter(t, tc.client(t), redistest.Prefix(t), ratelimit.Shadow)
			tally := rollout.NewTally()
			ro := rollout.New(l, tally)
			ctx := context.Background()
			alice := ratelimit.Identifier{"user": "alice"}
			// The legacy check admits 3 per minute, the new rule 2.
			for n := 1; n <= 4; n++ {
				d := ro.Check(ctx, alice, n > 3)
				if d.Result.Err != nil {
					t.Fatal(d.Result.Err)
				}
				if d.Block() != (n > 3) {
					t.Fatalf("shadow request %d: block=%v, want the legacy decision %v", n, d.Block(), n > 3)
				}
			}
			div, _ := tally.Divergence("checkout")
			if div.Total != (rollout.Counts{Agree: 3, NewOnly: 1}) {
				t.Fatalf("tally %+v", div.Total)
			}
			if err := l.SetEnforcement(ratelimit.Enforce); err != nil {
				t.Fatal(err)
			}
			d := ro.Check(ctx, alice, false)
			if !d.Block() || d.Agreement != rollout.NewOnly || d.Rule != "per_user" {
				t.Fatalf("after enforce: block=%v agreement=%s rule=%s", d.Block(), d.Agreement, d.Rule)
			}
		})
	}
}

// Per-request rule names have their own budget in a Tally, and NoRule takes
// none: a rules service naming a new rule per answer, or decisions that
// matched no rule, never push a limiter's own rules under OverflowRule.
func TestTallyBudgetsPerTier(t *testing.T) {
	const extra = 10
	tally := rollout.NewTally()
	ctx := context.Background()
	tally.RecordDecision(ctx, "edge", &rollout.Decision{Rule: rollout.NoRule, Agreement: rollout.Agree})
	for i := range rollout.MaxTallyPerRequestRules + extra {
		d := &rollout.Decision{Rule: fmt.Sprint("answer_", i), Agreement: rollout.NewOnly}
		d.Result.RulePerRequest = true
		tally.RecordDecision(ctx, "edge", d)
	}
	for i := range rollout.MaxTallyRules {
		tally.RecordDecision(ctx, "edge", &rollout.Decision{Rule: fmt.Sprint("own_", i), Agreement: rollout.LegacyOnly})
	}
	d, ok := tally.Divergence("edge")
	if !ok {
		t.Fatal("no divergence for edge")
	}
	byName := map[string]rollout.Counts{}
	for _, r := range d.Rules {
		byName[r.Rule] = r.Counts
	}
	if got, want := len(byName), rollout.MaxTallyRules+rollout.MaxTallyPerRequestRules+2; got != want {
		t.Errorf("%d rules counted apart, want %d (both budgets, %s and %s)", got, want, rollout.NoRule, rollout.OverflowRule)
	}
	for _, name := range []string{"own_0", fmt.Sprint("own_", rollout.MaxTallyRules-1)} {
		if got := byName[name]; got != (rollout.Counts{LegacyOnly: 1}) {
			t.Errorf("%s counted %+v, want its own legacy_only decision", name, got)
		}
	}
	if got := byName[rollout.OverflowRule]; got != (rollout.Counts{NewOnly: extra}) {
		t.Errorf("%s counted %+v, want %d new_only", rollout.OverflowRule, got, extra)
	}
}

// A Tally counts at most MaxTallyRules rules of a limiter apart: the rest
// under OverflowRule, with nothing lost from the totals.
func TestTallyRulesBounded(t *testing.T) {
	const extra = 300
	tally := rollout.NewTally()
	ctx := context.Background()
	for i := range rollout.MaxTallyRules + extra {
		tally.RecordDecision(ctx, "edge", &rollout.Decision{Rule: fmt.Sprint("envoy_override_", i, "s"), Agreement: rollout.NewOnly})
	}
	tally.RecordDecision(ctx, "edge", &rollout.Decision{Rule: "envoy_override_0s", Agreement: rollout.Agree}) // a rule counted apart stays apart
	d, ok := tally.Divergence("edge")
	if !ok {
		t.Fatal("no divergence for edge")
	}
	if got, want := len(d.Rules), rollout.MaxTallyRules+1; got != want {
		t.Fatalf("%d rules counted apart, want %d (MaxTallyRules and %s)", got, want, rollout.OverflowRule)
	}
	if want := (rollout.Counts{Agree: 1, NewOnly: rollout.MaxTallyRules + extra}); d.Total != want {
		t.Errorf("total %+v, want %+v", d.Total, want)
	}
	byName := map[string]rollout.Counts{}
	for _, r := range d.Rules {
		byName[r.Rule] = r.Counts
	}
	if got := byName[rollout.OverflowRule]; got != (rollout.Counts{NewOnly: extra}) {
		t.Errorf("%s counted %+v, want %d new_only", rollout.OverflowRule, got, extra)
	}
	if got := byName["envoy_override_0s"]; got != (rollout.Counts{Agree: 1, NewOnly: 1}) {
		t.Errorf("envoy_override_0s counted %+v, want 1 agree and 1 new_only", got)
	}
}
