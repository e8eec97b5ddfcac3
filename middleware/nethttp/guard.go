package ratelimithttp

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
)

// Decision is the combined verdict of every limiter that looked at one
// request: adapter.Decision, shared with the gRPC and asynq adapters, so the
// fail-open rule is the same everywhere (a limiter that failed open never
// blocks and contributes no headers).
type Decision = adapter.Decision

// Deferred is a limiter charged after the handler, with a cost known only then
// (see adapter.Deferred). Before the handler it is peeked, and a caller it
// would block is rejected without running the handler. Build one with Metered
// or CountStatus, or by hand with a Charge that reads the Outcome.
type Deferred = adapter.Deferred[Outcome]

// Outcome is what is known once the handler has finished.
type Outcome struct {
	Status int            // the response status (200 if the handler never set one)
	Meter  *adapter.Meter // the request's cost meter
	Header http.Header    // the response headers
}

// Metered charges l with the named cost from the request's meter (for example
// "db_duration_s", added by a database wrapper through adapter.AddCost), when
// it is positive. Before the handler, callers already over budget are
// blocked.
func Metered(l *ratelimit.Limiter, cost string) Deferred {
	return adapter.Metered[Outcome](l, cost)
}

// CountStatus charges l with 1 only for responses with one of the statuses,
// for example http.StatusUnauthorized to count failed logins only. Before the
// handler, callers whom one more such outcome would put over the limit are
// blocked (PeekCost 1): with a limit of 5, the sixth attempt after five
// failures is rejected.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	statuses = slices.Clone(statuses)
	return adapter.CountWhen(l, func(o Outcome) bool { return slices.Contains(statuses, o.Status) })
}

// Guard is what every HTTP adapter (this package, ratelimitecho and
// ratelimitgin) runs a request through: the options all adapters share, plus
// how the verdict becomes headers. R is what the adapter's hooks are told
// about a request (an *http.Request, an echo.Context, a *gin.Context). An
// adapter keeps one Guard in its configuration, filled from its options and
// completed with Init when it is built; the zero value checks nothing.
type Guard[R any] struct {
	adapter.Options[R, Outcome]
	// Profile selects the rate-limit headers (default IETF).
	Profile Profile
	// RetryAfterJitter, when at least a second, adds a random delay of 0 to
	// RetryAfterJitter (whole seconds) to the Retry-After of a blocked
	// response, so that clients blocked in one window do not all come back at
	// its reset (draft-ietf-httpapi-ratelimit-headers, section 8.5). It never
	// goes below the real reset; the RateLimit fields and the problem
	// details keep stating the real reset.
	RetryAfterJitter time.Duration
}

// Handle runs one request through the guard, the same way in every HTTP
// adapter: Check (one clock read), then the headers on header; when the
// decision blocks, deny answers with the decision and its problem details,
// and the handler does not run. Otherwise next runs the handler with ctx and
// returns the response status. When the guard meters (it has Deferred
// limiters), ctx carries an adapter.Meter for adapter.AddCost, and the
// Deferred limiters are charged with the status, the meter and header once
// next returns; otherwise ctx is the caller's and the status is unused.
// Skipping is left to the adapter (see Options.Skipped), which knows how to
// call its handler directly.
func (g *Guard[R]) Handle(ctx context.Context, r R, header http.Header,
	deny func(d *Decision, p *Problem), next func(ctx context.Context) (status int)) {
	c := g.Check(ctx, r)
	if p := g.SetHeaders(header, c.Decision, c.Now); p != nil {
		deny(c.Decision, p)
		return
	}
	g.Guard.Run(ctx, c.ID, func(ctx context.Context) Outcome {
		return Outcome{Status: next(ctx), Meter: adapter.MeterFrom(ctx), Header: header}
	})
}

// SetHeaders writes d's headers in the guard's profile at now (see
// Profile.SetHeaders), with the guard's Retry-After jitter. When d blocks it
// returns the problem details of the 429, computed from the same reading of
// the blocking rules; otherwise nil.
func (g *Guard[R]) SetHeaders(h http.Header, d *Decision, now time.Time) *Problem {
	blocked := d.Blocked()
	g.Profile.setRateLimit(h, d, blocked, now)
	if !blocked {
		return nil
	}
	p, retry := newProblem(d, now)
	retry += int64(adapter.Jitter(g.RetryAfterJitter) / time.Second)
	h.Set(HeaderRetryAfter, strconv.FormatInt(retry, 10))
	h.Set("Cache-Control", "no-store")
	return &p
}
