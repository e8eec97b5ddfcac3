package ratelimitecho

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Option configures Middleware. The options every HTTP adapter offers
// (WithLimiters, WithDeferred, WithClock, WithTrustedProxies, WithIPv6Prefix,
// WithProfile, WithRetryAfterJitter) behave as in ratelimithttp.
type Option interface{ apply(*config) }

type optionFunc func(*config)
type set guard.Setting[Outcome] // a setting every adapter offers

func (f optionFunc) apply(c *config) { f(c) }
func (s set) apply(c *config)        { s(&c.Settings) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// (but for a request that can never pass, ratelimitheaders.Decision.Never)
// and Cache-Control are already set when it runs. Its error goes to Echo's
// HTTPErrorHandler, as a handler's would. One that returns nil without
// answering (which Echo would send as an empty 200) is followed by the
// default deny.
type DenyHandler func(c echo.Context, d *ratelimitheaders.Decision) error

type config struct {
	guard.HTTP[echo.Context]
	realIP bool
	echo   *echo.Echo // WithEchoIPExtractor's, checked by Middleware
	deny   DenyHandler
	routes notFoundRoutes
}

// Outcome is what a Deferred's Charge reads once the handler has finished:
// Status, Meter and Header, the same type in every HTTP adapter.
type Outcome = guard.Outcome

// Deferred is a limiter peeked before the handler and charged after it.
type Deferred = adapter.Deferred[Outcome]

// Metered charges l with the named cost the handler added (adapter.AddCost).
func Metered(l *ratelimit.Limiter, cost string) Deferred { return guard.Metered[Outcome](l, cost) }

// CountStatus charges l with 1 per response with one of the statuses, for
// example http.StatusUnauthorized to count failed logins.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	return guard.CountStatus(l, statuses...)
}

// WithLimiters adds limiters checked after the first, in order.
func WithLimiters(l ...*ratelimit.Limiter) Option { return set(guard.WithLimiters[Outcome](l...)) }

// WithDeferred adds limiters charged after the handler (Metered, CountStatus).
func WithDeferred(d ...Deferred) Option { return set(guard.WithDeferred(d...)) }

// WithClock sets the clock of the headers (default time.Now), for tests.
func WithClock(now func() time.Time) Option { return set(guard.WithClock[Outcome](now)) }

// WithTrustedProxies sets whose forwarding headers are believed (default
// nobody's: the ip is the socket peer).
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return set(guard.WithTrustedProxies[Outcome](tp))
}

// WithIPv6Prefix sets the IPv6 prefix of ip (default 64); it panics outside 1..128.
func WithIPv6Prefix(bits int) Option {
	return set(guard.WithIPv6Prefix[Outcome]("ratelimitecho", bits))
}

// WithProfile selects the rate-limit headers (default ratelimitheaders.IETF).
func WithProfile(p ratelimitheaders.Profile) Option { return set(guard.WithProfile[Outcome](p)) }

// WithRetryAfterJitter adds up to max (whole seconds) to a blocked response's
// Retry-After, so that the blocked callers do not all retry at the reset.
func WithRetryAfterJitter(max time.Duration) Option {
	return set(guard.WithRetryAfterJitter[Outcome](max))
}

// WithIdentifier replaces the identifier builder.
func WithIdentifier(f func(echo.Context) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = guard.Hook(f) })
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(echo.Context, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = guard.PropertiesHook(f) })
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh routes differently; 0 checks without counting.
func WithCost(f func(echo.Context) float64) Option {
	return optionFunc(func(c *config) { c.Cost = guard.Hook(f) })
}

// WithEchoIPExtractor takes the ip from c.RealIP(), for services whose Echo
// (the one the middleware is used on) has an e.IPExtractor that believes
// forwarding headers only from its proxies (echo.ExtractIPFromXFFHeader or
// echo.ExtractIPFromRealIPHeader with trust options, echo.ExtractIPDirect):
// set it before calling Middleware. Without one, c.RealIP() believes
// X-Forwarded-For and X-Real-IP from anyone, so any client would pick its own
// ip: Middleware panics if e is nil, if e.IPExtractor is nil, or if it
// believes one of those headers from an arbitrary peer.
func WithEchoIPExtractor(e *echo.Echo) Option {
	return optionFunc(func(c *config) { c.realIP, c.echo = true, e })
}

// WithSkipper exempts requests for which s returns true.
func WithSkipper(s middleware.Skipper) Option {
	return optionFunc(func(c *config) { c.Skip = guard.Hook(s) })
}

// WithDenyHandler replaces the default deny, which returns a *DeniedError
// for Echo's HTTPErrorHandler (see DeniedError).
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// Middleware returns Echo middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; no limiter at all, a nil limiter in WithLimiters, or a Deferred
// without Limiter or Charge, panics here. Register it with e.Use (or on a
// group), not e.Pre.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) echo.MiddlewareFunc {
	c := &config{}
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitecho", c.defaultIdentifier)
	if c.realIP {
		if err := checkExtractor(c.echo); err != nil {
			panic("ratelimitecho: WithEchoIPExtractor: " + err.Error())
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(ec echo.Context) error {
			ctx := ec.Request().Context()
			if c.Skipped(ctx, ec) {
				return next(ec)
			}
			var err error
			c.Handle(ctx, ec, ec.Response().Header(),
				func(d *ratelimitheaders.Decision, p *ratelimitheaders.Problem) {
					if c.deny != nil {
						if err = c.deny(ec, d); err != nil || ec.Response().Committed {
							return
						}
						// It answered nothing, which Echo would send as an
						// empty 200: a blocked request gets the default.
					}
					err = denyError(ec, d, p)
				},
				func(status int) { err = ec.NoContent(status) },
				func(hctx context.Context) int {
					if hctx != ctx { // a cost meter was added
						ec.SetRequest(ec.Request().WithContext(hctx))
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
// Retry-After (but for a request that can never pass:
// ratelimitheaders.Decision.Never),
// Cache-Control: no-store and X-Content-Type-Options: nosniff.
// Echo's default HTTPErrorHandler writes the problem details as an
// application/problem+json body (none for HEAD); a custom handler renders the
// 429 its own way, as it does every other error, with the Content-Type it
// chooses.
type DeniedError struct {
	Decision *ratelimitheaders.Decision
	// Problem is the RFC 9457 body the default handler writes.
	Problem ratelimitheaders.Problem
}

func (e *DeniedError) Error() string {
	return "ratelimitecho: rate limit exceeded: " + strings.Join(e.Decision.ViolatedPolicies(), ", ")
}

// Decision returns the decision of a request the middleware blocked, from the
// error the middleware returned (or any error wrapping it).
func Decision(err error) (*ratelimitheaders.Decision, bool) {
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
	p        ratelimitheaders.Problem
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

// denyError is the default deny: an *echo.HTTPError for the HTTPErrorHandler,
// with p, the problem details of d.
func denyError(ec echo.Context, d *ratelimitheaders.Decision, p *ratelimitheaders.Problem) error {
	res := ec.Response()
	res.Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
	rendered := new(bool)
	res.Before(func() {
		if *rendered {
			res.Header().Set(echo.HeaderContentType, ratelimitheaders.ContentTypeProblem)
		}
	})
	return &echo.HTTPError{Code: p.Status, Message: problemMessage{*p, rendered}, Internal: &DeniedError{Decision: d, Problem: *p}}
}

func (c *config) defaultIdentifier(_ context.Context, ec echo.Context) ratelimit.Identifier {
	r := ec.Request()
	var ip netip.Addr
	if c.realIP && ec.Echo().IPExtractor != nil { // without one (removed since Middleware), RealIP believes anyone's headers
		ip = identifiers.PeerAddr(ec.RealIP())
	} else {
		c.WarnForwarded("ratelimitecho", "WithTrustedProxies", r)
		ip = identifiers.HTTPClientIP(r, c.TrustedProxies)
	}
	id := identifiers.NewHTTP(r, netip.Addr{}, identifiers.RouteEndpoint(r.Method, c.routes.routePath(ec)))
	// The path Echo routes on: the escaped one when the request's differs
	// from its decoded form. Decoded, /%68ealthz read as /healthz, so a rule
	// on the health path (skip_health_checks) exempted a request that Echo
	// served from another route (a catch-all).
	id[identifiers.Path] = echo.GetPath(r)
	identifiers.SetIP(id, ip, c.IPv6Prefix)
	return id
}

// checkExtractor reports an error unless e.IPExtractor gives the socket peer
// of a request from an arbitrary peer (a documentation address, IPv4 and
// IPv6) that sends X-Forwarded-For and X-Real-IP, the headers c.RealIP() and
// Echo's extractors read. Another header a custom extractor reads (a CDN's)
// is the service's choice and is not checked.
func checkExtractor(e *echo.Echo) error {
	if e == nil {
		return errors.New("the Echo is nil")
	}
	if e.IPExtractor == nil {
		return errors.New("e.IPExtractor is nil, so c.RealIP() believes X-Forwarded-For and X-Real-IP from anyone: " +
			"set e.IPExtractor (echo.ExtractIPFromXFFHeader with trust options, echo.ExtractIPDirect) before Middleware")
	}
	const client = "198.51.100.1"
	for _, peer := range []string{"192.0.2.1", "2001:db8::1"} {
		r, err := http.NewRequest(http.MethodGet, "/", nil) // a whole request, for an extractor that reads more
		if err != nil {
			return err
		}
		r.RemoteAddr = net.JoinHostPort(peer, "1234")
		r.Header.Set(echo.HeaderXForwardedFor, client)
		r.Header.Set(echo.HeaderXRealIP, client)
		if ip := e.IPExtractor(r); identifiers.PeerAddr(ip) != netip.MustParseAddr(peer) {
			return fmt.Errorf("e.IPExtractor believes a forwarding header from any peer "+
				"(%s, %s: %s from %s gave %q): trust only your proxies",
				echo.HeaderXForwardedFor, echo.HeaderXRealIP, client, peer, ip)
		}
	}
	return nil
}

// routePath returns the matched route template, or "" when no route matched.
// For 404 and 405 Echo still reports a path (of the tree node where matching
// stopped, registered for other methods), so unmatched requests are recognised
// by their handler instead: Echo's NotFoundHandler or MethodNotAllowedHandler,
// or the Allow list the router records for 405 and automatic OPTIONS. A 404
// route (e.RouteNotFound, and the catch-alls "/api" and "/api/*" that
// Group.Use registers so that a group's middleware sees its unmatched
// requests) reports its path and runs a handler of its own: a request is
// recognised as one it took when the router has a 404 route at that path and
// no route for the request's method.
func (t *notFoundRoutes) routePath(ec echo.Context) string {
	if ec.Path() == "" || ec.Get(echo.ContextKeyHeaderAllow) != nil {
		return ""
	}
	if h := funcPtr(ec.Handler()); h == notFound || h == methodNotAllowed {
		return ""
	}
	if t.tookBy404(ec) {
		return ""
	}
	return ec.Path()
}

// notFoundRoutes holds, per router and per route path, the methods routed at
// the path and whether a 404 route is: read from the router's Routes the
// first time a request reports the path, since Routes builds a slice of every
// route. It keeps only the paths of routes: at most one entry per route.
// Routes added after the first request to their path are not seen (Echo's
// router must not change while it serves anyway). A sync.Map, written once
// per path and then only read: a lock read by every request was contended.
type notFoundRoutes struct {
	paths sync.Map // routeKey -> pathRoutes
}

type routeKey struct {
	router *echo.Router
	path   string
}

type pathRoutes struct {
	notFound bool            // a 404 route has the path
	methods  map[string]bool // the methods with a route at the path
}

// tookBy404 reports whether the route ec matched is a 404 route.
func (t *notFoundRoutes) tookBy404(ec echo.Context) bool {
	e, path, method := ec.Echo(), ec.Path(), ec.Request().Method
	router := e.Router()
	if hr, ok := e.Routers()[ec.Request().Host]; ok { // as Echo picks the router
		router = hr
	}
	k := routeKey{router, path}
	if v, ok := t.paths.Load(k); ok {
		pr := v.(pathRoutes)
		return pr.notFound && !pr.methods[method]
	}
	pr := pathRoutes{methods: map[string]bool{}}
	for _, rt := range router.Routes() {
		switch {
		case rt.Path != path:
		case rt.Method == echo.RouteNotFound:
			pr.notFound = true
		default:
			pr.methods[rt.Method] = true
		}
	}
	if !pr.notFound && len(pr.methods) == 0 {
		return false // no route's path (a handler set it): not kept, so the map stays bounded
	}
	t.paths.Store(k, pr)
	return pr.notFound && !pr.methods[method]
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
// what Echo's default HTTPErrorHandler writes for err, which takes an
// *echo.HTTPError only as returned (a wrapped one is a 500) and prefers its
// Internal when that is an *echo.HTTPError too.
func status(ec echo.Context, err error) int {
	res := ec.Response()
	if res.Committed {
		return res.Status
	}
	if err == nil {
		return http.StatusOK
	}
	he, ok := err.(*echo.HTTPError) //nolint:errorlint // as Echo's default HTTPErrorHandler decides
	if !ok {
		return http.StatusInternalServerError
	}
	if in, ok := he.Internal.(*echo.HTTPError); ok { //nolint:errorlint // likewise
		return in.Code
	}
	return he.Code
}
