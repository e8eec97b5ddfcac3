package ratelimitgrpc

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/httpverdict"
	"github.com/ratekit/ratekit/identifiers"
)

// Option configures the interceptors.
type Option func(*config)

// DenyFunc builds the error returned for a blocked call. res is the blocking
// result. Returning nil means the default error (DenyStatus(...).Err()).
type DenyFunc func(ctx context.Context, call *Call, res ratelimit.Result) error

type config struct {
	guard       ratelimit.Guard[Outcome]
	proxies     identifiers.TrustedProxies
	identify    func(ctx context.Context, call *Call) ratelimit.Identifier
	properties  func(ctx context.Context, call *Call, id ratelimit.Identifier)
	skip        func(ctx context.Context, call *Call) bool
	cost        func(ctx context.Context, call *Call) float64
	deny        DenyFunc
	domain      string
	noMetadata  bool
	profile     httpverdict.Profile
	retryJitter time.Duration
	noPushback  bool
}

// WithLimiters adds limiters, checked in order after the first one before the
// handler runs. The first limiter that blocks rejects the call; the limiters
// after it are not counted.
func WithLimiters(limiters ...*ratelimit.Limiter) Option {
	return func(c *config) { c.guard.Limiters = append(c.guard.Limiters, limiters...) }
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

// WithoutMetadata stops the rate-limit response header metadata (the same as
// WithHeaderProfile(httpverdict.None)).
func WithoutMetadata() Option { return func(c *config) { c.noMetadata = true } }

// WithRetryJitter adds a random delay of up to max (whole seconds) to the
// RetryInfo delay and the pushback trailer of blocked calls, so that clients
// blocked in one window do not all retry at its reset; it is never below the
// real reset, and the rate-limit metadata keeps stating the real reset. The
// default is no jitter.
func WithRetryJitter(max time.Duration) Option { return func(c *config) { c.retryJitter = max } }

// WithHeaderProfile selects the rate-limit response header metadata, with the
// same profiles and values as the HTTP adapters' headers, lower-cased:
// httpverdict.IETF (the default: ratelimit-policy and ratelimit),
// httpverdict.Legacy (ratelimit-limit, -remaining, -reset), httpverdict.GitLab
// or httpverdict.None.
func WithHeaderProfile(p httpverdict.Profile) Option { return func(c *config) { c.profile = p } }

// WithoutPushback stops the grpc-retry-pushback-ms trailer on blocked calls.
func WithoutPushback() Option { return func(c *config) { c.noPushback = true } }

// Deferred is a limiter charged after the handler, with a cost known only
// then (docs/design.md#cost): a ratelimit.Deferred whose Charge reads the
// call's Outcome. Before the handler it is peeked, and a caller it would block
// is rejected without running the handler. The charge after the handler never
// changes the call's response; it is made even when the client has gone away,
// because the resources were spent.
type Deferred = ratelimit.Deferred[Outcome]

// Outcome is what is known once the handler has returned.
type Outcome struct {
	Call  *Call
	Err   error            // the handler's error; status.Code(Err) is the call's code
	Meter *ratelimit.Meter // the call's cost meter
}

// WithDeferred adds limiters charged after the handler (see Metered and
// CountCodes).
func WithDeferred(d ...Deferred) Option {
	return func(c *config) { c.guard.Deferred = append(c.guard.Deferred, d...) }
}

// Metered charges l with the named cost that the handler reported through
// ratelimit.AddCost(ctx, name, v), for example the database seconds a
// database wrapper measured. The interceptor gives the handler a context with
// a ratelimit.Meter. Callers already over budget are rejected before the
// handler; a single call may overshoot (its cost is known only afterwards),
// and the next one is then rejected.
func Metered(l *ratelimit.Limiter, name string) Deferred {
	return ratelimit.Metered[Outcome](l, name)
}

// CountCodes charges l with 1 only for calls whose handler returned one of the
// status codes, for example codes.Unauthenticated to count failed logins.
// Before the handler, callers whom one more such outcome would put over the
// limit are rejected: with a limit of 5, the attempt after five failures is.
func CountCodes(l *ratelimit.Limiter, cs ...codes.Code) Deferred {
	cs = slices.Clone(cs)
	return ratelimit.CountWhen(l, func(o Outcome) bool { return slices.Contains(cs, status.Code(o.Err)) })
}

func newConfig(limiter *ratelimit.Limiter, opts []Option) *config {
	c := &config{guard: ratelimit.Guard[Outcome]{Limiters: []*ratelimit.Limiter{limiter}}}
	for _, o := range opts {
		o(c)
	}
	if err := c.guard.Validate(); err != nil {
		panic("ratelimitgrpc: " + err.Error()) // a programming error, found at start-up
	}
	return c
}
