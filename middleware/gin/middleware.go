package ratelimitgin

import (
	"context"
	"net/netip"
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

func (f optionFunc) apply(c *config) { f(c) }

// DenyHandler answers a blocked request. The rate-limit headers, Retry-After
// and Cache-Control are already set when it runs; it must write the response
// and abort (c.AbortWithStatusJSON, c.AbortWithStatus).
type DenyHandler func(c *gin.Context, d *ratelimitheaders.Decision)

type config struct {
	guard.HTTP[*gin.Context]
	clientIP bool
	deny     DenyHandler
}

// Outcome is what is known once the handler has finished, which a
// Deferred's Charge reads: Status, Meter (the request's cost meter, filled
// through adapter.AddCost) and Header (the response headers). It is the same
// type in every HTTP adapter.
type Outcome = guard.Outcome

// Deferred is a limiter charged after the handler, with a cost known only
// then (see adapter.Deferred); before the handler it is peeked. Build one
// with Metered or CountStatus, or by hand with a Charge that reads the
// Outcome.
type Deferred = adapter.Deferred[Outcome]

// Metered charges l with the named cost from the request's meter (for example
// "db_duration_s", added through adapter.AddCost), when it is positive.
// Callers already over budget are blocked before the handler.
func Metered(l *ratelimit.Limiter, cost string) Deferred { return guard.Metered[Outcome](l, cost) }

// CountStatus charges l with 1 only for responses with one of the statuses,
// for example http.StatusUnauthorized to count failed logins. Callers whom one
// more such outcome would put over the limit are blocked before the handler.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	return guard.CountStatus(l, statuses...)
}

// WithLimiters adds limiters checked after the first, in order.
func WithLimiters(l ...*ratelimit.Limiter) Option {
	return optionFunc(func(c *config) { c.Limiters = append(c.Limiters, l...) })
}

// WithDeferred adds limiters charged after the handler (Metered,
// CountStatus) and peeked before it.
func WithDeferred(d ...Deferred) Option {
	return optionFunc(func(c *config) { c.Deferred = append(c.Deferred, d...) })
}

// WithClock sets the clock the headers and Retry-After are computed with
// (default time.Now), for tests. It is read once per checked request.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.Now = now })
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return optionFunc(func(c *config) { c.TrustedProxies = tp })
}

// WithIPv6Prefix sets the prefix length IPv6 client addresses are aggregated
// to in the ip property (default identifiers.DefaultIPv6Prefix, /64; 128
// keeps every address apart). It panics unless 1 <= bits <= 128.
func WithIPv6Prefix(bits int) Option {
	if err := identifiers.CheckIPv6Prefix(bits); err != nil {
		panic("ratelimitgin: " + err.Error()) // a programming error, found at start-up
	}
	return optionFunc(func(c *config) { c.IPv6Prefix = bits })
}

// WithProfile selects the rate-limit headers (default ratelimitheaders.IETF).
func WithProfile(p ratelimitheaders.Profile) Option {
	return optionFunc(func(c *config) { c.Profile = p })
}

// WithRetryAfterJitter adds a random delay of up to max (whole seconds) to the
// Retry-After of blocked responses, so that clients blocked in one window do
// not all retry at its reset; the RateLimit fields and the problem keep
// stating the real reset. The default is no jitter.
func WithRetryAfterJitter(max time.Duration) Option {
	return optionFunc(func(c *config) { c.RetryAfterJitter = max })
}

// WithIdentifier replaces the identifier builder.
func WithIdentifier(f func(*gin.Context) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) {
		c.Identify = func(_ context.Context, gc *gin.Context) ratelimit.Identifier { return f(gc) }
	})
}

// WithProperties adds or replaces properties of the identifier once it is
// built, by the default builder or WithIdentifier's, for example the
// authenticated user an earlier auth middleware stored with c.Set.
func WithProperties(f func(*gin.Context, ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) {
		c.Properties = func(_ context.Context, gc *gin.Context, id ratelimit.Identifier) { f(gc, id) }
	})
}

// WithCost sets the cost the limiters checked before the handler charge for a
// request (default 1), to weigh routes differently; 0 checks without counting.
func WithCost(f func(*gin.Context) float64) Option {
	return optionFunc(func(c *config) {
		c.Cost = func(_ context.Context, gc *gin.Context) float64 { return f(gc) }
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
		c.Skip = func(_ context.Context, gc *gin.Context) bool { return f(gc) }
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
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitgin", c.defaultIdentifier)
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
				} else {
					gc.Header("Content-Type", ratelimitheaders.ContentTypeProblem) // kept by AbortWithStatusJSON
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
