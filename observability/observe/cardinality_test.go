package observe_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// A limiter's own rules can bring any number of rule names over time (each
// publish may rename them; per-request rules have a budget of their own, see
// TestLocalRulesKeepTheirLabelsAfterPerRequestFlood). Each name beyond
// observe.MaxRuleSeries is counted under observe.OverflowRule, so the series
// of a limiter stay bounded; its rules at Init keep their names, and no
// count is lost.
func TestRuleSeriesBounded(t *testing.T) {
	m := observe.NewMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	l := newLimiter(t, "api", ratelimit.NewMemoryStore(), "", m)
	m.Init(l)
	const extra = observe.MaxRuleSeries + 300
	for i := range extra {
		rule := &ratelimit.Rule{Name: "envoy_override_" + strconv.Itoa(i) + "s", Action: ratelimit.ActionLimit}
		m.Observe(context.Background(), ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: "api",
			Result: &ratelimit.Result{Action: ratelimit.ActionAllow, Matched: true, Rule: rule, Evaluations: []ratelimit.Evaluation{{
				Rule: rule, Info: ratelimit.Info{Limit: 10, Period: time.Duration(i+1) * time.Second}}}}})
	}
	scenario(context.Background(), l) // the limiter's own rules, after the flood

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]map[string]bool{} // family -> rule label values
	var evaluations float64
	perUser := 0.0
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() != "rule" {
					continue
				}
				if series[f.GetName()] == nil {
					series[f.GetName()] = map[string]bool{}
				}
				series[f.GetName()][lp.GetValue()] = true
				if f.GetName() == "ratelimit_rule_evaluations_total" {
					evaluations += s.GetCounter().GetValue()
					if lp.GetValue() == "per_user" {
						perUser += s.GetCounter().GetValue()
					}
				}
			}
		}
	}
	for _, name := range []string{"ratelimit_rule_evaluations_total", "ratelimit_limit", "ratelimit_period_seconds"} {
		if n := len(series[name]); n == 0 || n > observe.MaxRuleSeries+1 {
			t.Errorf("%s: %d rule label values for one limiter, want 1 to %d", name, n, observe.MaxRuleSeries+1)
		}
	}
	if !series["ratelimit_rule_evaluations_total"][observe.OverflowRule] {
		t.Errorf("no evaluations under rule %q", observe.OverflowRule)
	}
	if series["ratelimit_limit"][observe.OverflowRule] {
		t.Errorf("a limit gauge under rule %q mixes the limits of unrelated rules", observe.OverflowRule)
	}
	// scenario evaluates the limiter's rules 20 times (see expectedScenario)
	if want := float64(extra + 20); evaluations != want {
		t.Errorf("%v evaluations counted, want %v: a folded rule's count was lost", evaluations, want)
	}
	if perUser != 5 {
		t.Errorf("per_user: %v evaluations under its own name, want 5", perUser)
	}
}

// The block summary keeps a count per (limiter, rule) pair for the debug
// page, for as long as the process runs: rule names beyond
// observe.MaxRuleSeries of one limiter are counted under observe.OverflowRule
// instead of a pair each, and no block is lost.
func TestBlockSummaryPairsBounded(t *testing.T) {
	bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: discard})
	const rules = observe.MaxRuleSeries + 300
	for i := range rules {
		rule := &ratelimit.Rule{Name: "envoy_override_" + strconv.Itoa(i) + "s"}
		for _, lim := range []string{"api", "jobs"} {
			bs.Observe(context.Background(), ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: lim,
				Result: &ratelimit.Result{Action: ratelimit.ActionBlock, Matched: true, Rule: rule}})
		}
	}
	pairs := map[string]int{}
	var total, overflow int64
	for _, b := range bs.Blocks() {
		pairs[b.Limiter]++
		total += b.Total
		if b.Rule == observe.OverflowRule {
			overflow += b.Total
		}
	}
	for _, lim := range []string{"api", "jobs"} {
		if pairs[lim] > observe.MaxRuleSeries+1 {
			t.Errorf("limiter %s: %d pairs kept, at most %d", lim, pairs[lim], observe.MaxRuleSeries+1)
		}
	}
	if total != 2*rules || overflow != 2*(rules-observe.MaxRuleSeries) {
		t.Errorf("%d blocks kept (%d under %s), want %d (%d)", total, overflow, observe.OverflowRule, 2*rules, 2*(rules-observe.MaxRuleSeries))
	}
}

// The rollout decisions carry the deciding rule's name: bounded the same way.
func TestRolloutRuleSeriesBounded(t *testing.T) {
	m := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	const rules = observe.MaxRuleSeries + 300
	for i := range rules {
		m.RecordDecision(context.Background(), "api", &rollout.Decision{Agreement: rollout.Agree, Rule: "envoy_override_" + strconv.Itoa(i) + "s"})
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]bool{}
	var decisions float64
	for _, f := range families {
		if f.GetName() != "ratelimit_rollout_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			decisions += s.GetCounter().GetValue()
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "rule" {
					labels[lp.GetValue()] = true
				}
			}
		}
	}
	if n := len(labels); n > observe.MaxRuleSeries+1 || !labels[observe.OverflowRule] {
		t.Errorf("%d rule label values for one limiter (%s among them: %v), want at most %d", n, observe.OverflowRule, labels[observe.OverflowRule], observe.MaxRuleSeries+1)
	}
	if decisions != rules {
		t.Errorf("%v decisions counted, want %d", decisions, rules)
	}
}

// A limiter's own rules always keep their names in the rollout decisions,
// as in Metrics: a limiter with ratelimit.MaxRules rules exports each under
// its name after Init, beside rollout.NoRule, and none under OverflowRule.
func TestRolloutOwnRulesFit(t *testing.T) {
	rules := make([]ratelimit.Rule, ratelimit.MaxRules)
	for i := range rules {
		rules[i] = ratelimit.Rule{Name: "rule_" + strconv.Itoa(i), Characteristics: []string{"user"}, Limit: 10, Period: time.Minute}
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	m := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	m.Init(l)
	last := &rollout.Decision{Agreement: rollout.Agree, Rule: rules[len(rules)-1].Name}
	m.RecordDecision(context.Background(), "api", last)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "ratelimit_rollout_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "rule" {
					labels[lp.GetValue()] += s.GetCounter().GetValue()
				}
			}
		}
	}
	if _, ok := labels[observe.OverflowRule]; ok || len(labels) != ratelimit.MaxRules+1 || labels[last.Rule] != 1 {
		t.Errorf("%d rule label values (%s: %v, %s: %v), want the %d rules and %s", len(labels),
			observe.OverflowRule, labels[observe.OverflowRule], last.Rule, labels[last.Rule], ratelimit.MaxRules, rollout.NoRule)
	}
}

// A rules service answers per request, and may name a new rule in every
// answer; a rule the operator publishes later (rate_limits.yaml, the rule
// store, the application's defaults) must still be seen under its own name
// in the metrics, the block summary and the rollout decisions: it is the rule
// an incident is about. The per-request names fill their own slots, and no
// more than them.
func TestLocalRulesKeepTheirLabelsAfterPerRequestFlood(t *testing.T) {
	ctx := context.Background()
	var set *ratelimit.RuleSet // the rules service's answer to the next check
	m := observe.NewMetrics(observe.MetricsOptions{})
	bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: discard})
	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, rm)
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(), Rules: testRules(),
		RuleSource: func(context.Context, string, ratelimit.Identifier) *ratelimit.RuleSet { return set },
		Observer:   observe.Multi(m, bs), Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	m.Init(l)
	rm.Init(l)
	ro := rollout.New(l, rm)
	answer := func(r ratelimit.Rule) {
		t.Helper()
		if set, err = ratelimit.CompileRules("remote", []ratelimit.Rule{r}); err != nil {
			t.Fatal(err)
		}
	}
	user := ratelimit.Identifier{"user": "u1"}
	for i := range ratelimit.MaxRules + 1 { // more names than a limiter had slots
		answer(ratelimit.Rule{Name: "remote_" + strconv.Itoa(i), Characteristics: []string{"user"}, Limit: 1, Period: time.Minute})
		ro.Check(ctx, user, false)
		ro.Check(ctx, user, false) // blocked
		answer(ratelimit.Rule{Name: "remote_skip_" + strconv.Itoa(i), Action: ratelimit.ActionSkip})
		ro.Check(ctx, user, false)
	}
	set = nil
	published := append(testRules(),
		ratelimit.Rule{Name: "published", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute},
		ratelimit.Rule{Name: "published_skip", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.Equal("vip")}})
	if err := l.SetRules(published); err != nil {
		t.Fatal(err)
	}
	ro.Check(ctx, ratelimit.Identifier{"user": "vip"}, false) // skipped
	ro.Check(ctx, user, false)
	if d := ro.Check(ctx, user, false); d.Rule != "published" || !d.Result.Blocked() {
		t.Fatalf("the published rule's check: %s, rule %s: want it blocked by published", d.Result.Action, d.Rule)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]bool{} // family -> rule label values
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "rule" {
					if labels[f.GetName()] == nil {
						labels[f.GetName()] = map[string]bool{}
					}
					labels[f.GetName()][lp.GetValue()] = true
				}
			}
		}
	}
	for _, name := range []string{"ratelimit_rule_evaluations_total", "ratelimit_rollout_decisions_total"} {
		// the limiter's own rules, the per-request ones' slots, OverflowRule (and rollout.NoRule)
		if n, most := len(labels[name]), len(published)+observe.MaxPerRequestRuleSeries+2; n > most || !labels[name][observe.OverflowRule] {
			t.Errorf("%s: %d rule label values (%s among them: %v), want at most %d, %s among them",
				name, n, observe.OverflowRule, labels[name][observe.OverflowRule], most, observe.OverflowRule)
		}
	}
	for _, c := range []struct{ family, rule string }{
		{"ratelimit_rule_evaluations_total", "published"},
		{"ratelimit_rule_evaluations_total", "published_skip"},
		{"ratelimit_limit", "published"},
		{"ratelimit_period_seconds", "published"},
		{"ratelimit_rollout_decisions_total", "published"},
		{"ratelimit_rollout_decisions_total", "published_skip"},
	} {
		if !labels[c.family][c.rule] {
			t.Errorf("%s: no series of rule %s (%d rule label values, %s among them: %v)", c.family, c.rule,
				len(labels[c.family]), observe.OverflowRule, labels[c.family][observe.OverflowRule])
		}
	}
	blocked := false
	for _, b := range bs.Blocks() {
		blocked = blocked || b.Limiter == "api" && b.Rule == "published"
	}
	if !blocked {
		t.Errorf("block summary: no pair of rule published")
	}
}
