package ratelimitgin

import (
	"context"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

// Option configures Middleware: an option of this package, Gin's own or one
// every HTTP adapter shares (WithLimiters, WithDeferred, WithClock,
// WithTrustedProxies, WithIPv6Prefix, WithProfile, WithRetryAfterJitter: see their
// ratelimithttp namesakes).
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// sharedOption is a ratelimithttp.SharedOption as an Option of this package.
type sharedOption ratelimithttp.SharedOption

func (o sharedOption) apply(c *config) { o(&c.Shared) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it must write the response
// and abort (c.AbortWithStatusJSON, c.AbortWithStatus).
type DenyHandler func(c *gin.Context, d *ratelimithttp.Decision)

type config struct {
	ratelimithttp.Config[*gin.Context]
	clientIP bool
	deny     DenyHandler
}

// WithLimiters adds limiters checked after the first, in order; see
// ratelimithttp.WithLimiters.
func WithLimiters(l ...*ratelimit.Limiter) Option {
	return sharedOption(ratelimithttp.WithLimiters(l...))
}

// WithDeferred adds limiters charged after the handler and peeked before it; see
// ratelimithttp.WithDeferred.
func WithDeferred(d ...ratelimithttp.Deferred) Option {
	return sharedOption(ratelimithttp.WithDeferred(d...))
}

// WithClock sets the clock the headers and Retry-After are computed with; see
// ratelimithttp.WithClock.
func WithClock(now func() time.Time) Option {
	return sharedOption(ratelimithttp.WithClock(now))
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed; see
// ratelimithttp.WithTrustedProxies.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return sharedOption(ratelimithttp.WithTrustedProxies(tp))
}

// WithIPv6Prefix sets the prefix length IPv6 client addresses are aggregated
// to in the ip property (default /64); see ratelimithttp.WithIPv6Prefix.
func WithIPv6Prefix(bits int) Option {
	return sharedOption(ratelimithttp.WithIPv6Prefix(bits))
}

// WithProfile selects the rate-limit headers (default ratelimithttp.IETF); see
// ratelimithttp.WithProfile.
func WithProfile(p ratelimithttp.Profile) Option {
	return sharedOption(ratelimithttp.WithProfile(p))
}

// WithRetryAfterJitter adds a random delay of up to max to Retry-After; see
// ratelimithttp.WithRetryAfterJitter.
func WithRetryAfterJitter(max time.Duration) Option {
	return sharedOption(ratelimithttp.WithRetryAfterJitter(max))
}

// WithIdentifier replaces the identifier builder.
func WithIdentifier(f func(*gin.Context) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) {
		c.Guard.Identify = func(_ context.Context, gc *gin.Context) ratelimit.Identifier { return f(gc) }
	})
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(*gin.Context, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) {
		c.Guard.Properties = func(_ context.Context, gc *gin.Context, id ratelimit.Identifier) { f(gc, id) }
	})
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh routes differently; 0 checks without counting.
func WithCost(f func(*gin.Context) float64) Option {
	return optionFunc(func(c *config) {
		c.Guard.Cost = func(_ context.Context, gc *gin.Context) float64 { return f(gc) }
	})
}

// WithGinClientIP takes the ip from c.ClientIP(), for services that have
// called engine.SetTrustedProxies. Gin's default trusts every proxy: do not
// use this option then.
func WithGinClientIP() Option {
	return optionFunc(func(c *config) { c.clientIP = true })
}

// WithSkip exempts requests for which f returns true.
func WithSkip(f func(*gin.Context) bool) Option {
	return optionFunc(func(c *config) {
		c.Guard.Skip = func(_ context.Context, gc *gin.Context) bool { return f(gc) }
	})
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// Middleware returns Gin middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; a nil limiter in WithLimiters, or a Deferred without Limiter or Charge,
// panics here. Register it with Use before the routes.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) gin.HandlerFunc {
	c := &config{}
	ratelimithttp.Build(&c.Config, "ratelimitgin", limiter, opts, func(o Option) { o.apply(c) }, c.defaultIdentifier)
	return func(gc *gin.Context) {
		ctx := gc.Request.Context()
		if c.Guard.Skipped(ctx, gc) {
			gc.Next()
			return
		}
		c.Guard.Handle(ctx, gc, gc.Writer.Header(),
			func(d *ratelimithttp.Decision, p *ratelimithttp.Problem) {
				if c.deny != nil {
					c.deny(gc, d)
				} else {
					gc.Header("Content-Type", ratelimithttp.ContentTypeProblem) // kept by AbortWithStatusJSON
					gc.Header("X-Content-Type-Options", "nosniff")
					gc.AbortWithStatusJSON(p.Status, p)
				}
				gc.Abort() // in case a custom deny handler wrote without aborting
			},
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
	ip := identifiers.HTTPClientIP(r, c.TrustedProxies)
	if c.clientIP {
		ip = identifiers.PeerAddr(gc.ClientIP())
	}
	id := identifiers.NewHTTP(r, netip.Addr{}, identifiers.RouteEndpoint(r.Method, gc.FullPath()))
	identifiers.SetIP(id, ip, c.IPv6Prefix)
	return id
}
