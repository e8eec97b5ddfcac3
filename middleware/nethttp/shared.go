package ratelimithttp

import (
	"context"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

// Shared holds the settings that do not depend on the framework's request
// type, the same in this package's Middleware, ratelimitecho's and
// ratelimitgin's. SharedOption values set them; Build hands them to the
// adapter's Guard.
type Shared struct {
	// Limiters are checked before the handler, in order: Middleware's limiter
	// first, then WithLimiters'.
	Limiters []*ratelimit.Limiter
	// Deferred are peeked before the handler and charged after it.
	Deferred []Deferred
	// Now is the clock the headers and Retry-After are computed with
	// (time.Now when nil).
	Now func() time.Time
	// TrustedProxies are the proxies whose forwarding headers the default
	// identifier builder believes.
	TrustedProxies identifiers.TrustedProxies
	// IPv6Prefix is the prefix length the default identifier builder
	// aggregates IPv6 client addresses to in the ip property (0:
	// identifiers.DefaultIPv6Prefix).
	IPv6Prefix int
	// Profile selects the rate-limit headers.
	Profile Profile
	// RetryAfterJitter is the most random delay added to Retry-After.
	RetryAfterJitter time.Duration
}

// SharedOption is an option every HTTP adapter takes: this package's
// Middleware (it is an Option), and ratelimitecho's and ratelimitgin's, whose
// options of the same names return it wrapped in their own Option type.
type SharedOption func(*Shared)

func (o SharedOption) apply(c *config) { o(&c.Shared) }

// WithLimiters adds limiters checked after the first, in order (for example a
// protected-paths limiter beside the general one).
func WithLimiters(l ...*ratelimit.Limiter) SharedOption {
	return func(s *Shared) { s.Limiters = append(s.Limiters, l...) }
}

// WithDeferred adds limiters charged after the handler with a cost known only
// then (Metered, CountStatus), and peeked before it.
func WithDeferred(d ...Deferred) SharedOption {
	return func(s *Shared) { s.Deferred = append(s.Deferred, d...) }
}

// WithClock sets the clock the headers and Retry-After are computed with
// (default time.Now), for tests. It is read once per checked request.
func WithClock(now func() time.Time) SharedOption {
	return func(s *Shared) { s.Now = now }
}

// WithTrustedProxies sets the proxies whose forwarding headers are believed.
// By default nobody is trusted and the ip is the socket peer.
func WithTrustedProxies(tp identifiers.TrustedProxies) SharedOption {
	return func(s *Shared) { s.TrustedProxies = tp }
}

// WithIPv6Prefix sets the prefix length IPv6 client addresses are aggregated
// to in the ip property (default identifiers.DefaultIPv6Prefix, /64: one
// network is one client, so an attacker holding a /64 is not 2^64 clients;
// 128 keeps every address apart). ip_full always holds the whole address. It
// panics unless 1 <= bits <= 128.
func WithIPv6Prefix(bits int) SharedOption {
	if err := identifiers.CheckIPv6Prefix(bits); err != nil {
		panic("ratelimithttp: " + err.Error()) // a programming error, found at start-up
	}
	return func(s *Shared) { s.IPv6Prefix = bits }
}

// WithProfile selects the rate-limit headers (default IETF).
func WithProfile(p Profile) SharedOption {
	return func(s *Shared) { s.Profile = p }
}

// WithRetryAfterJitter adds a random delay of up to max (whole seconds) to the
// Retry-After of blocked responses, so that clients blocked in one window do
// not all retry at its reset; it is never below the real reset (see
// Guard.RetryAfterJitter). The default is no jitter.
func WithRetryAfterJitter(max time.Duration) SharedOption {
	return func(s *Shared) { s.RetryAfterJitter = max }
}

// Config is the part of an HTTP adapter's configuration that Build completes:
// the shared settings and the adapter's Guard. An adapter's own options set
// the Guard's request hooks (Identify, Properties, Skip, Cost); the shared
// options set Shared.
type Config[R any] struct {
	Shared
	Guard Guard[R]
}

// Build is the prelude of every HTTP adapter's Middleware. limiter, unless
// nil, is checked first; apply then applies each of opts, in order, to the
// adapter's configuration (which holds c); the shared settings go into
// c.Guard, which Init completes with def, the adapter's identifier builder,
// unless an option set one. A programming error (a nil limiter in
// WithLimiters, a Deferred without Limiter or Charge) panics here, at
// start-up, with name (the adapter's package) as prefix.
func Build[R, O any](c *Config[R], name string, limiter *ratelimit.Limiter, opts []O, apply func(O),
	def func(ctx context.Context, r R) ratelimit.Identifier) {
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		apply(o)
	}
	g := &c.Guard
	g.Guard.Limiters, g.Guard.Deferred = c.Limiters, c.Deferred
	g.Now, g.Profile, g.RetryAfterJitter = c.Now, c.Profile, c.RetryAfterJitter
	if err := g.Init(def); err != nil {
		panic(name + ": " + err.Error()) // a programming error, found at start-up
	}
}
