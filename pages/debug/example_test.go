package debug_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

func Example() {
	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{})
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "api_by_user",
			Characteristics: []string{"user"},
			Limit:           1,
			Period:          time.Minute,
		}},
		Observer: blocks.Observe,
	})
	if err != nil {
		panic(err)
	}
	limiter.Check(context.Background(), ratelimit.Identifier{"user": "alice"})
	limiter.Check(context.Background(), ratelimit.Identifier{"user": "alice"}) // blocked

	mux := http.NewServeMux() // an internal listener in a real service
	mux.Handle("/debug/ratelimit", debug.New(debug.Options{Blocks: blocks}, limiter))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/debug/ratelimit?format=json")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var page debug.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		panic(err)
	}
	for _, l := range page.Limiters {
		for _, r := range l.Rules {
			fmt.Printf("%s/%s: limit %d per %gs, %d blocked\n", l.Name, r.Name, *r.Limit, *r.Period, r.Blocks.Total)
		}
	}
	// Output:
	// http_request/api_by_user: limit 1 per 60s, 1 blocked
}
