// The Gin example: GET /hello limited to 5 requests per minute per client IP
// by the ratelimitgin middleware. The sixth request within a minute gets 429
// with Retry-After, RateLimit headers and a problem+json body.
//
//	go run ./examples/gin -addr localhost:8082                                # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/gin -addr localhost:8082  # Redis, shared by every replica
//	for i in 1 2 3 4 5 6; do curl -si localhost:8082/hello | head -1; done
package main

import (
	"net/http"

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
// middleware (the limiter: httpexample.NewLimiter, 5 per minute per client
// IP).
func newHandler(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error) {
	r := gin.New()
	// Gin trusts every proxy by default; c.ClientIP() would believe any
	// X-Forwarded-For. The rate-limit middleware never uses it by default.
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, err
	}
	r.Use(gin.Recovery())
	r.Use(ratelimitgin.Middleware(limiter, ratelimitgin.WithTrustedProxies(tp))) // before the routes
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	probe := func(c *gin.Context) { c.String(http.StatusOK, "ok\n") } // skip_health_checks; /readyz: see nethttp
	r.GET("/healthz", probe)
	r.GET("/readyz", probe)
	return r, nil
}
