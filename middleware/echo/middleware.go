package ratelimitecho

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/httpverdict"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures Middleware.
type Option func(*config)

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs. Its error goes to Echo's
// HTTPErrorHandler, as a handler's would.
type DenyHandler func(c echo.Context, d *httpverdict.Decision) error

type config struct {
	guard      httpverdict.Guard
	proxies    identifiers.TrustedProxies
	realIP     bool
	identify   func(echo.Context) ratelimit.Identifier
	properties func(echo.Context, ratelimit.Identifier)
	deny       DenyHandler
	skipper    middleware.Skipper
}

// WithLimiters adds limiters checked after the first, in order.
func WithLimiters(l ...*ratelimit.Limiter) Option {
	return func(c *config) { c.guard.Limiters = append(c.guard.Limiters, l...) }
}

// WithDeferred adds limiters charged after the handler with a cost known only
// then (httpverdict.Metered, httpverdict.CountStatus), and peeked before it.
func WithDeferred(d ...httpverdict.Deferred) Option {
	return func(c *config) { c.guard.Deferred = append(c.guard.Deferred, d...) }
}

// WithIdentifier replaces the identifier builder entirely.
func WithIdentifier(f func(echo.Context) ratelimit.Identifier) Option {
	return func(c *config) { c.identify = f }
}

// WithProperties adds properties to the default identifier, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(echo.Context, ratelimit.Identifier)) Option {
	return func(c *config) { c.properties = f }
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return func(c *config) { c.proxies = tp }
}

// WithEchoIPExtractor takes the ip from c.RealIP(), for services that have
// set e.IPExtractor. Without an IPExtractor, RealIP trusts forwarding headers
// from anyone: do not use this option then.
func WithEchoIPExtractor() Option {
	return func(c *config) { c.realIP = true }
}

// WithSkipper exempts requests for which s returns true.
func WithSkipper(s middleware.Skipper) Option {
	return func(c *config) { c.skipper = s }
}

// WithDenyHandler replaces the default deny, which returns a *DeniedError
// for Echo's HTTPErrorHandler (see DeniedError).
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

// Middleware returns Echo middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; a nil limiter in WithLimiters, or a Deferred without Limiter or Charge,
// panics here. Register it with e.Use (or on a group), not e.Pre.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) echo.MiddlewareFunc {
	c := &config{skipper: middleware.DefaultSkipper}
	if limiter != nil {
		c.guard.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o(c)
	}
	if err := c.guard.Validate(); err != nil {
		panic("ratelimitecho: " + err.Error()) // a programming error, found at start-up
	}
	if c.identify == nil {
		c.identify = c.defaultIdentifier
	}
	if c.deny == nil {
		c.deny = c.denyError
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			if c.skipper(ec) {
				return next(ec)
			}
			var err error
			c.guard.Handle(ec.Request().Context(), c.identify(ec), ec.Response().Header(),
				func(d *httpverdict.Decision) { err = c.deny(ec, d) },
				func(ctx context.Context) int {
					if ctx != ec.Request().Context() { // a cost meter was added
						ec.SetRequest(ec.Request().WithContext(ctx))
					}
					err = next(ec)
					return status(ec, err)
				})
			return err
		}
	}
}

// DeniedError is the error of a blocked request: the Internal error of the
// *echo.HTTPError (Code 429) that the middleware returns, so that errors.As
// finds either. The response headers already carry the rate-limit headers,
// Retry-After, Cache-Control: no-store and X-Content-Type-Options: nosniff.
// Echo's default HTTPErrorHandler writes the problem details as an
// application/problem+json body (none for HEAD); a custom handler renders the
// 429 its own way, as it does every other error, with the Content-Type it
// chooses.
type DeniedError struct {
	Decision *httpverdict.Decision
	// Problem is the RFC 9457 body the default handler writes.
	Problem httpverdict.Problem
}

func (e *DeniedError) Error() string {
	return "ratelimitecho: rate limit exceeded: " + strings.Join(e.Decision.ViolatedPolicies(), ", ")
}

// Decision returns the decision of a request the middleware blocked, from the
// error the middleware returned (or any error wrapping it).
func Decision(err error) (*httpverdict.Decision, bool) {
	var de *DeniedError
	if errors.As(err, &de) {
		return de.Decision, true
	}
	return nil, false
}

// problemMessage is the Message of the *echo.HTTPError. Echo's default
// handler renders a json.Marshaler with c.JSON; marshalling records that the
// problem is the body, so that the response's Before hook labels it
// application/problem+json (c.JSON would say application/json) without
// mislabelling the body of a custom handler.
type problemMessage struct {
	p        httpverdict.Problem
	rendered *bool
}

var (
	_ error          = (*DeniedError)(nil)
	_ json.Marshaler = problemMessage{}
)

func (m problemMessage) MarshalJSON() ([]byte, error) {
	*m.rendered = true
	return json.Marshal(m.p)
}

// denyError is the default deny: an *echo.HTTPError for the HTTPErrorHandler.
func (c *config) denyError(ec echo.Context, d *httpverdict.Decision) error {
	p := httpverdict.NewProblem(d, c.guard.Clock())
	res := ec.Response()
	res.Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
	rendered := new(bool)
	res.Before(func() {
		if *rendered {
			res.Header().Set(echo.HeaderContentType, httpverdict.ContentTypeProblem)
		}
	})
	return &echo.HTTPError{Code: p.Status, Message: problemMessage{p, rendered}, Internal: &DeniedError{Decision: d, Problem: p}}
}

func (c *config) defaultIdentifier(ec echo.Context) ratelimit.Identifier {
	r := ec.Request()
	ip := identifiers.HTTPClientIP(r, c.proxies)
	if c.realIP {
		ip = identifiers.PeerAddr(ec.RealIP())
	}
	id := identifiers.NewHTTP(r, ip, identifiers.RouteEndpoint(r.Method, routePath(ec)))
	if c.properties != nil {
		c.properties(ec, id)
	}
	return id
}

// routePath returns the matched route template, or "" when no route matched.
// For 404 and 405 Echo still reports a path (of the tree node where matching
// stopped, registered for other methods), so unmatched requests are recognised
// by their handler instead: Echo's NotFoundHandler or MethodNotAllowedHandler,
// or the Allow list the router records for 405 and automatic OPTIONS.
func routePath(ec echo.Context) string {
	if ec.Path() == "" || ec.Get(echo.ContextKeyHeaderAllow) != nil {
		return ""
	}
	if h := funcPtr(ec.Handler()); h == notFound || h == methodNotAllowed {
		return ""
	}
	return ec.Path()
}

var (
	notFound         = funcPtr(echo.NotFoundHandler)
	methodNotAllowed = funcPtr(echo.MethodNotAllowedHandler)
)

func funcPtr(h echo.HandlerFunc) uintptr {
	if h == nil {
		return 0
	}
	return reflect.ValueOf(h).Pointer()
}

// status is the status the response has or will have: what was written, else
// what Echo's HTTPErrorHandler will write for err.
func status(ec echo.Context, err error) int {
	res := ec.Response()
	if res.Committed {
		return res.Status
	}
	if err == nil {
		return http.StatusOK
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he.Code
	}
	return http.StatusInternalServerError
}
