package ratelimitgin

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/httpverdict"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures Middleware.
type Option func(*config)

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it must write the response
// and abort (c.AbortWithStatusJSON, c.AbortWithStatus).
type DenyHandler func(c *gin.Context, d *httpverdict.Decision)

type config struct {
	guard      httpverdict.Guard
	proxies    identifiers.TrustedProxies
	clientIP   bool
	identify   func(*gin.Context) ratelimit.Identifier
	properties func(*gin.Context, ratelimit.Identifier)
	deny       DenyHandler
	skip       func(*gin.Context) bool
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
func WithIdentifier(f func(*gin.Context) ratelimit.Identifier) Option {
	return func(c *config) { c.identify = f }
}

// WithProperties adds properties to the default identifier, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(*gin.Context, ratelimit.Identifier)) Option {
	return func(c *config) { c.properties = f }
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return func(c *config) { c.proxies = tp }
}

// WithGinClientIP takes the ip from c.ClientIP(), for services that have
// called engine.SetTrustedProxies. Gin's default trusts every proxy: do not
// use this option then.
func WithGinClientIP() Option {
	return func(c *config) { c.clientIP = true }
}

// WithSkip exempts requests for which f returns true.
func WithSkip(f func(*gin.Context) bool) Option {
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

// Middleware returns Gin middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; a nil limiter in WithLimiters, or a Deferred without Limiter or Charge,
// panics here. Register it with Use before the routes.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) gin.HandlerFunc {
	c := &config{}
	if limiter != nil {
		c.guard.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o(c)
	}
	if err := c.guard.Validate(); err != nil {
		panic("ratelimitgin: " + err.Error()) // a programming error, found at start-up
	}
	if c.identify == nil {
		c.identify = c.defaultIdentifier
	}
	if c.deny == nil {
		c.deny = func(gc *gin.Context, d *httpverdict.Decision) {
			p := httpverdict.NewProblem(d, c.guard.Clock())
			gc.Header("Content-Type", httpverdict.ContentTypeProblem) // kept by AbortWithStatusJSON
			gc.Header("X-Content-Type-Options", "nosniff")
			gc.AbortWithStatusJSON(p.Status, p)
		}
	}
	return func(gc *gin.Context) {
		if c.skip != nil && c.skip(gc) {
			gc.Next()
			return
		}
		c.guard.Handle(gc.Request.Context(), c.identify(gc), gc.Writer.Header(),
			func(d *httpverdict.Decision) {
				c.deny(gc, d)
				gc.Abort() // in case a custom deny handler wrote without aborting
			},
			func(ctx context.Context) int {
				if ctx != gc.Request.Context() { // a cost meter was added
					gc.Request = gc.Request.WithContext(ctx)
				}
				gc.Next()
				return gc.Writer.Status()
			})
	}
}

func (c *config) defaultIdentifier(gc *gin.Context) ratelimit.Identifier {
	r := gc.Request
	ip := identifiers.HTTPClientIP(r, c.proxies)
	if c.clientIP {
		ip = identifiers.PeerAddr(gc.ClientIP())
	}
	id := identifiers.NewHTTP(r, ip, identifiers.RouteEndpoint(r.Method, gc.FullPath()))
	if c.properties != nil {
		c.properties(gc, id)
	}
	return id
}
