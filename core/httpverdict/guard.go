package httpverdict

import (
	"context"
	"net/http"
	"slices"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Guard runs the checks of one request for an HTTP adapter. The zero value
// checks nothing; adapters fill it from their options.
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
}

// Deferred is a limiter charged after the handler, with a cost known only then.
// Before the handler it is peeked, and a caller it would block is rejected
// without running the handler.
type Deferred struct {
	Limiter *ratelimit.Limiter
	// Charge returns the cost to count once the handler has finished, and
	// whether to count at all.
	Charge func(o Outcome) (cost float64, ok bool)
	// PeekCost is the cost the peek before the handler assumes. 0 blocks only
	// callers already over the limit (right when the cost is unknown until the
	// work is done); 1 blocks callers whom one more counted outcome would put
	// over it, so that a limit of 5 admits exactly 5 counted outcomes.
	PeekCost float64
}

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
	return Deferred{
		Limiter: l,
		Charge: func(o Outcome) (float64, bool) {
			v := o.Meter.Value(cost)
			return v, v > 0
		},
	}
}

// CountStatus charges l with 1 only for responses with one of the statuses,
// for example http.StatusUnauthorized to count failed logins only. Before the
// handler, callers whom one more such outcome would put over the limit are
// blocked (PeekCost 1): with a limit of 5, the sixth attempt after five
// failures is rejected.
func CountStatus(l *ratelimit.Limiter, statuses ...int) Deferred {
	statuses = slices.Clone(statuses)
	return Deferred{
		Limiter:  l,
		PeekCost: 1,
		Charge: func(o Outcome) (float64, bool) {
			return 1, slices.Contains(statuses, o.Status)
		},
	}
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

// Check decides whether the request identified by id may proceed. Deferred
// limiters are peeked first (peeks count nothing, so a request they reject is
// not charged to the counting limiters), then Limiters are checked in order.
// A peek's result is part of the decision only when it blocks: the headers of
// an allowed response describe the request limits, not a resource budget in
// other units.
func (g *Guard) Check(ctx context.Context, id ratelimit.Identifier) *Decision {
	d := &Decision{Results: make([]ratelimit.Result, 0, len(g.Limiters)+1)}
	for _, df := range g.Deferred {
		res := df.Limiter.Peek(ctx, id, ratelimit.Cost(df.PeekCost))
		if res.Blocked() {
			d.Results = append(d.Results, res)
			return d
		}
	}
	for _, l := range g.Limiters {
		res := l.Check(ctx, id)
		d.Results = append(d.Results, res)
		if res.Blocked() {
			break
		}
	}
	return d
}

// Settle charges the Deferred limiters once the handler has finished. It runs
// without the request's cancellation, so a client that hangs up still pays for
// the work it caused. It returns the results of the checks it made.
func (g *Guard) Settle(ctx context.Context, id ratelimit.Identifier, o Outcome) []ratelimit.Result {
	ctx = context.WithoutCancel(ctx)
	var out []ratelimit.Result
	for _, df := range g.Deferred {
		cost, ok := df.Charge(o)
		if !ok {
			continue
		}
		out = append(out, df.Limiter.Check(ctx, id, ratelimit.Cost(cost)))
	}
	return out
}

// Handle runs one request through the guard, the same way in every adapter:
// Check, then SetHeaders on header; when the decision blocks, deny(d) answers
// and the handler does not run. Otherwise next runs the handler with ctx and
// returns the response status. When Metering, ctx carries a ratelimit.Meter
// for ratelimit.AddCost, and Settle charges the Deferred limiters with the
// status and the meter once next returns; otherwise ctx is the caller's and
// the status is unused.
func (g *Guard) Handle(ctx context.Context, id ratelimit.Identifier, header http.Header,
	deny func(d *Decision), next func(ctx context.Context) (status int)) {
	d := g.Check(ctx, id)
	g.SetHeaders(header, d)
	if d.Blocked() {
		deny(d)
		return
	}
	if !g.Metering() {
		next(ctx)
		return
	}
	ctx, meter := ratelimit.WithMeter(ctx)
	status := next(ctx)
	g.Settle(ctx, id, Outcome{Status: status, Meter: meter})
}

// SetHeaders writes d's headers in the guard's profile (see Profile.SetHeaders).
func (g *Guard) SetHeaders(h http.Header, d *Decision) {
	g.Profile.SetHeaders(h, d, g.Clock())
}
