package ratelimithttp

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Option configures Middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)
type set guard.Setting[Outcome] // a setting every adapter offers

func (f optionFunc) apply(c *config) { f(c) }
func (s set) apply(c *config)        { s(&c.Settings) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// (but for a request that can never pass, ratelimitheaders.Decision.Never)
// and Cache-Control are already set when it runs; it writes status and body
// (ratelimitheaders.WriteProblem writes the default one). One that writes
// nothing (which the server would send as an empty 200) is followed by the
// default response.
type DenyHandler func(w http.ResponseWriter, r *http.Request, d *ratelimitheaders.Decision)

type config struct {
	guard.HTTP[*http.Request]
	mux  *http.ServeMux
	deny DenyHandler
}

// Outcome is what is known once the handler has finished, which a
// Deferred's Charge reads: Status (the response status, 200 if the handler
// never set one, 500 if it panicked), Meter (the request's cost meter, filled through
// adapter.AddCost) and Header (the response headers). Echo's and Gin's
// adapters share it.
type Outcome = guard.Outcome

// Deferred is a limiter charged after the handler, with a cost known only
// then (see adapter.Deferred). Before the handler it is peeked, and a caller
// it would block is rejected without running the handler. Build one with
// Metered or CountStatus, or by hand with a Charge that reads the Outcome.
type Deferred = adapter.Deferred[Outcome]

// Metered charges l with the named cost from the request's meter (for example
// "db_duration_s", added by a database wrapper through adapter.AddCost), when
// it is positive. Before the handler, callers already over budget are
// blocked.
func Metered(l *ratelimit.Limiter, cost string) Deferred { return guard.Metered[Outcome](l, cost) }

// CountStatus charges l with 1 only for responses with one of the statuses,
// for example http.StatusUnauthorized to count failed logins only. Before the
// handler, callers whom one more such outcome would put over the limit are
// blocked: with a limit of 5, the sixth attempt after five failures is
// rejected.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	return guard.CountStatus(l, statuses...)
}

// WithLimiters adds limiters checked after the first, in order (for example a
// protected-paths limiter beside the general one).
func WithLimiters(l ...*ratelimit.Limiter) Option { return set(guard.WithLimiters[Outcome](l...)) }

// WithDeferred adds limiters charged after the handler with a cost known only
// then (Metered, CountStatus), and peeked before it.
func WithDeferred(d ...Deferred) Option { return set(guard.WithDeferred(d...)) }

// WithClock sets the clock the headers and Retry-After are computed with
// (default time.Now), for tests. It is read once per checked request.
func WithClock(now func() time.Time) Option { return set(guard.WithClock[Outcome](now)) }

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return set(guard.WithTrustedProxies[Outcome](tp))
}

// WithIPv6Prefix sets the prefix length IPv6 client addresses are aggregated
// to in the ip property (default identifiers.DefaultIPv6Prefix, /64: one
// network is one client, so an attacker holding a /64 is not 2^64 clients;
// 128 keeps every address apart). ip_full always holds the whole address. It
// panics unless 1 <= bits <= 128.
func WithIPv6Prefix(bits int) Option {
	return set(guard.WithIPv6Prefix[Outcome]("ratelimithttp", bits))
}

// WithProfile selects the rate-limit headers (default ratelimitheaders.IETF).
func WithProfile(p ratelimitheaders.Profile) Option { return set(guard.WithProfile[Outcome](p)) }

// WithRetryAfterJitter adds a random delay of up to max (whole seconds) to the
// Retry-After of blocked responses, so that clients blocked in one window do
// not all retry at its reset (draft-ietf-httpapi-ratelimit-headers, section
// 8.5). It is never below the real reset, and the RateLimit fields and the
// problem details keep stating the real reset. The default is no jitter.
func WithRetryAfterJitter(max time.Duration) Option {
	return set(guard.WithRetryAfterJitter[Outcome](max))
}

// WithIdentifier replaces the identifier builder (identifiers.FromHTTP with
// the trusted proxies and mux of the other options).
func WithIdentifier(f func(*http.Request) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = guard.Hook(f) })
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user set by an earlier auth middleware.
func WithProperties(f func(*http.Request, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = guard.PropertiesHook(f) })
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh endpoints differently; 0 checks without
// counting.
func WithCost(f func(*http.Request) float64) Option {
	return optionFunc(func(c *config) { c.Cost = guard.Hook(f) })
}

// WithMux resolves the endpoint (the route pattern) with mux.Handler(r) before
// the mux has routed the request; use it when the middleware wraps mux.
func WithMux(mux *http.ServeMux) Option {
	return optionFunc(func(c *config) { c.mux = mux })
}

// WithSkip exempts requests for which f returns true (health checks, for example).
func WithSkip(f func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.Skip = guard.Hook(f) })
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// Middleware returns net/http middleware that checks every request against
// limiter and the limiters of WithLimiters. limiter may be nil when options
// give them all; no limiter at all, a nil limiter in WithLimiters, or a
// Deferred without Limiter or Charge, panics here (a programming error found
// at start-up).
func Middleware(limiter *ratelimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	c := &config{}
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimithttp", c.defaultIdentifier)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			if c.Skipped(ctx, r) {
				next.ServeHTTP(w, r)
				return
			}
			c.Handle(ctx, r, w.Header(),
				func(d *ratelimitheaders.Decision, p *ratelimitheaders.Problem) {
					if c.deny != nil {
						dw := &statusWriter{ResponseWriter: w}
						c.deny(dw, r, d)
						if dw.status != 0 {
							return
						}
						// It wrote nothing, which the server would send as
						// an empty 200: a blocked request gets the default.
					}
					ratelimitheaders.WriteProblem(w, p)
				},
				w.WriteHeader,
				func(hctx context.Context) int {
					if !c.Metering() { // nothing reads the status
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
	c.WarnForwarded("ratelimithttp", "WithTrustedProxies", r)
	return identifiers.FromHTTP(r, identifiers.HTTPOptions{TrustedProxies: c.TrustedProxies, Mux: c.mux, IPv6Prefix: c.IPv6Prefix})
}

// statusWriter records the response status for outcome hooks. Unwrap lets
// http.ResponseController reach the underlying writer (Hijack, deadlines);
// Hijack and Flush serve the handlers that assert http.Hijacker and
// http.Flusher instead (gorilla/websocket's Upgrade does), as Echo's and
// Gin's writers do.
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

// Hijack hijacks the underlying connection; http.ErrNotSupported where it
// cannot be (HTTP/2). A hijacked connection has no status the server saw.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status returns the final status, 200 if the handler wrote nothing.
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
