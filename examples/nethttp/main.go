// The net/http example: GET /hello limited to 5 requests per minute per client
// IP by the ratelimithttp middleware. The sixth request within a minute gets
// 429 with Retry-After, RateLimit headers and a problem+json body.
//
//	go run ./examples/nethttp -addr localhost:8080                                # embedded in-memory store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/nethttp -addr localhost:8080  # Redis, shared by every replica
//	for i in 1 2 3 4 5 6; do curl -si localhost:8080/hello | head -1; done
//
// Behind a load balancer, pass its addresses with -trusted-proxies so that
// X-Forwarded-For is believed from it, and only from it.
//
// /metrics and /debug/ratelimit are served on -internal-addr (default
// localhost:9100), never on the public port. With OTEL_EXPORTER_OTLP_ENDPOINT
// set (e.g. http://localhost:4318), every check is also a span and the metrics
// are pushed over OTLP/HTTP (exampleutil.StartOTel).
package main

import (
	"fmt"
	"net/http"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/identifiers"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

func main() { httpexample.Main("net/http", newHandler) }

// newHandler returns the mux serving GET /hello behind the rate-limit
// middleware (the limiter: httpexample.NewLimiter, 5 per minute per client IP).
func newHandler(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	// The probes, never limited: the limiter's skip_health_checks. /readyz
	// does not ask Redis: checks fail open while it is down, so the service
	// still serves, and a probe that failed then would take every replica
	// out of service at once.
	probe := func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /healthz", probe)
	mux.HandleFunc("GET /readyz", probe)
	mw := ratelimithttp.Middleware(limiter,
		ratelimithttp.WithMux(mux), // it wraps the whole mux: resolve the route pattern up front
		ratelimithttp.WithTrustedProxies(tp),
	)
	return mw(mux), nil
}
