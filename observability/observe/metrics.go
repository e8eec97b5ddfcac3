package observe

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ratelimit "github.com/ratekit/ratekit/core"
)

// DefaultNamespace prefixes every metric family unless MetricsOptions.Namespace
// is set. LabkitNamespace gives labkit's names (gitlab_labkit_rate_limiter_checks_total, ...).
const (
	DefaultNamespace = "ratelimit"
	LabkitNamespace  = "gitlab_labkit_rate_limiter"
)

// DefaultDurationBuckets are the check_duration_seconds buckets: a check is a
// map lookup in memory and one round trip to Redis, so they start at 100µs and
// end at the scale of the default 100ms timeout and beyond.
var DefaultDurationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Values of the result label of rule_evaluations_total (labkit's vocabulary).
const (
	ResultAllow  = "allow"
	ResultBlock  = "block"
	ResultLog    = "log"
	ResultSkip   = "skip"
	ResultBanned = "banned"
)

// Bounds of the rule label (docs/limits.md). Every rule name is a series
// that Prometheus keeps, and per-request rules (an Envoy override per
// period, a rules service's answers) can bring new names without end; so
// the names of a limiter's own rules and those of its per-request tiers
// (ratelimit.Evaluation.PerRequest, ratelimit.Result.RulePerRequest) have
// a budget each, first come first served, and per-request names can never
// take the slot of a rule the operator publishes later.
const (
	// MaxRuleSeries bounds the rule label values of one limiter's own rules
	// (its Config.Rules, SetRules: rate_limits.yaml, the rule store, the
	// application's defaults): the rules it evaluates at once
	// (ratelimit.MaxRules) always fit. Names beyond it are counted under
	// OverflowRule.
	MaxRuleSeries = ratelimit.MaxRules
	// MaxPerRequestRuleSeries bounds the rule label values that one
	// limiter's per-request rules (WithRules, Config.RuleSource) bring, names
	// without a label yet: one full answer of a rules service
	// (ratelimit.MaxRulesPerTier) fits. Names beyond it are counted under
	// OverflowRule. A limiter so has at most MaxRuleSeries +
	// MaxPerRequestRuleSeries + 1 rule label values.
	MaxPerRequestRuleSeries = ratelimit.MaxRulesPerTier
	// OverflowRule is the rule label of the evaluations of a limiter's rules
	// beyond MaxRuleSeries or MaxPerRequestRuleSeries; no rule name can take
	// it. Their limit and period gauges are not exported.
	OverflowRule = "(other)"
)

// MetricsOptions configures NewMetrics. The zero value is ready to use.
type MetricsOptions struct {
	// Namespace is the prefix of every family (default DefaultNamespace). Set it
	// to LabkitNamespace for labkit-compatible names, so that existing
	// dashboards and SLO alerts keep working. Use a classic metric name prefix
	// ([a-zA-Z_][a-zA-Z0-9_]*), which every Prometheus and exporter accepts.
	Namespace string
	// DurationBuckets are the buckets of check_duration_seconds, in seconds
	// (default DefaultDurationBuckets).
	DurationBuckets []float64
	// Now is the clock of rule_store_replica_age_seconds (default time.Now).
	Now func() time.Time
}

// Metrics is a Prometheus collector and an Observer. Register it once
// and give it to every limiter:
//
//	m := observe.NewMetrics(observe.MetricsOptions{})
//	prometheus.MustRegister(m)
//	cfg := ratelimit.Config{..., Observer: m.Observe} // each limiter's Config, for ratelimit.New
//
// Families (with the default namespace):
//
//	ratelimit_checks_total{rate_limiter, action, matched, error}          one per Check, fail-open included
//	ratelimit_rule_evaluations_total{rate_limiter, rule, action, result}  one per rule a Check evaluated
//	ratelimit_peeks_total{rate_limiter, error}                            one per Peek
//	ratelimit_limit{rate_limiter, rule}                                   last resolved limit
//	ratelimit_period_seconds{rate_limiter, rule}                          last resolved period
//	ratelimit_check_duration_seconds{rate_limiter}                        histogram of Check latency
//	ratelimit_rule_store_refreshes_total{rate_limiter, error}             rule store refreshes (RuleStoreRefresh)
//	ratelimit_rule_store_replica_age_seconds{rate_limiter}                time since the last good refresh
//	ratelimit_config_rejections_total{file}                               config files rejected whole (ConfigRejected; 0 from ConfigWatched)
//	ratelimit_config_rejected{file}                                       1 while a file's last load was rejected (ConfigRejected), 0 once one is accepted (ConfigAccepted; 0 from ConfigWatched)
//	ratelimit_breaker_state{rate_limiter, state}                          1 for the breaker's state (closed|open|half-open) of each Init limiter
//
// result is EvaluationResult's, but what blocked no client counts as log:
// the exceeded limit rules (banned or not) of a limiter in shadow mode and
// a log rule's ban; so result block and banned are what clients saw.
//
// error is "true" when the check failed open or left rules out (Result.Err !=
// nil || Result.Degraded: a rule missing a property, or per-request rules
// over MaxRules), as in labkit, but for a caller that went away
// (ratelimit.ErrCanceled), which says nothing about the store; so
// checks_total{error="true"} / checks_total is the error SLI. Labels only ever
// hold limiter and rule names, actions and booleans: never an identifier value.
// Clear is reported by logs only (as in labkit).
//
// A limiter has at most MaxRuleSeries rule label values for its own rules
// and MaxPerRequestRuleSeries for its per-request rules; the evaluations of
// rules beyond them are counted under OverflowRule.
//
// Observe finds each limiter's and rule's series once and keeps them, for at
// most 4,096 limiters and rules together (past that the cache is emptied
// and refilled): a check then costs no label lookup.
type Metrics struct {
	checks   *prometheus.CounterVec
	evals    *prometheus.CounterVec
	peeks    *prometheus.CounterVec
	limit    *prometheus.GaugeVec
	period   *prometheus.GaugeVec
	duration *prometheus.HistogramVec
	refresh  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	rejState *prometheus.GaugeVec // config_rejected: 1 while a file's last load was rejected
	ageDesc  *prometheus.Desc
	breaker  *prometheus.Desc
	now      func() time.Time
	series   seriesCache // the series Observe updates, found once
	rules    ruleLabels  // the rule label values given out

	mu       sync.Mutex
	lastGood map[string]time.Time          // limiter -> last successful refresh; zero: never
	limiters map[string]*ratelimit.Limiter // Init limiters, whose breaker state Collect reads
}

// breakerStates are the values of Limiter.BreakerState, each exported as a
// series so that an alert needs no knowledge of which ones exist.
var breakerStates = []string{"closed", "open", "half-open"}

var (
	_ Observer             = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// NewMetrics returns the collector; register it with a prometheus.Registerer.
func NewMetrics(opts MetricsOptions) *Metrics {
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	buckets := opts.DurationBuckets
	if len(buckets) == 0 {
		buckets = DefaultDurationBuckets
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, []string{"rate_limiter", "rule"})
	}
	return &Metrics{
		checks: counter("checks_total", "Rate-limit checks, fail-open included. error is true when the check failed open or was degraded.",
			"rate_limiter", "action", "matched", "error"),
		evals: counter("rule_evaluations_total", "Rules evaluated by rate-limit checks; action is the rule's configured action, result allow|block|log|skip|banned.",
			"rate_limiter", "rule", "action", "result"),
		peeks:  counter("peeks_total", "Rate-limit peeks (read-only checks), fail-open included.", "rate_limiter", "error"),
		limit:  gauge("limit", "The last resolved limit of a rule."),
		period: gauge("period_seconds", "The last resolved period of a rule, in seconds."),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "check_duration_seconds",
			Help: "Time spent in rate-limit checks, store round trip included.", Buckets: buckets}, []string{"rate_limiter"}),
		refresh: counter("rule_store_refreshes_total", "Refreshes of a limiter's published rules from the rule store; error is true when the refresh failed and the last good rules stayed in use.",
			"rate_limiter", "error"),
		rejected: counter("config_rejections_total", "Rate-limit config files rejected whole (the previous rules stay in use).", "file"),
		rejState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "config_rejected",
			Help: "1 while the last load of a rate-limit config file was rejected (the process runs on the previous rules), 0 once one is accepted."}, []string{"file"}),
		ageDesc: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "rule_store_replica_age_seconds"),
			"Seconds since the limiter's rules were last refreshed from the rule store; +Inf when every refresh so far failed.",
			[]string{"rate_limiter"}, nil),
		breaker: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "breaker_state"),
			"1 for the current state of the limiter's circuit breaker (closed, open: checks fail open without calling the store, half-open: probing), 0 for the others.",
			[]string{"rate_limiter", "state"}, nil),
		now:      now,
		lastGood: map[string]time.Time{},
		limiters: map[string]*ratelimit.Limiter{},
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.checks, m.evals, m.peeks, m.limit, m.period, m.duration, m.refresh, m.rejected, m.rejState}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
	ch <- m.ageDesc
	ch <- m.breaker
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for lim, t := range m.lastGood {
		age := math.Inf(1)
		if !t.IsZero() {
			age = math.Max(now.Sub(t).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(m.ageDesc, prometheus.GaugeValue, age, lim)
	}
	for name, l := range m.limiters {
		state := l.BreakerState()
		for _, s := range breakerStates {
			v := 0.0
			if s == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.breaker, prometheus.GaugeValue, v, name, s)
		}
	}
}

// Observe implements Observer.
func (m *Metrics) Observe(_ context.Context, e ratelimit.Event) {
	r := e.Result
	if r == nil { // clear: logs only
		return
	}
	lim := e.Limiter
	ls := m.series.limiter(lim)
	failed := storeFailed(r.Err) || r.Degraded
	switch e.Kind {
	case ratelimit.EventCheck:
		if v := slices.Index(verdictSlots[:], r.Action); v >= 0 {
			ls.checks[v][b2i(r.Matched)][b2i(failed)].get(func() prometheus.Counter {
				return m.checks.WithLabelValues(lim, string(r.Action), strconv.FormatBool(r.Matched), strconv.FormatBool(failed))
			}).Inc()
		} else {
			m.checks.WithLabelValues(lim, string(r.Action), strconv.FormatBool(r.Matched), strconv.FormatBool(failed)).Inc()
		}
		ls.duration.get(func() prometheus.Observer { return m.duration.WithLabelValues(lim) }).Observe(e.Duration.Seconds())
		for i := range r.Evaluations {
			ev := &r.Evaluations[i]
			if ev.Rule == nil {
				continue
			}
			res := EvaluationResult(ev)
			// What blocked no client is reported like a log rule's excess, never
			// as a block: a limiter in shadow mode blocks nothing, and a log
			// rule's ban is a shadow ban (docs/design.md#bans).
			if (res == ResultBlock || res == ResultBanned) && (r.Shadow || !ev.Blocked) {
				res = ResultLog
			}
			m.evaluation(lim, ev.Rule, ev.PerRequest, res)
		}
		if r.Skipped && r.Rule != nil {
			m.evaluation(lim, r.Rule, r.RulePerRequest, ResultSkip)
		}
	case ratelimit.EventPeek:
		ls.peeks[b2i(failed)].get(func() prometheus.Counter {
			return m.peeks.WithLabelValues(lim, strconv.FormatBool(failed))
		}).Inc()
	default:
		return
	}
	for i := range r.Evaluations {
		ev := &r.Evaluations[i]
		if ev.Rule == nil {
			continue
		}
		rs := m.rule(lim, ev.Rule.Name, ev.PerRequest)
		if rs.label == OverflowRule {
			continue
		}
		rs.limit.get(func() prometheus.Gauge { return m.limit.WithLabelValues(lim, ev.Rule.Name) }).Set(float64(ev.Info.Limit))
		rs.period.get(func() prometheus.Gauge { return m.period.WithLabelValues(lim, ev.Rule.Name) }).Set(ev.Info.Period.Seconds())
	}
}

// evaluation counts one evaluation of rule, of a per-request tier or not,
// with result res. A skip rule's evaluation is counted under action skip,
// whatever the rule says.
func (m *Metrics) evaluation(lim string, rule *ratelimit.Rule, perRequest bool, res string) {
	action := rule.Action
	if res == ResultSkip {
		action = ratelimit.ActionSkip
	}
	rs := m.rule(lim, rule.Name, perRequest)
	a, x := slices.Index(actionSlots[:], action), slices.Index(resultSlots[:], res)
	if a < 0 || x < 0 {
		m.evals.WithLabelValues(lim, rs.label, string(action), res).Inc()
		return
	}
	rs.evals[a][x].get(func() prometheus.Counter {
		return m.evals.WithLabelValues(lim, rs.label, string(action), res)
	}).Inc()
}

// rule returns the series of rule name of limiter lim, of a per-request
// tier or not, with the rule label they carry.
func (m *Metrics) rule(lim, name string, perRequest bool) *ruleSeries {
	return m.series.rule(lim, name, perRequest, func() string { return m.rules.label(lim, name, perRequest) })
}

// ruleLabels gives out the rule label values of each limiter, at most
// MaxRuleSeries names of its own rules and MaxPerRequestRuleSeries of its
// per-request rules. The zero value is ready to use.
type ruleLabels struct {
	mu       sync.Mutex
	limiters map[string]*limiterLabels
}

// limiterLabels are the rule names of one limiter given out.
type limiterLabels struct {
	names      map[string]struct{}
	perRequest int // of names, those given out to per-request rules
}

// label returns the rule label of rule name of limiter lim, of a
// per-request tier or not: its name while its tier's budget of the limiter
// has room (or the name has a label already), else OverflowRule.
func (l *ruleLabels) label(lim, name string, perRequest bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limiters == nil {
		l.limiters = map[string]*limiterLabels{}
	}
	ll := l.limiters[lim]
	if ll == nil {
		ll = &limiterLabels{names: map[string]struct{}{}}
		l.limiters[lim] = ll
	}
	if _, ok := ll.names[name]; ok {
		return name
	}
	if perRequest && ll.perRequest >= MaxPerRequestRuleSeries ||
		!perRequest && len(ll.names)-ll.perRequest >= MaxRuleSeries {
		return OverflowRule
	}
	ll.names[name] = struct{}{}
	if perRequest {
		ll.perRequest++
	}
	return name
}

// EvaluationResult names the outcome of one counting rule in labkit's
// vocabulary: "banned" while a ban is active (including the check that starts
// it), "block" for an exceeded limit rule, "log" for an exceeded log (shadow)
// rule, else "allow". A matched skip rule is "skip" (it has no Evaluation).
func EvaluationResult(ev *ratelimit.Evaluation) string {
	switch {
	case ev.Info.Banned:
		return ResultBanned
	case ev.Blocked:
		return ResultBlock
	case ev.Exceeded:
		return ResultLog
	}
	return ResultAllow
}

// Init pre-exports the series of a limiter and of its rules' evaluations
// with value 0, so that rates and error ratios exist before the first check
// (Prometheus "avoid missing metrics"), sets the limit and period gauges of its static rules, and exports
// the state of its circuit breaker from then on.
func (m *Metrics) Init(l *ratelimit.Limiter) {
	lim := l.Name()
	m.mu.Lock()
	m.limiters[lim] = l
	m.mu.Unlock()
	for _, s := range [][2]string{{"allow", "false"}, {"allow", "true"}, {"block", "true"}} {
		for _, failed := range []string{"false", "true"} {
			m.checks.WithLabelValues(lim, s[0], s[1], failed)
		}
	}
	m.peeks.WithLabelValues(lim, "false")
	m.peeks.WithLabelValues(lim, "true")
	m.duration.WithLabelValues(lim)
	for _, r := range l.Rules() {
		label := m.rule(lim, r.Name, false).label
		m.initEvaluations(lim, label, r)
		n, okN := r.Limit, r.LimitFunc == nil
		d, okD := r.Period, r.PeriodFunc == nil
		if r.Action == ratelimit.ActionSkip || !okN || !okD || label == OverflowRule {
			continue
		}
		m.limit.WithLabelValues(lim, label).Set(float64(n))
		m.period.WithLabelValues(lim, label).Set(d.Seconds())
	}
}

// initEvaluations pre-exports the evaluation series a rule can produce, so
// that a rule's first blocks show in rate() (a counter born at 15 has no
// increase to Prometheus).
func (m *Metrics) initEvaluations(lim, label string, r ratelimit.Rule) {
	action := r.Action
	if action == "" {
		action = ratelimit.ActionLimit
	}
	var results []string
	switch action {
	case ratelimit.ActionSkip:
		results = []string{ResultSkip}
	case ratelimit.ActionLog:
		results = []string{ResultAllow, ResultLog}
	default:
		results = []string{ResultAllow, ResultBlock}
	}
	if r.BanFor > 0 && action == ratelimit.ActionLimit { // a log rule's ban blocks nothing: it counts as log
		results = append(results, ResultBanned)
	}
	for _, res := range results {
		m.evals.WithLabelValues(lim, label, string(action), res)
	}
}

// RuleStoreRefresh records one refresh of a limiter's rule document from
// Redis: err nil on success (a missing document is a success). A success
// resets the limiter's replica age to zero. It implements rulestore.Metrics.
func (m *Metrics) RuleStoreRefresh(limiter string, err error) {
	limiter = labelValue(limiter)
	m.refresh.WithLabelValues(limiter, strconv.FormatBool(err != nil)).Inc()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.lastGood[limiter] = m.now()
	} else if _, ok := m.lastGood[limiter]; !ok {
		m.lastGood[limiter] = time.Time{} // never loaded: age +Inf
	}
}

// ConfigRejected records a config file (available_limiters.yaml,
// rate_limits.yaml) or rule document rejected whole; pass its path, base name
// or key. Its config_rejected gauge is 1 from then until ConfigAccepted. It
// implements rulestore.Metrics.
func (m *Metrics) ConfigRejected(file string) {
	file = labelValue(file)
	m.rejected.WithLabelValues(file).Inc()
	m.rejState.WithLabelValues(file).Set(1)
}

// ConfigAccepted records a load of a config file or rule document that was
// accepted (a missing file or document, which leaves no rules to reject,
// included): its config_rejected gauge is 0 until the next ConfigRejected.
// Pass the name ConfigRejected is given. The gauge, unlike the counter, says
// whether a process runs on rejected input now, a restarted one included:
// RatekitConfigRejected alerts on it. It implements rulestore.ConfigAcceptor:
// the rule store calls it with a bound limiter's key after each refresh that
// applied or kept its document.
func (m *Metrics) ConfigAccepted(file string) {
	m.rejState.WithLabelValues(labelValue(file)).Set(0)
}

// ConfigWatched exports the rejection counter and the config_rejected gauge
// of a config file or rule document at 0 once its owner knows it, before it
// is loaded (accepted or not): its first rejection is then an increase from
// 0, which a counter born at 1 is not to Prometheus. A series that exists
// keeps its value. Pass the name ConfigRejected will be given. It implements
// rulestore.ConfigWatcher: the rule store calls it with each bound limiter's
// key.
func (m *Metrics) ConfigWatched(file string) {
	file = labelValue(file)
	m.rejected.WithLabelValues(file)
	m.rejState.WithLabelValues(file)
}

// labelValue makes a caller-supplied string a valid label value: client_golang
// panics on invalid UTF-8, and a metrics call must never take a service down.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// storeFailed reports a fail-open error that says something about the store:
// a caller that went away (ratelimit.ErrCanceled) is not one.
func storeFailed(err error) bool { return err != nil && !errors.Is(err, ratelimit.ErrCanceled) }
