package rollout_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
)

func Example() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:        "http_request",
		Store:       ratelimit.NewMemoryStore(),
		Enforcement: ratelimit.Shadow, // counts, never blocks
		Rules: []ratelimit.Rule{{
			Name: "per_user", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
			Limit: 2, Period: time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	tally := rollout.NewTally() // or observe.NewRolloutMetrics for Prometheus
	ro := rollout.New(limiter, tally)

	legacyAllows := func(n int) bool { return n <= 3 } // the old limiter admits 3
	for n := 1; n <= 4; n++ {
		d := ro.Check(context.Background(), ratelimit.Identifier{"user": "alice"}, !legacyAllows(n))
		fmt.Printf("request %d: block=%v agreement=%s\n", n, d.Block(), d.Agreement)
	}
	div, _ := tally.Divergence("http_request")
	fmt.Printf("divergent %d of %d (%.0f%%)\n", div.Total.Divergent(), div.Total.Compared(), 100*div.Total.Ratio())
	fmt.Println(rollout.Gate("http_request", div.Total, rollout.MaxDivergence, 1).Pass)
	// Output:
	// request 1: block=false agreement=agree
	// request 2: block=false agreement=agree
	// request 3: block=false agreement=new_only
	// request 4: block=true agreement=agree
	// divergent 1 of 4 (25%)
	// false
}
