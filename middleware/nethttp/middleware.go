package ratelimithttp

import (
	"context"
	"net/http"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures Middleware: an option of this package, or a SharedOption,
// which every HTTP adapter takes.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it writes status and body.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d *Decision)

type config struct {
	Config[*http.Request]
	mux  *http.ServeMux
	deny DenyHandler
}

// WithIdentifier replaces the identifier builder (identifiers.FromHTTP with
// the trusted proxies and mux of the other options).
func WithIdentifier(f func(*http.Request) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) {
		c.Guard.Identify = func(_ context.Context, r *http.Request) ratelimit.Identifier { return f(r) }
	})
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user set by an earlier auth middleware.
func WithProperties(f func(*http.Request, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) {
		c.Guard.Properties = func(_ context.Context, r *http.Request, id ratelimit.Identifier) { f(r, id) }
	})
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh endpoints differently; 0 checks without
// counting.
func WithCost(f func(*http.Request) float64) Option {
	return optionFunc(func(c *config) {
		c.Guard.Cost = func(_ context.Context, r *http.Request) float64 { return f(r) }
	})
}

// WithMux resolves the endpoint (the route pattern) with mux.Handler(r) before
// the mux has routed the request; use it when the middleware wraps mux.
func WithMux(mux *http.ServeMux) Option {
	return optionFunc(func(c *config) { c.mux = mux })
}

// WithSkip exempts requests for which f returns true (health checks, for example).
func WithSkip(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) {
		c.Guard.Skip = func(_ context.Context, r *http.Request) bool { return f(r) }
	})
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// Middleware returns net/http middleware that checks every request against
// limiter and the limiters of WithLimiters. limiter may be nil when options
// give them all; a nil limiter in WithLimiters, or a Deferred without Limiter
// or Charge, panics here (a programming error found at start-up).
func Middleware(limiter *ratelimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	c := &config{}
	Build(&c.Config, "ratelimithttp", limiter, opts, func(o Option) { o.apply(c) }, c.defaultIdentifier)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if c.Guard.Skipped(ctx, r) {
				next.ServeHTTP(w, r)
				return
			}
			c.Guard.Handle(ctx, r, w.Header(),
				func(d *Decision, p *Problem) {
					if c.deny != nil {
						c.deny(w, r, d)
						return
					}
					writeProblem(w, p)
				},
				func(hctx context.Context) int {
					if !c.Guard.Guard.Metering() { // nothing reads the status
						next.ServeHTTP(w, r)
						return 0
					}
					if hctx != ctx { // a cost meter was added
						r = r.WithContext(hctx)
					}
					sw := &statusWriter{ResponseWriter: w}
					next.ServeHTTP(sw, r)
					return sw.Status()
				})
		})
	}
}

func (c *config) defaultIdentifier(_ context.Context, r *http.Request) ratelimit.Identifier {
	return identifiers.FromHTTP(r, identifiers.HTTPOptions{TrustedProxies: c.TrustedProxies, Mux: c.mux, IPv6Prefix: c.IPv6Prefix})
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
