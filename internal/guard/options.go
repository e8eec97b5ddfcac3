package guard

import (
	"context"
	"math/rand/v2"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Options are the settings every adapter shares, and the steps every request
// takes through them. R is what the adapter's hooks are told about a request
// (an *http.Request, an echo.Context, a gRPC call, an asynq task); O is what
// is known once its handler has finished. An adapter keeps Options in its
// configuration, fills it from its own options and calls Init once they are
// all applied.
type Options[R, O any] struct {
	// Guard holds the limiters checked before the handler and the deferred
	// limiters charged after it.
	Guard[O]
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
	// Now is the clock the verdict is rendered with (reset deltas,
	// Retry-After, retry delays); time.Now when nil. It is read once per
	// checked request.
	Now func() time.Time
}

// Init completes o once the adapter's options are applied: def becomes the
// identifier builder unless one was set, and the guard is validated (see
// Guard.Validate). A nil limiter, or a Deferred without Limiter or Charge,
// panics with name (the adapter's package) as prefix: a programming error,
// found at start-up rather than on the first request.
func (o *Options[R, O]) Init(name string, def func(ctx context.Context, r R) ratelimit.Identifier) {
	if o.Identify == nil {
		o.Identify = def
	}
	if o.Now == nil {
		o.Now = time.Now
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
	return Checked{ID: id, Decision: d, Now: o.clock()}
}

func (o *Options[R, O]) clock() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
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
