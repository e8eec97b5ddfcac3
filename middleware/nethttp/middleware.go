package ratelimithttp

import (
	"context"
	"net/http"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/httpverdict"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures Middleware.
type Option func(*config)

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it writes status and body.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d *httpverdict.Decision)

type config struct {
	guard    httpverdict.Guard
	ids      identifiers.HTTPOptions
	identify func(*http.Request) ratelimit.Identifier
	deny     DenyHandler
	skip     func(*http.Request) bool
}

// WithLimiters adds limiters checked after the first, in order (for example a
// protected-paths limiter beside the general one).
func WithLimiters(l ...*ratelimit.Limiter) Option {
	return func(c *config) { c.guard.Limiters = append(c.guard.Limiters, l...) }
}

// WithDeferred adds limiters charged after the handler with a cost known only
// then (httpverdict.Metered, httpverdict.CountStatus), and peeked before it.
func WithDeferred(d ...httpverdict.Deferred) Option {
	return func(c *config) { c.guard.Deferred = append(c.guard.Deferred, d...) }
}

// WithIdentifier replaces the identifier builder entirely.
func WithIdentifier(f func(*http.Request) ratelimit.Identifier) Option {
	return func(c *config) { c.identify = f }
}

// WithProperties adds properties to the default identifier, for example the
// authenticated user set by an earlier auth middleware.
func WithProperties(f func(*http.Request, ratelimit.Identifier)) Option {
	return func(c *config) { c.ids.Properties = f }
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return func(c *config) { c.ids.TrustedProxies = tp }
}

// WithMux resolves the endpoint (the route pattern) with mux.Handler(r) before
// the mux has routed the request; use it when the middleware wraps mux.
func WithMux(mux *http.ServeMux) Option {
	return func(c *config) { c.ids.Mux = mux }
}

// WithSkip exempts requests for which f returns true (health checks, for example).
func WithSkip(f func(*http.Request) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return func(c *config) { c.deny = h }
}

// WithProfile selects the rate-limit headers (default httpverdict.IETF).
func WithProfile(p httpverdict.Profile) Option {
	return func(c *config) { c.guard.Profile = p }
}

// WithRetryAfterJitter adds a random delay of up to max (whole seconds) to the
// Retry-After of blocked responses, so that clients blocked in one window do
// not all retry at its reset; it is never below the real reset (see
// httpverdict.Guard.RetryAfterJitter). The default is no jitter.
func WithRetryAfterJitter(max time.Duration) Option {
	return func(c *config) { c.guard.RetryAfterJitter = max }
}

// Middleware returns net/http middleware that checks every request against
// limiter and the limiters of WithLimiters. limiter may be nil when options
// give them all; a nil limiter in WithLimiters, or a Deferred without Limiter
// or Charge, panics here (a programming error found at start-up).
func Middleware(limiter *ratelimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	c := &config{}
	if limiter != nil {
		c.guard.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o(c)
	}
	if err := c.guard.Validate(); err != nil {
		panic("ratelimithttp: " + err.Error()) // a programming error, found at start-up
	}
	if c.identify == nil {
		ids := c.ids
		c.identify = func(r *http.Request) ratelimit.Identifier { return identifiers.FromHTTP(r, ids) }
	}
	if c.deny == nil {
		c.deny = func(w http.ResponseWriter, _ *http.Request, d *httpverdict.Decision) {
			httpverdict.WriteProblem(w, d, c.guard.Clock())
		}
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.skip != nil && c.skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			c.guard.Handle(r.Context(), c.identify(r), w.Header(),
				func(d *httpverdict.Decision) { c.deny(w, r, d) },
				func(ctx context.Context) int {
					if !c.guard.Metering() {
						next.ServeHTTP(w, r)
						return 0
					}
					sw := &statusWriter{ResponseWriter: w}
					next.ServeHTTP(sw, r.WithContext(ctx))
					return sw.Status()
				})
		})
	}
}

// statusWriter records the response status for outcome hooks. Unwrap lets
// http.ResponseController reach the underlying writer (Hijack, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx responses are not the final status
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status returns the final status, 200 if the handler wrote nothing.
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
