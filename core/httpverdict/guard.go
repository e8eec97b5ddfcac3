package httpverdict

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Decision is the combined verdict of every limiter that looked at one
// request: ratelimit.Decision, shared with the gRPC and asynq adapters, so the
// fail-open rule is the same everywhere (a limiter that failed open never
// blocks and contributes no headers).
type Decision = ratelimit.Decision

// Deferred is a limiter charged after the handler, with a cost known only then
// (see ratelimit.Deferred). Before the handler it is peeked, and a caller it
// would block is rejected without running the handler. Build one with Metered
// or CountStatus, or by hand with a Charge that reads the Outcome.
type Deferred = ratelimit.Deferred[Outcome]

// Outcome is what is known once the handler has finished.
type Outcome struct {
	Status int              // the response status (200 if the handler never set one)
	Meter  *ratelimit.Meter // the request's cost meter
	Header http.Header      // the response headers
}

// Metered charges l with the named cost from the request's meter (for example
// "db_duration_s", added by a database wrapper through ratelimit.AddCost),
// when it is positive. Before the handler, callers already over budget are
// blocked.
func Metered(l *ratelimit.Limiter, cost string) Deferred {
	return ratelimit.Metered[Outcome](l, cost)
}

// CountStatus charges l with 1 only for responses with one of the statuses,
// for example http.StatusUnauthorized to count failed logins only. Before the
// handler, callers whom one more such outcome would put over the limit are
// blocked (PeekCost 1): with a limit of 5, the sixth attempt after five
// failures is rejected.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	statuses = slices.Clone(statuses)
	return ratelimit.CountWhen(l, func(o Outcome) bool { return slices.Contains(statuses, o.Status) })
}

// Guard runs the checks of one request for an HTTP adapter: a
// ratelimit.Guard, plus the header profile and the clock the headers are
// rendered with. The zero value checks nothing; adapters fill it from their
// options.
type Guard struct {
	// Limiters are checked (counted) before the handler, in order. The first
	// that blocks ends the checks: later limiters do not count a request that
	// is rejected anyway.
	Limiters []*ratelimit.Limiter
	// Deferred limiters are peeked before the handler and charged after it.
	Deferred []Deferred
	// Profile selects the rate-limit headers (default IETF).
	Profile Profile
	// Now is the clock used for delta headers (default time.Now).
	Now func() time.Time
	// RetryAfterJitter, when at least a second, adds a random delay of 0 to
	// RetryAfterJitter (whole seconds) to the Retry-After of a blocked
	// response, so that clients blocked in one window do not all come back at
	// its reset (draft-ietf-httpapi-ratelimit-headers, section 8.5). It never
	// goes below the real reset; the RateLimit fields and the problem
	// details keep stating the real reset.
	RetryAfterJitter time.Duration
}

// guard is the transport-neutral guard that does the work.
func (g *Guard) guard() ratelimit.Guard[Outcome] {
	return ratelimit.Guard[Outcome]{Limiters: g.Limiters, Deferred: g.Deferred}
}

// Validate reports a nil limiter or an incomplete Deferred (see
// ratelimit.Guard.Validate).
func (g *Guard) Validate() error {
	cg := g.guard()
	return cg.Validate()
}

// Metering reports whether requests need a cost meter and their status
// captured (some Deferred is configured).
func (g *Guard) Metering() bool { return len(g.Deferred) > 0 }

// Clock returns the current time of the guard's clock.
func (g *Guard) Clock() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Check decides whether the request identified by id may proceed (see
// ratelimit.Guard.Check): deferred limiters are peeked, then Limiters checked
// in order until one blocks.
func (g *Guard) Check(ctx context.Context, id ratelimit.Identifier) *Decision {
	cg := g.guard()
	return cg.Check(ctx, id)
}

// Settle charges the Deferred limiters once the handler has finished, without
// the request's cancellation (see ratelimit.Guard.Settle). It returns the
// results of the checks it made.
func (g *Guard) Settle(ctx context.Context, id ratelimit.Identifier, o Outcome) []ratelimit.Result {
	cg := g.guard()
	return cg.Settle(ctx, id, o)
}

// Handle runs one request through the guard, the same way in every adapter:
// Check, then SetHeaders on header; when the decision blocks, deny(d) answers
// and the handler does not run. Otherwise next runs the handler with ctx and
// returns the response status. When Metering, ctx carries a ratelimit.Meter
// for ratelimit.AddCost, and the Deferred limiters are charged with the
// status, the meter and header once next returns; otherwise ctx is the
// caller's and the status is unused.
func (g *Guard) Handle(ctx context.Context, id ratelimit.Identifier, header http.Header,
	deny func(d *Decision), next func(ctx context.Context) (status int)) {
	cg := g.guard()
	d := cg.Check(ctx, id)
	g.SetHeaders(header, d)
	if d.Blocked() {
		deny(d)
		return
	}
	cg.Run(ctx, id, func(ctx context.Context) Outcome {
		return Outcome{Status: next(ctx), Meter: ratelimit.MeterFrom(ctx), Header: header}
	})
}

// SetHeaders writes d's headers in the guard's profile (see Profile.SetHeaders),
// with the guard's Retry-After jitter.
func (g *Guard) SetHeaders(h http.Header, d *Decision) {
	now := g.Clock()
	g.Profile.SetHeaders(h, d, now)
	if d.Blocked() && g.RetryAfterJitter >= time.Second {
		h.Set(HeaderRetryAfter, strconv.FormatInt(seconds(d.RetryAfter(now))+JitterSeconds(g.RetryAfterJitter), 10))
	}
}

// JitterSeconds returns a random whole number of seconds in [0, max/1s], the
// extra delay of a jittered Retry-After.
func JitterSeconds(max time.Duration) int64 {
	if max < time.Second {
		return 0
	}
	return rand.Int64N(int64(max/time.Second) + 1)
}
