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
package main

import (
	"fmt"
	"net/http"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/identifiers"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

func main() { httpexample.Main("net/http", newHandler) }

// newHandler returns the mux serving GET /hello behind the rate-limit middleware.
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mw := ratelimithttp.Middleware(limiter,
		ratelimithttp.WithMux(mux), // it wraps the whole mux: resolve the route pattern up front
		ratelimithttp.WithTrustedProxies(tp),
	)
	return mw(mux), nil
}
