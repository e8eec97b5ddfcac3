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

// Per-request rules (an Envoy override per period, a rules service's
// answers) can bring any number of rule names to one limiter. Each name
// beyond observe.MaxRuleSeries is counted under observe.OverflowRule, so the
// series of a limiter stay bounded; its own rules (Init, or first seen) keep
// their names, and no count is lost.
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
// page, for as long as the process runs: per-request rule names beyond
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
