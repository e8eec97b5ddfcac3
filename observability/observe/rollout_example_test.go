package observe_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

// A limiter in shadow mode beside a legacy check: every request's two
// decisions are counted in ratelimit_rollout_decisions_total.
func ExampleRolloutMetrics() {
	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(rm)

	limiter, err := ratelimit.New(ratelimit.Config{
		Name: "login", Store: ratelimit.NewMemoryStore(), Enforcement: ratelimit.Shadow,
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"}, Action: ratelimit.ActionLimit,
			Limit: 1, Period: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	rm.Init(limiter)
	ro := rollout.New(limiter, rm)
	for _, legacyBlocked := range []bool{false, true, false} {
		d := ro.Check(context.Background(), ratelimit.Identifier{"ip": "192.0.2.1"}, legacyBlocked)
		fmt.Println(d.Agreement, "block:", d.Block())
	}
	div, _ := rm.Divergence("login")
	fmt.Printf("divergence %.3f\n", div.Total.Ratio())
	// Output:
	// agree block: false
	// agree block: true
	// new_only block: false
	// divergence 0.333
}
