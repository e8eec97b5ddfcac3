package ratelimithttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

// A hand-written handler using a Guard directly; the adapters do exactly this.
func ExampleGuard() {
	limiter, _ := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name: "per_ip", Characteristics: []string{"ip"},
			Limit: 1, Period: time.Minute,
		}},
	})
	g := &ratelimithttp.Guard[*http.Request]{Profile: ratelimithttp.IETF}
	g.Guard.Limiters = []*ratelimit.Limiter{limiter}
	if err := g.Init(func(context.Context, *http.Request) ratelimit.Identifier {
		return ratelimit.Identifier{"ip": "192.0.2.1"}
	}); err != nil {
		panic(err)
	}
	handle := func(w http.ResponseWriter, r *http.Request) {
		g.Handle(r.Context(), r, w.Header(),
			func(_ *ratelimithttp.Decision, p *ratelimithttp.Problem) {
				w.Header().Set("Content-Type", ratelimithttp.ContentTypeProblem)
				w.WriteHeader(p.Status)
				_ = json.NewEncoder(w).Encode(p)
			},
			func(context.Context) int {
				fmt.Fprint(w, "hello")
				return http.StatusOK
			})
	}
	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		handle(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d %s cache=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Cache-Control"))
	}
	// Output:
	// 200 "per_ip";r=0;t=60 cache=""
	// 429 "per_ip";r=0;t=60 cache="no-store"
}

// Charge a resource budget after the handler with the cost it measured.
func ExampleMetered() {
	db, _ := ratelimit.New(ratelimit.Config{
		Name:  "db_utilization",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name: "db_seconds_per_namespace", Characteristics: []string{"root_namespace"},
			Limit: 300, Period: time.Minute,
		}},
	})
	g := adapter.Guard[ratelimithttp.Outcome]{Deferred: []ratelimithttp.Deferred{ratelimithttp.Metered(db, "db_duration_s")}}
	id := ratelimit.Identifier{"root_namespace": "gitlab-org"}

	ctx, meter := adapter.WithMeter(context.Background())
	if d := g.Check(ctx, id); !d.Blocked() { // peek: already over budget?
		adapter.AddCost(ctx, "db_duration_s", 1.25) // the handler's database time
	}
	g.Settle(ctx, id, ratelimithttp.Outcome{Status: 200, Meter: meter})

	res := db.Peek(ctx, id, ratelimit.Cost(0))
	fmt.Println(res.Info.Count)
	// Output: 1.25
}
