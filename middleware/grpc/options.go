package ratelimitgrpc

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures the interceptors.
type Option func(*config)

// DenyFunc builds the error returned for a blocked call. res is the blocking
// result. Returning nil means the default error (DenyStatus(...).Err()).
type DenyFunc func(ctx context.Context, call *Call, res ratelimit.Result) error

// CostFunc returns what a call cost once its handler has returned (err is the
// handler's error, m the call's meter). 0 charges nothing.
type CostFunc func(ctx context.Context, call *Call, m *ratelimit.Meter, err error) float64

type deferred struct {
	l        *ratelimit.Limiter
	peekCost float64
	cost     CostFunc
}

type config struct {
	limiters   []*ratelimit.Limiter
	deferred   []deferred
	proxies    identifiers.TrustedProxies
	identify   func(ctx context.Context, call *Call) ratelimit.Identifier
	properties func(ctx context.Context, call *Call, id ratelimit.Identifier)
	skip       func(ctx context.Context, call *Call) bool
	cost       func(ctx context.Context, call *Call) float64
	deny       DenyFunc
	domain     string
	noMetadata bool
	noPushback bool
}

// WithLimiter adds limiters, checked in order after the first one before the
// handler runs. The first limiter that blocks rejects the call; the limiters
// after it are not counted.
func WithLimiter(limiters ...*ratelimit.Limiter) Option {
	return func(c *config) { c.limiters = append(c.limiters, limiters...) }
}

// WithTrustedProxies sets the proxies whose forwarding metadata
// (x-forwarded-for, forwarded, x-real-ip) is believed. By default nobody is
// trusted and the client IP is the socket peer, so a client cannot choose its
// own IP by sending metadata.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return func(c *config) { c.proxies = tp }
}

// WithIdentifier replaces DefaultIdentifier. Start from DefaultIdentifier(call)
// to keep its properties.
func WithIdentifier(f func(ctx context.Context, call *Call) ratelimit.Identifier) Option {
	return func(c *config) { c.identify = f }
}

// WithProperties adds or replaces identifier properties after the identifier is
// built, for example the principal an auth interceptor placed in ctx:
//
//	ratelimitgrpc.WithProperties(func(ctx context.Context, _ *ratelimitgrpc.Call, id ratelimit.Identifier) {
//		if u, ok := auth.UserFrom(ctx); ok {
//			id[identifiers.User] = "user:" + u.ID
//		}
//	})
//
// Chain the auth interceptor before the rate-limit interceptor.
func WithProperties(f func(ctx context.Context, call *Call, id ratelimit.Identifier)) Option {
	return func(c *config) { c.properties = f }
}

// WithSkip exempts the calls for which f returns true from every check (see
// SkipMethods).
func WithSkip(f func(ctx context.Context, call *Call) bool) Option {
	return func(c *config) { c.skip = f }
}

// WithCost sets the cost the limiters checked before the handler charge (the
// default is 1), to weigh methods differently.
func WithCost(f func(ctx context.Context, call *Call) float64) Option {
	return func(c *config) { c.cost = f }
}

// WithDenyHandler sets how the error of a blocked call is built.
func WithDenyHandler(f DenyFunc) Option { return func(c *config) { c.deny = f } }

// WithDomain sets the ErrorInfo domain of rate-limit errors: the name of the
// service or product that generates them, e.g. "api.example.com". The default
// is the called gRPC service ("package.Service").
func WithDomain(domain string) Option { return func(c *config) { c.domain = domain } }

// WithoutMetadata stops the ratelimit-limit, ratelimit-remaining and
// ratelimit-reset response header metadata.
func WithoutMetadata() Option { return func(c *config) { c.noMetadata = true } }

// WithoutPushback stops the grpc-retry-pushback-ms trailer on blocked calls.
func WithoutPushback() Option { return func(c *config) { c.noPushback = true } }

// WithMeteredLimiter adds a resource limiter charged with what the call
// measured (source design §1.11): the handler runs with a ratelimit.Meter in
// its context, application code adds to it with ratelimit.AddCost(ctx, name,
// v), and after the handler the limiter is checked with the meter's value of
// name. Before the handler the limiter is peeked, and a caller already over
// budget is rejected. A single call may overshoot the budget (its cost is
// known only afterwards); the next call is then rejected.
func WithMeteredLimiter(l *ratelimit.Limiter, name string) Option {
	return WithCostLimiter(l, 0, func(_ context.Context, _ *Call, m *ratelimit.Meter, _ error) float64 {
		return m.Value(name)
	})
}

// WithOutcomeLimiter adds a limiter that counts only the calls for which count
// returns true once the handler has returned, for example failed logins:
//
//	ratelimitgrpc.WithOutcomeLimiter(loginFailures, ratelimitgrpc.CountCodes(codes.Unauthenticated))
//
// Before the handler the limiter is peeked as if the call would count, so a
// limit of 5 lets 5 counted calls through and rejects the next attempt.
func WithOutcomeLimiter(l *ratelimit.Limiter, count func(ctx context.Context, call *Call, err error) bool) Option {
	if count == nil {
		panic("ratelimitgrpc: WithOutcomeLimiter: nil count function")
	}
	return WithCostLimiter(l, 1, func(ctx context.Context, call *Call, _ *ratelimit.Meter, err error) float64 {
		if count(ctx, call, err) {
			return 1
		}
		return 0
	})
}

// WithCostLimiter is the general form of WithMeteredLimiter and
// WithOutcomeLimiter: l is peeked with peekCost before the handler (a blocked
// peek rejects the call) and checked with cost(...) after it. The check after
// the handler never changes the call's response; it runs even when the
// client has gone away, because the resources were spent.
func WithCostLimiter(l *ratelimit.Limiter, peekCost float64, cost CostFunc) Option {
	return func(c *config) { c.deferred = append(c.deferred, deferred{l: l, peekCost: peekCost, cost: cost}) }
}

// CountCodes returns a count function (for WithOutcomeLimiter) that counts calls
// whose handler returned one of the given status codes.
func CountCodes(cs ...codes.Code) func(ctx context.Context, call *Call, err error) bool {
	cs = slices.Clone(cs)
	return func(_ context.Context, _ *Call, err error) bool {
		return slices.Contains(cs, status.Code(err))
	}
}

func newConfig(limiter *ratelimit.Limiter, opts []Option) *config {
	c := &config{limiters: []*ratelimit.Limiter{limiter}}
	for _, o := range opts {
		o(c)
	}
	for _, l := range c.limiters {
		if l == nil {
			panic("ratelimitgrpc: nil limiter")
		}
	}
	for _, d := range c.deferred {
		if d.l == nil || d.cost == nil {
			panic("ratelimitgrpc: WithCostLimiter: nil limiter or cost function")
		}
	}
	return c
}
