package observe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// expectedScenario is the exposition of scenario() on limiter "api" plus one
// fail-open check and peek on limiter "broken". %[1]s is the namespace.
const expectedScenario = `
# HELP %[1]s_checks_total Rate-limit checks, fail-open included. error is true when the check failed open or was degraded.
# TYPE %[1]s_checks_total counter
%[1]s_checks_total{action="allow",error="false",matched="false",rate_limiter="api"} 1
%[1]s_checks_total{action="allow",error="false",matched="true",rate_limiter="api"} 5
%[1]s_checks_total{action="allow",error="true",matched="true",rate_limiter="api"} 1
%[1]s_checks_total{action="block",error="false",matched="true",rate_limiter="api"} 3
%[1]s_checks_total{action="allow",error="true",matched="false",rate_limiter="broken"} 1
# HELP %[1]s_rule_evaluations_total Rules evaluated by rate-limit checks; action is the rule's configured action, result allow|block|log|skip|banned.
# TYPE %[1]s_rule_evaluations_total counter
%[1]s_rule_evaluations_total{action="limit",rate_limiter="api",result="allow",rule="login_ban"} 1
%[1]s_rule_evaluations_total{action="limit",rate_limiter="api",result="banned",rule="login_ban"} 2
%[1]s_rule_evaluations_total{action="log",rate_limiter="api",result="allow",rule="paths"} 3
%[1]s_rule_evaluations_total{action="limit",rate_limiter="api",result="allow",rule="per_user"} 4
%[1]s_rule_evaluations_total{action="limit",rate_limiter="api",result="block",rule="per_user"} 1
%[1]s_rule_evaluations_total{action="log",rate_limiter="api",result="allow",rule="shadow_ip"} 5
%[1]s_rule_evaluations_total{action="log",rate_limiter="api",result="log",rule="shadow_ip"} 3
%[1]s_rule_evaluations_total{action="skip",rate_limiter="api",result="skip",rule="trusted"} 1
# HELP %[1]s_peeks_total Rate-limit peeks (read-only checks), fail-open included.
# TYPE %[1]s_peeks_total counter
%[1]s_peeks_total{error="false",rate_limiter="api"} 1
%[1]s_peeks_total{error="true",rate_limiter="api"} 1
%[1]s_peeks_total{error="true",rate_limiter="broken"} 1
# HELP %[1]s_limit The last resolved limit of a rule.
# TYPE %[1]s_limit gauge
%[1]s_limit{rate_limiter="api",rule="login_ban"} 1
%[1]s_limit{rate_limiter="api",rule="paths"} 5
%[1]s_limit{rate_limiter="api",rule="per_user"} 3
%[1]s_limit{rate_limiter="api",rule="shadow_ip"} 2
# HELP %[1]s_period_seconds The last resolved period of a rule, in seconds.
# TYPE %[1]s_period_seconds gauge
%[1]s_period_seconds{rate_limiter="api",rule="login_ban"} 60
%[1]s_period_seconds{rate_limiter="api",rule="paths"} 60
%[1]s_period_seconds{rate_limiter="api",rule="per_user"} 60
%[1]s_period_seconds{rate_limiter="api",rule="shadow_ip"} 60
`

// TestMetricsScenario runs real checks and scrapes the collector over HTTP,
// asserting every series and value, for the default and labkit namespaces.
func TestMetricsScenario(t *testing.T) {
	for _, kind := range storeKinds() {
		for _, ns := range []string{"", observe.LabkitNamespace} {
			t.Run(kind.name+"/"+cmpOr(ns, "default"), func(t *testing.T) {
				m := observe.NewMetrics(observe.MetricsOptions{Namespace: ns})
				reg := prometheus.NewPedanticRegistry()
				reg.MustRegister(m)
				srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				defer srv.Close()

				store, prefix := kind.store(t)
				ctx := context.Background()
				got := scenario(ctx, newLimiter(t, "api", store, prefix, m))
				if !slices.Equal(got, scenarioVerdicts) {
					t.Fatalf("verdicts = %v, want %v", got, scenarioVerdicts)
				}
				broken := newLimiter(t, "broken", kind.broken(t), prefix, m)
				if r := broken.Check(ctx, ratelimit.Identifier{"kind": "api", "ip": "10.9.9.9", "user": "u9", "path": "/b"}); r.Err == nil {
					t.Fatalf("broken store: check did not fail open: %+v", r)
				}
				broken.Peek(ctx, ratelimit.Identifier{"kind": "api", "ip": "10.9.9.9", "user": "u9", "path": "/b"})

				name := cmpOr(ns, observe.DefaultNamespace)
				fams := []string{"checks_total", "rule_evaluations_total", "peeks_total", "limit", "period_seconds"}
				for i, f := range fams {
					fams[i] = name + "_" + f
				}
				if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(fmt.Sprintf(expectedScenario, name)), fams...); err != nil {
					t.Fatal(err)
				}
				if ns == observe.LabkitNamespace && fams[0] != "gitlab_labkit_rate_limiter_checks_total" {
					t.Fatalf("labkit family name %q", fams[0])
				}
				// One duration observation per check (10 + 1), none for peeks.
				if n := histogramCount(t, reg, name+"_check_duration_seconds"); n != 11 {
					t.Fatalf("check_duration_seconds count = %d, want 11", n)
				}
				problems, err := testutil.GatherAndLint(reg)
				if err != nil || len(problems) > 0 {
					t.Fatalf("promlint: %v %v", problems, err)
				}
			})
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func histogramCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func TestMetricsInit(t *testing.T) {
	m := observe.NewMetrics(observe.MetricsOptions{})
	m.Init(newLimiter(t, "api", ratelimit.NewMemoryStore(), "", m))
	const want = `
# HELP ratelimit_checks_total Rate-limit checks, fail-open included. error is true when the check failed open or was degraded.
# TYPE ratelimit_checks_total counter
ratelimit_checks_total{action="allow",error="false",matched="false",rate_limiter="api"} 0
ratelimit_checks_total{action="allow",error="false",matched="true",rate_limiter="api"} 0
ratelimit_checks_total{action="allow",error="true",matched="false",rate_limiter="api"} 0
ratelimit_checks_total{action="allow",error="true",matched="true",rate_limiter="api"} 0
ratelimit_checks_total{action="block",error="false",matched="true",rate_limiter="api"} 0
ratelimit_checks_total{action="block",error="true",matched="true",rate_limiter="api"} 0
# HELP ratelimit_peeks_total Rate-limit peeks (read-only checks), fail-open included.
# TYPE ratelimit_peeks_total counter
ratelimit_peeks_total{error="false",rate_limiter="api"} 0
ratelimit_peeks_total{error="true",rate_limiter="api"} 0
# HELP ratelimit_limit The last resolved limit of a rule.
# TYPE ratelimit_limit gauge
ratelimit_limit{rate_limiter="api",rule="login_ban"} 1
ratelimit_limit{rate_limiter="api",rule="paths"} 5
ratelimit_limit{rate_limiter="api",rule="per_user"} 3
ratelimit_limit{rate_limiter="api",rule="shadow_ip"} 2
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_checks_total", "ratelimit_peeks_total", "ratelimit_limit"); err != nil {
		t.Fatal(err)
	}
	// Each rule's possible results, by its action (and ban).
	const evals = `
# HELP ratelimit_rule_evaluations_total Rules evaluated by rate-limit checks; action is the rule's configured action, result allow|block|log|skip|banned.
# TYPE ratelimit_rule_evaluations_total counter
ratelimit_rule_evaluations_total{action="limit",rate_limiter="api",result="allow",rule="login_ban"} 0
ratelimit_rule_evaluations_total{action="limit",rate_limiter="api",result="allow",rule="per_user"} 0
ratelimit_rule_evaluations_total{action="limit",rate_limiter="api",result="banned",rule="login_ban"} 0
ratelimit_rule_evaluations_total{action="limit",rate_limiter="api",result="block",rule="login_ban"} 0
ratelimit_rule_evaluations_total{action="limit",rate_limiter="api",result="block",rule="per_user"} 0
ratelimit_rule_evaluations_total{action="log",rate_limiter="api",result="allow",rule="paths"} 0
ratelimit_rule_evaluations_total{action="log",rate_limiter="api",result="allow",rule="shadow_ip"} 0
ratelimit_rule_evaluations_total{action="log",rate_limiter="api",result="log",rule="paths"} 0
ratelimit_rule_evaluations_total{action="log",rate_limiter="api",result="log",rule="shadow_ip"} 0
ratelimit_rule_evaluations_total{action="skip",rate_limiter="api",result="skip",rule="trusted"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(evals), "ratelimit_rule_evaluations_total"); err != nil {
		t.Fatal(err)
	}
}

// A dynamic limit is exported as resolved at the check, and follows changes.
func TestMetricsResolvedLimit(t *testing.T) {
	m := observe.NewMetrics(observe.MetricsOptions{})
	limit := int64(7)
	l, err := ratelimit.New(ratelimit.Config{Name: "dyn", Store: ratelimit.NewMemoryStore(), Observer: m.Observe, Rules: []ratelimit.Rule{{
		Name:       "by_plan",
		LimitFunc:  func(context.Context) (int64, error) { return limit, nil },
		PeriodFunc: func(context.Context) (time.Duration, error) { return 90 * time.Second, nil },
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{7, 12} {
		limit = n
		l.Check(context.Background(), ratelimit.Identifier{})
		want := fmt.Sprintf(`
# HELP ratelimit_limit The last resolved limit of a rule.
# TYPE ratelimit_limit gauge
ratelimit_limit{rate_limiter="dyn",rule="by_plan"} %d
# HELP ratelimit_period_seconds The last resolved period of a rule, in seconds.
# TYPE ratelimit_period_seconds gauge
ratelimit_period_seconds{rate_limiter="dyn",rule="by_plan"} 90
`, n)
		if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_limit", "ratelimit_period_seconds"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMetricsRuleStore(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := observe.NewMetrics(observe.MetricsOptions{Now: func() time.Time { return now }})
	var rs rulestore.Metrics = m // what the rule store reports through
	rs.RuleStoreRefresh("api", nil)
	now = now.Add(30 * time.Second)
	rs.RuleStoreRefresh("api", errors.New("i/o timeout"))          // keeps the old replica: age grows
	rs.RuleStoreRefresh("never", errors.New("connection refused")) // no replica at all
	rs.RuleStoreRefresh("fresh", nil)
	now = now.Add(15 * time.Second)
	var w rulestore.ConfigWatcher = m // known files are exported at 0, rejected or not
	w.ConfigWatched("config/available_limiters.yaml")
	w.ConfigWatched("config/rate_limits.yaml")
	w.ConfigWatched("bad\xffname.yaml")
	rs.ConfigRejected("config/rate_limits.yaml")
	rs.ConfigRejected("config/rate_limits.yaml")
	rs.ConfigRejected("bad\xffname.yaml") // invalid UTF-8 must not panic
	var a rulestore.ConfigAcceptor = m    // a load accepted after a rejection clears the gauge, not the counter
	a.ConfigAccepted("bad\xffname.yaml")
	w.ConfigWatched("config/rate_limits.yaml") // a known series keeps its value
	const want = `
# HELP ratelimit_rule_store_refreshes_total Refreshes of a limiter's published rules from the rule store; error is true when the refresh failed and the last good rules stayed in use.
# TYPE ratelimit_rule_store_refreshes_total counter
ratelimit_rule_store_refreshes_total{error="false",rate_limiter="api"} 1
ratelimit_rule_store_refreshes_total{error="true",rate_limiter="api"} 1
ratelimit_rule_store_refreshes_total{error="false",rate_limiter="fresh"} 1
ratelimit_rule_store_refreshes_total{error="true",rate_limiter="never"} 1
# HELP ratelimit_rule_store_replica_age_seconds Seconds since the limiter's rules were last refreshed from the rule store; +Inf when every refresh so far failed.
# TYPE ratelimit_rule_store_replica_age_seconds gauge
ratelimit_rule_store_replica_age_seconds{rate_limiter="api"} 45
ratelimit_rule_store_replica_age_seconds{rate_limiter="fresh"} 15
ratelimit_rule_store_replica_age_seconds{rate_limiter="never"} +Inf
# HELP ratelimit_config_rejections_total Rate-limit config files rejected whole (the previous rules stay in use).
# TYPE ratelimit_config_rejections_total counter
ratelimit_config_rejections_total{file="bad�name.yaml"} 1
ratelimit_config_rejections_total{file="config/available_limiters.yaml"} 0
ratelimit_config_rejections_total{file="config/rate_limits.yaml"} 2
# HELP ratelimit_config_rejected 1 while the last load of a rate-limit config file was rejected (the process runs on the previous rules), 0 once one is accepted.
# TYPE ratelimit_config_rejected gauge
ratelimit_config_rejected{file="bad�name.yaml"} 0
ratelimit_config_rejected{file="config/available_limiters.yaml"} 0
ratelimit_config_rejected{file="config/rate_limits.yaml"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// Events the observers ignore or cannot fully describe never panic: clear
// events, and hand-made events without a result or with a rule-less evaluation.
func TestOddEvents(t *testing.T) {
	m := observe.NewMetrics(observe.MetricsOptions{})
	ctx := context.Background()
	m.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventClear, Limiter: "api", Cleared: 3})
	m.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: "api"})
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Fatalf("%d series after events without results, want 0", n)
	}
	odd := ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: "api", Result: &ratelimit.Result{Action: ratelimit.ActionBlock,
		Exceeded: true, Evaluations: []ratelimit.Evaluation{{Exceeded: true, Blocked: true}}}}
	for _, o := range []observe.Observer{m, observe.NewTracing(), observe.NewBlockSummary(observe.BlockSummaryOptions{})} {
		o.Observe(ctx, odd)
	}
	if got := observe.DecisionAttributes(odd); len(got) != 5 {
		t.Fatalf("attributes of a rule-less block: %v", got)
	}
	if n := testutil.CollectAndCount(m, "ratelimit_checks_total"); n != 1 {
		t.Fatalf("checks_total series = %d, want 1", n)
	}
}

func TestEvaluationResult(t *testing.T) {
	limit := &ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit}
	log := &ratelimit.Rule{Name: "r", Action: ratelimit.ActionLog}
	for _, tc := range []struct {
		ev   ratelimit.Evaluation
		want string
	}{
		{ratelimit.Evaluation{Rule: limit}, "allow"},
		{ratelimit.Evaluation{Rule: limit, Exceeded: true, Blocked: true}, "block"},
		{ratelimit.Evaluation{Rule: limit, Exceeded: true, Blocked: true, Info: ratelimit.Info{Banned: true}}, "banned"},
		{ratelimit.Evaluation{Rule: log}, "allow"},
		{ratelimit.Evaluation{Rule: log, Exceeded: true}, "log"},
		{ratelimit.Evaluation{Rule: log, Exceeded: true, Info: ratelimit.Info{Banned: true}}, "banned"},
	} {
		if got := observe.EvaluationResult(&tc.ev); got != tc.want {
			t.Errorf("EvaluationResult(%+v) = %q, want %q", tc.ev, got, tc.want)
		}
	}
}

// The breaker state of an Init limiter is exported: closed while the store
// answers, open after the store failed three checks in a row.
func TestMetricsBreakerState(t *testing.T) {
	for _, c := range []struct {
		name   string
		store  ratelimit.Store
		checks int
		state  string
	}{
		{"store answers", ratelimit.NewMemoryStore(), 3, "closed"},
		{"store down", failingStore{}, 3, "open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := observe.NewMetrics(observe.MetricsOptions{})
			// A cooldown far longer than the test: the breaker cannot turn
			// half-open however slow the machine is.
			l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: c.store, Rules: testRules(), Observer: m.Observe,
				Logger: discard, Timeout: time.Second, Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			m.Init(l)
			for range c.checks {
				l.Check(context.Background(), ratelimit.Identifier{"kind": "api", "user": "u", "ip": "192.0.2.1"})
			}
			want := "\n# HELP ratelimit_breaker_state 1 for the current state of the limiter's circuit breaker (closed, open: checks fail open without calling the store, half-open: probing), 0 for the others.\n# TYPE ratelimit_breaker_state gauge\n"
			for _, s := range []string{"closed", "half-open", "open"} {
				v := "0"
				if s == c.state {
					v = "1"
				}
				want += `ratelimit_breaker_state{rate_limiter="api",state="` + s + `"} ` + v + "\n"
			}
			if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_breaker_state"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A check whose caller went away (ratelimit.ErrCanceled) failed open but
// says nothing about the store: it is not in the error SLI, which a store
// error is.
func TestCanceledCheckIsNoError(t *testing.T) {
	m := observe.NewMetrics(observe.MetricsOptions{})
	ctx := context.Background()
	for _, err := range []error{fmt.Errorf("check: %w", ratelimit.ErrCanceled), errDown} {
		m.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: "api",
			Result: &ratelimit.Result{Action: ratelimit.ActionAllow, Err: err}})
	}
	want := `
# HELP ratelimit_checks_total Rate-limit checks, fail-open included. error is true when the check failed open or was degraded.
# TYPE ratelimit_checks_total counter
ratelimit_checks_total{action="allow",error="false",matched="false",rate_limiter="api"} 1
ratelimit_checks_total{action="allow",error="true",matched="false",rate_limiter="api"} 1
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_checks_total"); err != nil {
		t.Fatal(err)
	}
}
