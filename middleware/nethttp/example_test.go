package ratelimithttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

func ExampleMiddleware() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(), // or redisstore.Dial(ctx, redisURL)
		Rules: []ratelimit.Rule{{
			Name:            "hello_per_ip",
			Match:           map[string]ratelimit.Matcher{identifiers.Endpoint: ratelimit.Equal("GET /hello")},
			Characteristics: []string{identifiers.IP},
			Limit:           2,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	handler := ratelimithttp.Middleware(limiter,
		ratelimithttp.WithMux(mux), // the middleware wraps the whole mux: resolve patterns up front
		ratelimithttp.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
	)(mux)

	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/hello", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "hello_per_ip";q=2;w=60
	// 200 "hello_per_ip";q=2;w=60
	// 429 "hello_per_ip";q=2;w=60
}

// Count failed logins only, and reject callers with too many before the
// handler runs.
func ExampleWithDeferred() {
	failed, err := ratelimit.New(ratelimit.Config{
		Name:  "failed_auth",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name: "failed_logins_per_ip", Characteristics: []string{identifiers.IP},
			Limit: 1, Period: time.Minute, BanFor: time.Hour,
		}},
	})
	if err != nil {
		panic(err)
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized) // wrong password, every time
	})
	handler := ratelimithttp.Middleware(nil,
		ratelimithttp.WithDeferred(ratelimithttp.CountStatus(failed, http.StatusUnauthorized)),
	)(login)

	for i := 0; i < 3; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// 401
	// 429
	// 429
}

// Charge a resource budget after the handler with the cost it measured: the
// handler reports its database time with adapter.AddCost, and the request
// after the budget is spent is rejected without running the handler.
func ExampleMetered() {
	db, err := ratelimit.New(ratelimit.Config{
		Name:  "db_utilization",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name: "db_seconds_per_ip", Characteristics: []string{"ip"},
			Limit: 2, Period: time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	handler := ratelimithttp.Middleware(nil,
		ratelimithttp.WithDeferred(ratelimithttp.Metered(db, "db_duration_s")),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adapter.AddCost(r.Context(), "db_duration_s", 1.25) // the handler's database time
	}))
	for i := 1; i <= 3; i++ {
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, httptest.NewRequest("GET", "/report", nil))
		fmt.Println(i, w.Code)
	}
	// Output:
	// 1 200
	// 2 200
	// 3 429
}
