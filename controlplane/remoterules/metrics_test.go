package remoterules_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/promtest"
	"github.com/ratekit/ratekit/observability/observe"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

func TestPrometheusMetrics(t *testing.T) {
	n := 0
	srv := funcServer{f: func(context.Context, *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
		n++
		if n == 1 {
			return answer(5), nil
		}
		return &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{Rules: []*configv1.Rule{limitRule("per_namespace", 0)}}}, nil
	}}
	m := remoterules.NewPrometheusMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	c := newClient(t, dial(t, startGRPC(t, srv).addr), "web", func(cfg *remoterules.Config) { cfg.Metrics = m })
	ctx := context.Background()
	for range 3 {
		c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": "1"})
	}
	c.RulesFor(ctx, "rack_request", ratelimit.Identifier{"root_namespace": "2"}) // an invalid answer
	for _, tt := range []struct {
		name, outcome string
		want          float64
	}{
		{"ratekit_remoterules_lookups_total", "hit", 2},
		{"ratekit_remoterules_lookups_total", "miss", 2},
		{"ratekit_remoterules_calls_total", "ok", 1},
		{"ratekit_remoterules_calls_total", "invalid", 1},
	} {
		if got := series(t, reg, tt.name, tt.outcome); got != tt.want {
			t.Errorf("%s{outcome=%q} = %v, want %v", tt.name, tt.outcome, got, tt.want)
		}
	}
	if cnt := testutil.CollectAndCount(m, "ratekit_remoterules_call_seconds"); cnt != 1 {
		t.Errorf("call_seconds series: %d, want 1", cnt)
	}
	// The debug page's view (debug.Options.Remote) says the same.
	want := observe.RemoteStatus{Service: "web", Entries: 1, Hits: 2, Misses: 2, Calls: 2, Failures: 1, Invalid: 1}
	if got := c.RemoteStatus(); got != want {
		t.Errorf("RemoteStatus %+v, want %+v", got, want)
	}
}

// series returns the value of the counter name{limiter="rack_request",outcome=...}.
func series(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	v, ok := promtest.Counter(t, reg, name, map[string]string{"limiter": "rack_request", "outcome": outcome})
	if !ok {
		t.Fatalf("no series %s{outcome=%q}", name, outcome)
	}
	return v
}
