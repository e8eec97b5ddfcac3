package ratelimitecho_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/labstack/echo/v4"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitecho "github.com/ratekit/ratekit/middleware/echo"
)

func ExampleMiddleware() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(), // or redisstore.Dial(ctx, redisURL)
		// Anonymous callers by IP, signed-in ones by user: per user alone,
		// every anonymous caller would share the bucket of "<anonymous>".
		Rules: []ratelimit.Rule{{
			Name:            "per_anonymous_ip",
			Match:           map[string]ratelimit.Matcher{identifiers.User: ratelimit.Equal(identifiers.Anonymous)},
			Characteristics: []string{identifiers.IP},
			Limit:           1,
			Period:          time.Minute,
		}, {
			Name:            "per_user",
			Match:           map[string]ratelimit.Matcher{identifiers.User: ratelimit.Regex("^user:")},
			Characteristics: []string{identifiers.User},
			Limit:           100,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.IPExtractor = echo.ExtractIPDirect() // never let c.RealIP() trust headers blindly
	e.Use(ratelimitecho.Middleware(limiter,
		ratelimitecho.WithProperties(func(c echo.Context, id ratelimit.Identifier) {
			if u, ok := c.Get("user").(string); ok { // set by an auth middleware
				id[identifiers.User] = "user:" + u
			}
		}),
		ratelimitecho.WithSkipper(func(c echo.Context) bool { return c.Path() == "/healthz" }),
	))
	e.GET("/projects/:id", func(c echo.Context) error { return c.String(http.StatusOK, "project") })

	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/projects/42", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Content-Type"))
	}
	// Output:
	// 200 "per_anonymous_ip";r=0;t=60 text/plain; charset=UTF-8
	// 429 "per_anonymous_ip";r=0;t=60 application/problem+json
}

// A blocked request reaches the application's HTTPErrorHandler as an
// *echo.HTTPError; Decision tells it apart from other errors.
func ExampleDecision() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{identifiers.IP}, Limit: 1, Period: time.Minute}},
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if d, ok := ratelimitecho.Decision(err); ok { // headers and Retry-After are already set
			_ = c.String(http.StatusTooManyRequests, "slow down ("+d.ViolatedPolicies()[0]+")")
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.Use(ratelimitecho.Middleware(limiter))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Code, rec.Body.String())
	}
	// Output:
	// 200 hello
	// 429 slow down (per_ip)
}
