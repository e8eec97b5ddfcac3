package ratelimitgin

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

// Option configures Middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it must write the response
// and abort (c.AbortWithStatusJSON, c.AbortWithStatus).
type DenyHandler func(c *gin.Context, d *ratelimithttp.Decision)

type config struct {
	guard    ratelimithttp.Guard[*gin.Context]
	proxies  identifiers.TrustedProxies
	clientIP bool
	deny     DenyHandler
}

// WithLimiters adds limiters checked after the first, in order.
func WithLimiters(l ...*ratelimit.Limiter) Option {
	return optionFunc(func(c *config) { c.guard.Guard.Limiters = append(c.guard.Guard.Limiters, l...) })
}

// WithDeferred adds limiters charged after the handler with a cost known only
// then (ratelimithttp.Metered, ratelimithttp.CountStatus), and peeked before it.
func WithDeferred(d ...ratelimithttp.Deferred) Option {
	return optionFunc(func(c *config) { c.guard.Guard.Deferred = append(c.guard.Guard.Deferred, d...) })
}

// WithIdentifier replaces the identifier builder.
func WithIdentifier(f func(*gin.Context) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) {
		c.guard.Identify = func(_ context.Context, gc *gin.Context) ratelimit.Identifier { return f(gc) }
	})
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(*gin.Context, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) {
		c.guard.Properties = func(_ context.Context, gc *gin.Context, id ratelimit.Identifier) { f(gc, id) }
	})
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh routes differently; 0 checks without counting.
func WithCost(f func(*gin.Context) float64) Option {
	return optionFunc(func(c *config) {
		c.guard.Cost = func(_ context.Context, gc *gin.Context) float64 { return f(gc) }
	})
}

// WithClock sets the clock the headers and Retry-After are computed with
// (default time.Now), for tests. It is read once per checked request.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.guard.Now = now })
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return optionFunc(func(c *config) { c.proxies = tp })
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
		c.guard.Skip = func(_ context.Context, gc *gin.Context) bool { return f(gc) }
	})
}

// WithDenyHandler replaces the default 429 problem+json response.
func WithDenyHandler(h DenyHandler) Option {
	return optionFunc(func(c *config) { c.deny = h })
}

// WithProfile selects the rate-limit headers (default ratelimithttp.IETF).
func WithProfile(p ratelimithttp.Profile) Option {
	return optionFunc(func(c *config) { c.guard.Profile = p })
}

// WithRetryAfterJitter adds a random delay of up to max (whole seconds) to the
// Retry-After of blocked responses, so that clients blocked in one window do
// not all retry at its reset; it is never below the real reset (see
// ratelimithttp.Guard.RetryAfterJitter). The default is no jitter.
func WithRetryAfterJitter(max time.Duration) Option {
	return optionFunc(func(c *config) { c.guard.RetryAfterJitter = max })
}

// Middleware returns Gin middleware that checks every request against limiter
// and the limiters of WithLimiters. limiter may be nil when options give them
// all; a nil limiter in WithLimiters, or a Deferred without Limiter or Charge,
// panics here. Register it with Use before the routes.
func Middleware(limiter *ratelimit.Limiter, opts ...Option) gin.HandlerFunc {
	c := &config{}
	if limiter != nil {
		c.guard.Guard.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	if err := c.guard.Init(c.defaultIdentifier); err != nil {
		panic("ratelimitgin: " + err.Error()) // a programming error, found at start-up
	}
	return func(gc *gin.Context) {
		ctx := gc.Request.Context()
		if c.guard.Skipped(ctx, gc) {
			gc.Next()
			return
		}
		c.guard.Handle(ctx, gc, gc.Writer.Header(),
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
	ip := identifiers.HTTPClientIP(r, c.proxies)
	if c.clientIP {
		ip = identifiers.PeerAddr(gc.ClientIP())
	}
	return identifiers.NewHTTP(r, ip, identifiers.RouteEndpoint(r.Method, gc.FullPath()))
}
