package httpverdict_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/httpverdict"
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
	g := &httpverdict.Guard{Limiters: []*ratelimit.Limiter{limiter}, Profile: httpverdict.IETF}
	handle := func(w http.ResponseWriter, r *http.Request) {
		d := g.Check(r.Context(), ratelimit.Identifier{"ip": "192.0.2.1"})
		g.SetHeaders(w.Header(), d)
		if d.Blocked() {
			httpverdict.WriteProblem(w, d, g.Clock())
			return
		}
		fmt.Fprint(w, "hello")
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
	g := &httpverdict.Guard{Deferred: []httpverdict.Deferred{httpverdict.Metered(db, "db_duration_s")}}
	id := ratelimit.Identifier{"root_namespace": "gitlab-org"}

	ctx, meter := ratelimit.WithMeter(context.Background())
	if d := g.Check(ctx, id); !d.Blocked() { // peek: already over budget?
		ratelimit.AddCost(ctx, "db_duration_s", 1.25) // the handler's database time
	}
	g.Settle(ctx, id, httpverdict.Outcome{Status: 200, Meter: meter})

	res := db.Peek(ctx, id, ratelimit.Cost(0))
	fmt.Println(res.Info.Count)
	// Output: 1.25
}
