package observe_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// TestRolloutMetrics scrapes the rollout families over a real HTTP server
// after a shadow limiter's decisions were compared with a legacy check.
func TestRolloutMetrics(t *testing.T) {
	m := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	l, err := ratelimit.New(ratelimit.Config{
		Name: "checkout", Store: ratelimit.NewMemoryStore(), Enforcement: ratelimit.Shadow,
		Rules: []ratelimit.Rule{{
			Name: "per_user", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
			Match: map[string]ratelimit.Matcher{"user": ratelimit.Regex("^u")},
			Limit: 2, Period: time.Minute,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Init(l)
	ro := rollout.New(l, m)
	ctx := context.Background()
	for n := 1; n <= 4; n++ { // legacy admits 3, the rule 2: request 3 diverges
		ro.Check(ctx, ratelimit.Identifier{"user": "u1"}, n > 3)
	}
	ro.Check(ctx, ratelimit.Identifier{"user": "admin"}, true) // no rule matches; legacy blocks
	ro.Check(ctx, ratelimit.Identifier{"user": "u2"}, false, ratelimit.Cost(-1))

	want := `
# HELP ratelimit_rollout_decisions_total Requests whose legacy decision was compared with the rate limiter's; agreement is agree, new_only, legacy_only or failed (not compared).
# TYPE ratelimit_rollout_decisions_total counter
ratelimit_rollout_decisions_total{agreement="agree",rate_limiter="checkout",rule="(none)"} 0
ratelimit_rollout_decisions_total{agreement="failed",rate_limiter="checkout",rule="(none)"} 1
ratelimit_rollout_decisions_total{agreement="legacy_only",rate_limiter="checkout",rule="(none)"} 1
ratelimit_rollout_decisions_total{agreement="new_only",rate_limiter="checkout",rule="(none)"} 0
ratelimit_rollout_decisions_total{agreement="agree",rate_limiter="checkout",rule="per_user"} 3
ratelimit_rollout_decisions_total{agreement="failed",rate_limiter="checkout",rule="per_user"} 0
ratelimit_rollout_decisions_total{agreement="legacy_only",rate_limiter="checkout",rule="per_user"} 0
ratelimit_rollout_decisions_total{agreement="new_only",rate_limiter="checkout",rule="per_user"} 1
# HELP ratelimit_rollout_divergence_ratio Share of compared decisions that disagreed since the process started (the gate uses 24h of rollout_decisions_total).
# TYPE ratelimit_rollout_divergence_ratio gauge
ratelimit_rollout_divergence_ratio{rate_limiter="checkout"} 0.4
# HELP ratelimit_rollout_shadow 1 while the limiter's last compared decision was made in shadow mode, 0 when enforcing.
# TYPE ratelimit_rollout_shadow gauge
ratelimit_rollout_shadow{rate_limiter="checkout"} 1
`
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want), "ratelimit_rollout_decisions_total", "ratelimit_rollout_divergence_ratio", "ratelimit_rollout_shadow"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
	d, ok := m.Divergence("checkout")
	if !ok || d.Total != (rollout.Counts{Agree: 3, NewOnly: 1, LegacyOnly: 1, Failed: 1}) {
		t.Fatalf("divergence %+v", d)
	}
}

// TestShadowEvaluationsAreNotBlocks: what blocks no client is reported as
// "log" in rule_evaluations_total, never "block" or "banned": an exceeded
// limit rule of a limiter in shadow mode, banned or not, and a log rule's
// shadow ban (docs/design.md#bans). ratelimit:blocks:rate5m counts block
// and banned, so dashboards of blocks show only what clients saw. Init
// exports a limit rule's block and banned series at 0 (the limiter may
// enforce later), none for a log rule.
func TestShadowEvaluationsAreNotBlocks(t *testing.T) {
	tight := ratelimit.Rule{Name: "tight", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit, Limit: 1, Period: time.Minute}
	banned, logBanned := tight, tight
	banned.BanFor = time.Hour
	logBanned.BanFor, logBanned.Action = time.Hour, ratelimit.ActionLog
	const series = `ratelimit_rule_evaluations_total{action="%s",rate_limiter="shadowed",result="%s",rule="tight"} %d` + "\n"
	for _, c := range []struct {
		name string
		enf  ratelimit.Enforcement
		rule ratelimit.Rule
		want string
	}{
		{"shadow limiter", ratelimit.Shadow, tight,
			fmt.Sprintf(series+series+series, "limit", "allow", 1, "limit", "block", 0, "limit", "log", 2)},
		{"shadow limiter, ban", ratelimit.Shadow, banned,
			fmt.Sprintf(series+series+series+series, "limit", "allow", 1, "limit", "banned", 0, "limit", "block", 0, "limit", "log", 2)},
		{"log rule, ban", ratelimit.Enforce, logBanned,
			fmt.Sprintf(series+series, "log", "allow", 1, "log", "log", 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := observe.NewMetrics(observe.MetricsOptions{})
			l, err := ratelimit.New(ratelimit.Config{Name: "shadowed", Store: ratelimit.NewMemoryStore(), Enforcement: c.enf,
				Observer: m.Observe, Rules: []ratelimit.Rule{c.rule}})
			if err != nil {
				t.Fatal(err)
			}
			m.Init(l)
			for range 3 {
				if r := l.Check(context.Background(), ratelimit.Identifier{"user": "u"}); r.Blocked() {
					t.Fatalf("a check was blocked: %+v", r)
				}
			}
			want := `
# HELP ratelimit_rule_evaluations_total Rules evaluated by rate-limit checks; action is the rule's configured action, result allow|block|log|skip|banned.
# TYPE ratelimit_rule_evaluations_total counter
` + c.want
			if err := testutil.CollectAndCompare(m, strings.NewReader(want), "ratelimit_rule_evaluations_total"); err != nil {
				t.Error(err)
			}
		})
	}
}
