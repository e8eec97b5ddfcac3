package ratelimitgin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
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
// and Cache-Control are already set when it runs; it writes the response
// (c.AbortWithStatusJSON, c.AbortWithStatus; the middleware aborts the chain).
// One that sets no status and writes nothing (which Gin would send as an
// empty 200) is followed by the default response.
type DenyHandler func(c *gin.Context, d *ratelimitheaders.Decision)

type config struct {
	guard.HTTP[*gin.Context]
	clientIP  bool
	ginEngine *gin.Engine // WithGinClientIP's, checked by Middleware
	deny      DenyHandler
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
func WithIPv6Prefix(bits int) Option { return set(guard.WithIPv6Prefix[Outcome]("ratelimitgin", bits)) }

// WithProfile selects the rate-limit headers (default ratelimitheaders.IETF).
func WithProfile(p ratelimitheaders.Profile) Option { return set(guard.WithProfile[Outcome](p)) }

// WithRetryAfterJitter adds up to max (whole seconds) to a blocked response's
// Retry-After, so that the blocked callers do not all retry at the reset.
func WithRetryAfterJitter(max time.Duration) Option {
	return set(guard.WithRetryAfterJitter[Outcome](max))
}

// WithIdentifier replaces the identifier builder.
func WithIdentifier(f func(*gin.Context) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = guard.Hook(f) })
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(*gin.Context, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = guard.PropertiesHook(f) })
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh routes differently; 0 checks without counting.
func WithCost(f func(*gin.Context) float64) Option {
	return optionFunc(func(c *config) { c.Cost = guard.Hook(f) })
}

// WithGinClientIP takes the ip from c.ClientIP(), for services whose engine
// (the one the middleware is used on) believes forwarding headers only from
// its proxies: configure it (engine.SetTrustedProxies, TrustedPlatform)
// before calling Middleware. Gin's default trusts every proxy, so any client
// would pick its own ip with an X-Forwarded-For header: Middleware panics if
// the engine believes one from an arbitrary peer, or if engine is nil.
func WithGinClientIP(engine *gin.Engine) Option {
	return optionFunc(func(c *config) { c.clientIP, c.ginEngine = true, engine })
}

// WithSkip exempts requests for which f returns true.
func WithSkip(f func(*gin.Context) bool) Option {
	return optionFunc(func(c *config) { c.Skip = guard.Hook(f) })
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// Middleware returns Gin middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; no limiter at all, a nil limiter in WithLimiters, or a Deferred
// without Limiter or Charge, panics here. Register it with Use before the
// routes.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) gin.HandlerFunc {
	c := &config{}
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitgin", c.defaultIdentifier)
	if c.clientIP {
		if err := checkEngine(c.ginEngine); err != nil {
			panic("ratelimitgin: WithGinClientIP: " + err.Error())
		}
	}
	return func(gc *gin.Context) {
		ctx := gc.Request.Context()
		if c.Skipped(ctx, gc) {
			gc.Next()
			return
		}
		c.Handle(ctx, gc, gc.Writer.Header(),
			func(d *ratelimitheaders.Decision, p *ratelimitheaders.Problem) {
				if c.deny != nil {
					c.deny(gc, d)
				}
				// A deny handler that answered nothing (Gin would send an
				// empty 200) leaves a blocked request to the default.
				if c.deny == nil || !gc.Writer.Written() && gc.Writer.Status() == http.StatusOK {
					gc.Header("Content-Type", ratelimitheaders.ContentTypeProblem) // kept by AbortWithStatusJSON
					gc.Header("X-Content-Type-Options", "nosniff")
					gc.AbortWithStatusJSON(p.Status, p)
				}
				gc.Abort() // in case a custom deny handler wrote without aborting
			},
			gc.AbortWithStatus,
			func(hctx context.Context) int {
				if hctx != ctx { // a cost meter was added
					gc.Request = gc.Request.WithContext(hctx)
				}
				gc.Next()
				return gc.Writer.Status()
			})
	}
}

func (c *config) defaultIdentifier(_ context.Context, gc *gin.Context) ratelimit.Identifier {
	r := gc.Request
	var ip netip.Addr
	if c.clientIP {
		ip = identifiers.PeerAddr(gc.ClientIP())
	} else {
		c.WarnForwarded("ratelimitgin", "WithTrustedProxies", r)
		ip = identifiers.HTTPClientIP(r, c.TrustedProxies)
	}
	id := identifiers.NewHTTP(r, netip.Addr{}, identifiers.RouteEndpoint(r.Method, gc.FullPath()))
	// A static route's pattern is the path Gin routed on, whatever form the
	// request's took: an engine with RemoveExtraSlash serves //api/x from
	// /api/x, and one with UseRawPath or UseEscapedPath routes on the
	// escaped form, so URL.Path would name another path than the route
	// served (a rule on /api/x not counting it, a skip rule on /healthz
	// exempting /%68ealthz served elsewhere).
	if fp := gc.FullPath(); fp != "" && !strings.ContainsAny(fp, ":*") {
		id[identifiers.Path] = fp
	}
	identifiers.SetIP(id, ip, c.IPv6Prefix)
	return id
}

// checkEngine reports an error unless engine's c.ClientIP() gives the socket
// peer of a request from an arbitrary peer (a documentation address, IPv4
// and IPv6) that sends every header of engine.RemoteIPHeaders. Gin offers no
// getter for its trusted proxies, so this asks ClientIP itself: it follows
// Gin's own decision, TrustedPlatform and ForwardedByClientIP included.
func checkEngine(engine *gin.Engine) error {
	if engine == nil {
		return errors.New("the engine is nil")
	}
	const client = "198.51.100.1"
	for _, peer := range []string{"192.0.2.1", "2001:db8::1"} {
		r := &http.Request{RemoteAddr: net.JoinHostPort(peer, "1234"), Header: http.Header{}}
		for _, name := range engine.RemoteIPHeaders {
			r.Header.Set(name, client)
		}
		c := gin.CreateTestContextOnly(nil, engine)
		c.Request = r
		if ip := c.ClientIP(); ip != peer {
			return fmt.Errorf("the engine's c.ClientIP() believes a forwarding header from any peer "+
				"(%s: %s from %s gave %s); Gin trusts every proxy by default: "+
				"call engine.SetTrustedProxies with yours before Middleware",
				strings.Join(engine.RemoteIPHeaders, ", "), client, peer, ip)
		}
	}
	return nil
}
