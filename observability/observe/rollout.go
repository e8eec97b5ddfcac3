package observe

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
)

// RolloutMetrics is a Prometheus collector and a rollout.Recorder: it counts
// the decisions of a shadow → enforce rollout (package rollout). Register it
// beside Metrics and give it to rollout.New:
//
//	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
//	prometheus.MustRegister(rm)
//	ro := rollout.New(limiter, rm)
//
// Families (with the default namespace):
//
//	ratelimit_rollout_decisions_total{rate_limiter, rule, agreement}  one per compared request
//	ratelimit_rollout_divergence_ratio{rate_limiter}                  divergent / compared since start
//	ratelimit_rollout_shadow{rate_limiter}                            1 while the last decision was in shadow mode
//
// agreement is agree, new_only, legacy_only or failed (the new limiter
// failed open: counted, never compared). rule is the new result's deciding
// rule, or "(none)"; as in Metrics, a limiter has at most MaxRuleSeries rule
// label values of its own rules (which always fit) and
// MaxPerRequestRuleSeries of its per-request rules besides "(none)", later
// rules count under OverflowRule. The gate over 24 hours is
//
//	sum by (rate_limiter) (increase(ratelimit_rollout_decisions_total{agreement=~"new_only|legacy_only"}[24h]))
//	  / sum by (rate_limiter) (increase(ratelimit_rollout_decisions_total{agreement!="failed"}[24h])) < 0.005
//
// which `ratekit rollout gate --prometheus URL` evaluates.
type RolloutMetrics struct {
	decisions *prometheus.CounterVec
	ratioDesc *prometheus.Desc
	modeDesc  *prometheus.Desc
	rules     ruleLabels // the rule label values given out

	mu     sync.Mutex
	tally  *rollout.Tally
	shadow map[string]bool
}

var (
	_ rollout.Recorder         = (*RolloutMetrics)(nil)
	_ rollout.DivergenceSource = (*RolloutMetrics)(nil)
	_ prometheus.Collector     = (*RolloutMetrics)(nil)
)

// NewRolloutMetrics returns the collector; only opts.Namespace is used.
func NewRolloutMetrics(opts MetricsOptions) *RolloutMetrics {
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	return &RolloutMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rollout_decisions_total",
			Help: "Requests whose legacy decision was compared with the rate limiter's; agreement is agree, new_only, legacy_only or failed (not compared)."},
			[]string{"rate_limiter", "rule", "agreement"}),
		ratioDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "rollout_divergence_ratio"),
			"Share of compared decisions that disagreed since the process started (the gate uses 24h of rollout_decisions_total).",
			[]string{"rate_limiter"}, nil),
		modeDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "rollout_shadow"),
			"1 while the limiter's last compared decision was made in shadow mode, 0 when enforcing.",
			[]string{"rate_limiter"}, nil),
		tally:  rollout.NewTally(),
		shadow: map[string]bool{},
	}
}

// Init pre-exports the decision series of a limiter and each of its
// current rules (and "(none)") with value 0. Prometheus' increase() counts
// nothing for a series' first sample, so a series that appears with its first
// decisions would lose them; a rule added later loses only its first scrape.
func (m *RolloutMetrics) Init(l *ratelimit.Limiter) {
	rules := []string{rollout.NoRule}
	for _, r := range l.Rules() {
		if r.Action != ratelimit.ActionSkip {
			rules = append(rules, r.Name)
		}
	}
	lim := labelValue(l.Name())
	for _, rule := range rules {
		for _, a := range []rollout.Agreement{rollout.Agree, rollout.NewOnly, rollout.LegacyOnly, rollout.Failed} {
			m.decisions.WithLabelValues(lim, m.ruleLabel(lim, rule, false), string(a))
		}
	}
}

// ruleLabel is the rule label of rule's decisions, a rule of a per-request
// tier or not: rollout.NoRule takes none of the limiter's MaxRuleSeries
// names, so that its own rules all fit.
func (m *RolloutMetrics) ruleLabel(lim, rule string, perRequest bool) string {
	if rule == rollout.NoRule {
		return rule
	}
	return m.rules.label(lim, labelValue(rule), perRequest)
}

// RecordDecision implements rollout.Recorder.
func (m *RolloutMetrics) RecordDecision(ctx context.Context, limiter string, d *rollout.Decision) {
	limiter = labelValue(limiter)
	m.decisions.WithLabelValues(limiter, m.ruleLabel(limiter, d.Rule, d.Result.RulePerRequest), string(d.Agreement)).Inc()
	m.tally.RecordDecision(ctx, limiter, d)
	m.mu.Lock()
	m.shadow[limiter] = d.Result.Shadow
	m.mu.Unlock()
}

// Divergence implements rollout.DivergenceSource (the debug page reads it).
func (m *RolloutMetrics) Divergence(limiter string) (rollout.Divergence, bool) {
	return m.tally.Divergence(limiter)
}

// Describe implements prometheus.Collector.
func (m *RolloutMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	ch <- m.ratioDesc
	ch <- m.modeDesc
}

// Collect implements prometheus.Collector.
func (m *RolloutMetrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.mu.Lock()
	shadow := make(map[string]bool, len(m.shadow))
	for k, v := range m.shadow {
		shadow[k] = v
	}
	m.mu.Unlock()
	for lim, s := range shadow {
		if d, ok := m.tally.Divergence(lim); ok {
			ch <- prometheus.MustNewConstMetric(m.ratioDesc, prometheus.GaugeValue, d.Total.Ratio(), lim)
		}
		v := 0.0
		if s {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.modeDesc, prometheus.GaugeValue, v, lim)
	}
}
