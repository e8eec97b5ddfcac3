// The Echo example: GET /hello limited to 5 requests per minute per client IP
// by the ratelimitecho middleware. The sixth request within a minute gets 429
// with Retry-After, RateLimit headers and a problem+json body.
//
//	go run ./examples/echo -addr localhost:8081                                # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/echo -addr localhost:8081  # Redis, shared by every replica
//	for i in 1 2 3 4 5 6; do curl -si localhost:8081/hello | head -1; done
package main

import (
	"net/http"

	"github.com/labstack/echo/v4"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/identifiers"
	ratelimitecho "github.com/ratekit/ratekit/middleware/echo"
)

func main() { httpexample.Main("echo", newHandler) }

// newHandler returns the Echo instance serving GET /hello behind the
// rate-limit middleware (the limiter: httpexample.NewLimiter, 5 per minute
// per client IP).
func newHandler(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error) {
	e := echo.New()
	e.HideBanner = true
	// Without an IPExtractor, c.RealIP() believes X-Forwarded-For from anyone.
	// The rate-limit middleware never uses it by default, but other code may.
	e.IPExtractor = echo.ExtractIPDirect()
	e.Use(ratelimitecho.Middleware(limiter, ratelimitecho.WithTrustedProxies(tp))) // e.Use, not e.Pre: the route is known
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	probe := func(c echo.Context) error { return c.String(http.StatusOK, "ok\n") } // skip_health_checks; /readyz: see nethttp
	e.GET("/healthz", probe)
	e.GET("/readyz", probe)
	return e, nil
}
