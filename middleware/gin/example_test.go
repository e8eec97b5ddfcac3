package ratelimitgin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gin-gonic/gin"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitgin "github.com/ratekit/ratekit/middleware/gin"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

func ExampleMiddleware() {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(), // or redisstore.Dial(ctx, redisURL)
		Rules: []ratelimit.Rule{{
			Name:            "per_endpoint_and_ip",
			Characteristics: []string{identifiers.Endpoint, identifiers.IP},
			Limit:           1,
			Period:          time.Minute,
		}},
	})
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ratelimitgin.Middleware(limiter, // before the routes
		ratelimitgin.WithProfile(ratelimitheaders.Legacy),
		ratelimitgin.WithSkip(func(c *gin.Context) bool { return c.FullPath() == "/healthz" }),
	))
	r.GET("/users/:id", func(c *gin.Context) { c.String(http.StatusOK, "user") })

	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/users/7", nil)
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Remaining"), rec.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 0 false
	// 429 0 true
}
