package ratelimitheaders_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// An adapter of your own: check the limiter, render the verdict in a
// profile, and answer a blocked request with the problem details.
func ExampleProfile_SetHeaders() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name: "per_ip", Characteristics: []string{"ip"},
			Limit: 1, Period: time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	handle := func(w http.ResponseWriter, r *http.Request) {
		id := ratelimit.Identifier{"ip": "192.0.2.1"}
		d := &ratelimitheaders.Decision{Results: []ratelimit.Result{limiter.Check(r.Context(), id)}}
		now := time.Now()
		ratelimitheaders.IETF.SetHeaders(w.Header(), d, now, 0)
		if d.Blocked() {
			p := ratelimitheaders.NewProblem(d, now)
			ratelimitheaders.WriteProblem(w, &p)
			return
		}
		fmt.Fprint(w, "hello")
	}
	for range 2 {
		w := httptest.NewRecorder()
		handle(w, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d %s cache=%q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Cache-Control"))
	}
	// Output:
	// 200 "per_ip";r=0;t=60 cache=""
	// 429 "per_ip";r=0;t=60 cache="no-store"
}
