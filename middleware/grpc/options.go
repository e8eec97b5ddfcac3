package ratelimitgrpc

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Option configures the interceptors.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DenyFunc builds the error returned for a blocked call. res is the blocking
// result. Returning nil means the default error (DenyStatus(...).Err()).
type DenyFunc func(ctx context.Context, call *Call, res ratelimit.Result) error

type config struct {
	guard.Options[*Call, Outcome]
	guard.Settings
	deny       DenyFunc
	domain     string
	noMetadata bool
	noPushback bool
}

// WithLimiters adds limiters, checked in order after the first one before the
// handler runs. The first limiter that blocks rejects the call; the limiters
// after it are not counted.
func WithLimiters(limiters ...*ratelimit.Limiter) Option {
	return optionFunc(func(c *config) { c.Limiters = append(c.Limiters, limiters...) })
}

// WithTrustedProxies sets the proxies whose forwarding metadata
// (x-forwarded-for, forwarded, x-real-ip) is believed. By default nobody is
// trusted and the client IP is the socket peer, so a client cannot choose its
// own IP by sending metadata.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return optionFunc(func(c *config) { c.TrustedProxies = tp })
}

// WithIPv6Prefix sets the prefix length IPv6 client addresses are aggregated
// to in the ip property (default identifiers.DefaultIPv6Prefix, /64: one
// network is one client; 128 keeps every address apart); ip_full always holds
// the whole address. It panics unless 1 <= bits <= 128.
func WithIPv6Prefix(bits int) Option {
	if err := identifiers.CheckIPv6Prefix(bits); err != nil {
		panic("ratelimitgrpc: " + err.Error()) // a programming error, found at start-up
	}
	return optionFunc(func(c *config) { c.IPv6Prefix = bits })
}

// WithIdentifier replaces DefaultIdentifier. Start from DefaultIdentifier(call)
// to keep its properties.
func WithIdentifier(f func(ctx context.Context, call *Call) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = f })
}

// WithProperties adds or replaces identifier properties after the identifier is
// built, by DefaultIdentifier or WithIdentifier's function, for example the
// principal an auth interceptor placed in ctx:
//
//	ratelimitgrpc.WithProperties(func(ctx context.Context, _ *ratelimitgrpc.Call, id ratelimit.Identifier) {
//		if u, ok := auth.UserFrom(ctx); ok {
//			id[identifiers.User] = "user:" + u.ID
//		}
//	})
//
// Chain the auth interceptor before the rate-limit interceptor.
func WithProperties(f func(ctx context.Context, call *Call, id ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = f })
}

// WithSkip exempts the calls for which f returns true from every check (see
// SkipMethods).
func WithSkip(f func(ctx context.Context, call *Call) bool) Option {
	return optionFunc(func(c *config) { c.Skip = f })
}

// WithCost sets the cost the limiters checked before the handler charge (the
// default is 1), to weigh methods differently.
func WithCost(f func(ctx context.Context, call *Call) float64) Option {
	return optionFunc(func(c *config) { c.Cost = f })
}

// WithClock sets the clock the rate-limit metadata, RetryInfo and the
// pushback trailer are computed with (default time.Now), for tests. It is read
// once per checked call.
func WithClock(now func() time.Time) Option { return optionFunc(func(c *config) { c.Now = now }) }

// WithDenyHandler sets how the error of a blocked call is built.
func WithDenyHandler(f DenyFunc) Option { return optionFunc(func(c *config) { c.deny = f }) }

// WithDomain sets the ErrorInfo domain of rate-limit errors: the name of the
// service or product that generates them, e.g. "api.example.com". The default
// is the called gRPC service ("package.Service").
func WithDomain(domain string) Option { return optionFunc(func(c *config) { c.domain = domain }) }

// WithoutMetadata stops the rate-limit response header metadata (the same as
// WithHeaderProfile(ratelimitheaders.None)).
func WithoutMetadata() Option { return optionFunc(func(c *config) { c.noMetadata = true }) }

// WithRetryJitter adds a random delay of up to max (whole seconds) to the
// RetryInfo delay and the pushback trailer of blocked calls, so that clients
// blocked in one window do not all retry at its reset; it is never below the
// real reset, and the rate-limit metadata keeps stating the real reset. The
// default is no jitter.
func WithRetryJitter(max time.Duration) Option {
	return optionFunc(func(c *config) { c.RetryAfterJitter = max })
}

// WithHeaderProfile selects the rate-limit response header metadata, with the
// same profiles and values as the HTTP adapters' headers, lower-cased:
// ratelimitheaders.IETF (the default: ratelimit-policy and ratelimit),
// ratelimitheaders.Legacy (ratelimit-limit, -remaining, -reset),
// ratelimitheaders.GitLab or ratelimitheaders.None.
func WithHeaderProfile(p ratelimitheaders.Profile) Option {
	return optionFunc(func(c *config) { c.Profile = p })
}

// WithoutPushback stops the grpc-retry-pushback-ms trailer on blocked calls.
func WithoutPushback() Option { return optionFunc(func(c *config) { c.noPushback = true }) }

// Deferred is a limiter charged after the handler, with a cost known only
// then: an adapter.Deferred whose Charge reads the call's Outcome.
type Deferred = adapter.Deferred[Outcome]

// Outcome is what is known once the handler has returned.
type Outcome struct {
	Call  *Call
	Err   error          // the handler's error; status.Code(Err) is the call's code
	Meter *adapter.Meter // the call's cost meter
}

// WithDeferred adds limiters charged after the handler (see Metered and
// CountCodes).
func WithDeferred(d ...Deferred) Option {
	return optionFunc(func(c *config) { c.Deferred = append(c.Deferred, d...) })
}

// Metered charges l with the named cost that the handler reported through
// adapter.AddCost(ctx, name, v), database seconds say. Callers already over
// budget are rejected before the handler; one call may overshoot.
func Metered(l *ratelimit.Limiter, name string) Deferred { return guard.Metered[Outcome](l, name) }

// CountCodes charges l with 1 only for calls whose handler returned one of the
// status codes, for example codes.Unauthenticated to count failed logins.
// Before the handler, callers whom one more such outcome would put over the
// limit are rejected: with a limit of 5, the attempt after five failures is.
func CountCodes(l *ratelimit.Limiter, cs ...codes.Code) Deferred {
	cs = slices.Clone(cs)
	return guard.CountWhen(l, func(o Outcome) bool { return slices.Contains(cs, status.Code(o.Err)) })
}

func newConfig(limiter *ratelimit.Limiter, opts []Option) *config {
	c := &config{}
	c.Limiters = []*ratelimit.Limiter{limiter}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitgrpc", func(_ context.Context, call *Call) ratelimit.Identifier { return DefaultIdentifier(call) })
	return c
}
