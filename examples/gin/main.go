// The Gin example: GET /hello limited to 5 requests per minute per client IP
// by the ratelimitgin middleware. The sixth request within a minute gets 429
// with Retry-After, RateLimit headers and a problem+json body.
//
//	go run ./examples/gin -addr localhost:8080                                # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/gin -addr localhost:8080  # Redis, shared by every replica
//	for i in 1 2 3 4 5 6; do curl -si localhost:8080/hello | head -1; done
package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitgin "github.com/ratekit/ratekit/middleware/gin"
)

func main() {
	gin.SetMode(gin.ReleaseMode)
	httpexample.Main("gin", newHandler)
}

// newHandler returns the Gin engine serving GET /hello behind the rate-limit
// middleware.
func newHandler(store ratelimit.Store, keyPrefix string, tp identifiers.TrustedProxies) (http.Handler, error) {
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:      "http_request",
		Store:     store,
		KeyPrefix: keyPrefix,
		Rules: []ratelimit.Rule{{
			Name:            "hello_per_ip",
			Description:     "5 requests per minute per client IP",
			Match:           map[string]ratelimit.Matcher{identifiers.Endpoint: ratelimit.Equal("GET /hello")},
			Characteristics: []string{identifiers.IP},
			Limit:           ratelimit.Static(5),
			Period:          ratelimit.StaticPeriod(time.Minute),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	r := gin.New()
	// Gin trusts every proxy by default; c.ClientIP() would believe any
	// X-Forwarded-For. The rate-limit middleware never uses it by default.
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	r.Use(gin.Recovery())
	r.Use(ratelimitgin.Middleware(limiter, ratelimitgin.WithTrustedProxies(tp))) // before the routes
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	return r, nil
}
