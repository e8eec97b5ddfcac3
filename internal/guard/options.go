package guard

import (
	"context"
	"math/rand/v2"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Options are what every adapter keeps in its configuration, and the steps
// every request takes through them. R is what the adapter's hooks are told
// about a request (an *http.Request, an echo.Context, a gRPC call, an asynq
// task); O is what is known once its handler has finished. The adapter fills
// Options from its own options and calls Init once they are all applied.
type Options[R, O any] struct {
	// Settings hold what does not depend on R: the limiters, the clock and
	// how the verdict is rendered.
	Settings[O]
	// Identify builds the identifier of a request. Init sets the adapter's
	// default builder when it is nil.
	Identify func(ctx context.Context, r R) ratelimit.Identifier
	// Properties, when set, adds or replaces properties of the identifier
	// that Identify built, whichever builder that is (the default or a
	// custom one), for example the user an earlier auth middleware found.
	Properties func(ctx context.Context, r R, id ratelimit.Identifier)
	// Skip, when set, exempts the requests for which it returns true from
	// every check.
	Skip func(ctx context.Context, r R) bool
	// Cost, when set, is the cost the limiters checked before the handler
	// charge for a request (1 when nil); 0 checks without counting.
	Cost func(ctx context.Context, r R) float64
	// Panicked, when set, is the outcome the Deferred limiters are charged
	// with when the handler of r panics (see Guard.Run); the zero O when nil.
	// ctx carries the request's Meter.
	Panicked func(ctx context.Context, r R) O
}

// Settings are the part of Options that does not depend on the request type:
// what the options every adapter offers under one name set (see Setting).
type Settings[O any] struct {
	// Guard holds the limiters checked before the handler and the deferred
	// limiters charged after it.
	Guard[O]
	// Now is the clock the verdict is rendered with (reset deltas,
	// Retry-After, retry delays); time.Now when nil. It is read once per
	// checked request.
	Now func() time.Time
	// TrustedProxies are the proxies whose forwarding headers (or metadata)
	// the default identifier builder believes.
	TrustedProxies identifiers.TrustedProxies
	// IPv6Prefix is the prefix length the default identifier builder
	// aggregates IPv6 client addresses to (0: identifiers.DefaultIPv6Prefix).
	IPv6Prefix int
	// Profile selects the rate-limit headers or metadata (default IETF).
	Profile ratelimitheaders.Profile
	// RetryAfterJitter is the most random delay added to the retry delay of
	// a blocked caller (see Jitter).
	RetryAfterJitter time.Duration
}

// Setting sets one field of Settings. The adapters' options of these names
// each return the Setting of that name here, so that they mean the same in
// every adapter: WithLimiters, WithDeferred and WithClock (every adapter),
// WithTrustedProxies and WithIPv6Prefix (the HTTP and gRPC adapters; a task
// has no client address), WithProfile and WithRetryAfterJitter (the HTTP
// adapters; gRPC's WithHeaderProfile and WithRetryJitter, asynq's WithJitter).
type Setting[O any] func(*Settings[O])

// WithLimiters adds limiters checked after those already set, in order.
func WithLimiters[O any](l ...*ratelimit.Limiter) Setting[O] {
	return func(s *Settings[O]) { s.Limiters = append(s.Limiters, l...) }
}

// WithDeferred adds limiters peeked before the handler and charged after it.
func WithDeferred[O any](d ...adapter.Deferred[O]) Setting[O] {
	return func(s *Settings[O]) { s.Deferred = append(s.Deferred, d...) }
}

// WithClock sets Now.
func WithClock[O any](now func() time.Time) Setting[O] {
	return func(s *Settings[O]) { s.Now = now }
}

// WithTrustedProxies sets TrustedProxies.
func WithTrustedProxies[O any](tp identifiers.TrustedProxies) Setting[O] {
	return func(s *Settings[O]) { s.TrustedProxies = tp }
}

// WithIPv6Prefix sets IPv6Prefix. It panics, with pkg (the adapter's package)
// as prefix, unless 1 <= bits <= 128: a programming error, found at start-up.
func WithIPv6Prefix[O any](pkg string, bits int) Setting[O] {
	if err := identifiers.CheckIPv6Prefix(bits); err != nil {
		panic(pkg + ": " + err.Error())
	}
	return func(s *Settings[O]) { s.IPv6Prefix = bits }
}

// WithProfile sets Profile.
func WithProfile[O any](p ratelimitheaders.Profile) Setting[O] {
	return func(s *Settings[O]) { s.Profile = p }
}

// WithRetryAfterJitter sets RetryAfterJitter.
func WithRetryAfterJitter[O any](max time.Duration) Setting[O] {
	return func(s *Settings[O]) { s.RetryAfterJitter = max }
}

// Init completes o once the adapter's options are applied: def becomes the
// identifier builder unless one was set, and the guard is validated (see
// Guard.Validate). No limiter at all (a nil one and none from the options),
// a nil limiter, or a Deferred without Limiter or Charge or with an invalid
// PeekCost, panics with name (the adapter's package) as prefix: a
// programming error, found at start-up rather than on the first request. A
// middleware without a limiter would check nothing, as when the limiter's
// constructor failed and its error was dropped.
func (o *Options[R, O]) Init(name string, def func(ctx context.Context, r R) ratelimit.Identifier) {
	if o.Identify == nil {
		o.Identify = def
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if len(o.Limiters)+len(o.Deferred) == 0 {
		panic(name + ": no limiter: the limiter is nil and no option gives one (WithLimiters, WithDeferred)")
	}
	if err := o.Validate(); err != nil {
		panic(name + ": " + err.Error())
	}
}

// Skipped reports whether the request is exempt from every check.
func (o *Options[R, O]) Skipped(ctx context.Context, r R) bool {
	return o.Skip != nil && o.Skip(ctx, r)
}

// Identifier builds the identifier of a request: Identify's, then Properties
// merged into it.
func (o *Options[R, O]) Identifier(ctx context.Context, r R) ratelimit.Identifier {
	var id ratelimit.Identifier
	if o.Identify != nil {
		id = o.Identify(ctx, r)
	}
	if o.Properties != nil {
		if id == nil {
			id = ratelimit.Identifier{}
		}
		o.Properties(ctx, r, id)
	}
	return id
}

// Checked is a request after Options.Check: what the adapter renders, and
// what it passes on to Guard.Run.
type Checked struct {
	// ID is the request's identifier.
	ID ratelimit.Identifier
	// Decision is the verdict of the guard's checks.
	Decision *ratelimitheaders.Decision
	// Now is the request's one reading of the clock, taken after the checks;
	// every delay the adapter renders is computed from it.
	Now time.Time
	// Canceled is Canceled(Decision): when not nil, the caller went away
	// during the checks, nothing counted the request, and its handler must
	// not run.
	Canceled error
}

// Check runs the checks every adapter makes before the handler: it builds
// the identifier, decides with the request's cost and reads the clock once.
func (o *Options[R, O]) Check(ctx context.Context, r R) Checked {
	id := o.Identifier(ctx, r)
	var d *ratelimitheaders.Decision
	if o.Cost != nil {
		d = o.Decide(ctx, id, ratelimit.Cost(o.Cost(ctx, r)))
	} else {
		d = o.Decide(ctx, id)
	}
	return Checked{ID: id, Decision: d, Now: o.clock(), Canceled: Canceled(d)}
}

// Serve runs one call or task through the checks, the same way in every
// adapter that does not answer with HTTP headers: a skipped one goes straight
// to next; otherwise Check, then a request whose caller went away during the
// checks (Checked.Canceled) gets gone's outcome (gone is told the error) and
// next does not run, render (when non-nil) sees the verdict of every other
// checked request, a request the decision blocks gets deny's outcome (deny is
// told the blocking result) and next does not run, and an allowed one runs
// next through Run (a next that panics is charged as Panicked says).
func (o *Options[R, O]) Serve(ctx context.Context, r R, render func(c Checked),
	deny func(c Checked, blocking ratelimit.Result) O, gone func(err error) O, next func(ctx context.Context) O) O {
	if o.Skipped(ctx, r) {
		return next(ctx)
	}
	c := o.Check(ctx, r)
	if c.Canceled != nil {
		return gone(c.Canceled)
	}
	if render != nil {
		render(c)
	}
	if res := c.Decision.BlockedBy(); res != nil {
		return deny(c, *res)
	}
	var panicked func(ctx context.Context) O
	if o.Panicked != nil {
		panicked = func(ctx context.Context) O { return o.Panicked(ctx, r) }
	}
	return o.Run(ctx, c.ID, next, panicked)
}

func (o *Options[R, O]) clock() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Retry returns d, a blocked caller's delay in whole seconds, plus
// Jitter(max), at most ratelimit.MaxRetryAfter: the sum never overflows into
// a negative delay, which would tell the caller to come back at once.
func Retry(d, max time.Duration) time.Duration {
	d = min(d, ratelimit.MaxRetryAfter)
	return d + min(Jitter(max), ratelimit.MaxRetryAfter-d)
}

// Jitter returns a random whole number of seconds from 0 to max, the extra
// delay an adapter may add to a blocked caller's retry so that the callers
// blocked in one window do not all come back at its reset. It is 0 when max is
// under a second.
func Jitter(max time.Duration) time.Duration {
	if max < time.Second {
		return 0
	}
	return time.Duration(rand.Int64N(int64(max/time.Second)+1)) * time.Second
}
