// Package guard is the plumbing every ratekit adapter (net/http, Echo, Gin,
// gRPC, asynq) runs a request, call or task through, held once: the checks
// before the handler and the charges after it (Guard), the settings and
// hooks every adapter offers (Options, Settings) and the steps of a call or
// task (Options.Serve), the options every adapter offers under one name
// (Setting), and for the HTTP adapters the request path and the rendering of
// the verdict as headers (HTTP). Each adapter keeps Options in its
// configuration, filled by its own public options.
package guard

import (
	"context"
	"errors"
	"fmt"
	"math"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Guard runs the checks of one request, call or task for an adapter, the same
// way in every transport: Decide before the handler, Run (or Settle) after it.
// O is what the adapter knows once the handler has finished (an HTTP status, a
// gRPC error, a task error); the deferred limiters' Charge functions read it.
// The zero value checks nothing. A Guard is safe for concurrent use once built.
type Guard[O any] struct {
	// Limiters are checked (counted) before the handler, in order. The first
	// that blocks ends the checks: later limiters do not count a request that
	// is rejected anyway.
	Limiters []*ratelimit.Limiter
	// Deferred limiters are peeked before the handler and charged after it.
	Deferred []adapter.Deferred[O]
}

// Metered charges l with the named cost that the handler reported through
// AddCost(ctx, name, v) (database seconds, partner API calls), when it is
// positive. Run gives the handler a context with a Meter. Callers already over
// budget are rejected before the handler; one call may overshoot (its cost is
// known only afterwards), and the next is then rejected. The cost is charged
// as spent (ratelimit.Spent), so the budget blocks whatever its rule's
// algorithm: a sliding window or token bucket records the overshoot too.
func Metered[O any](l *ratelimit.Limiter, name string) adapter.Deferred[O] {
	return adapter.Deferred[O]{Limiter: l, Charge: func(ctx context.Context, _ O) (float64, bool) {
		v := adapter.MeterFrom(ctx).Value(name)
		return v, v > 0
	}}
}

// CountWhen charges l with 1 for each outcome that counted reports, for example
// failed logins only. Before the handler (PeekCost 1), callers whom one more
// counted outcome would put over the limit are rejected: with a limit of 5,
// the attempt after five counted outcomes is.
func CountWhen[O any](l *ratelimit.Limiter, counted func(o O) bool) adapter.Deferred[O] {
	return adapter.Deferred[O]{Limiter: l, PeekCost: 1, Charge: func(_ context.Context, o O) (float64, bool) {
		return 1, counted(o)
	}}
}

// Validate reports a nil limiter, a Deferred without Limiter or Charge, and
// a Deferred whose PeekCost is negative, NaN or infinite (its peek would fail
// open on every request, so it would never block before the handler).
// Adapters call it when they are built, so that the mistake shows at start-up
// rather than on the first request.
func (g *Guard[O]) Validate() error {
	var errs []error
	for i, l := range g.Limiters {
		if l == nil {
			errs = append(errs, fmt.Errorf("limiter %d is nil", i))
		}
	}
	for i, d := range g.Deferred {
		if d.Limiter == nil || d.Charge == nil {
			errs = append(errs, fmt.Errorf("deferred limiter %d: nil Limiter or Charge", i))
		}
		if c := d.PeekCost; !(c >= 0 && c <= math.MaxFloat64) { // negative, infinite or NaN
			errs = append(errs, fmt.Errorf("deferred limiter %d: PeekCost %v is not a finite cost of at least 0", i, c))
		}
	}
	return errors.Join(errs...)
}

// Metering reports whether the handler needs a Meter and its outcome (some
// Deferred is configured).
func (g *Guard[O]) Metering() bool { return len(g.Deferred) > 0 }

// Decide decides whether the request identified by id may proceed. Deferred
// limiters are peeked first (peeks count nothing, so a request they reject is
// not charged to the counting limiters), then Limiters are checked in order
// with opts (a ratelimit.Cost, say), stopping at the first that blocks. A peek's result
// is part of the decision only when it blocks: the headers of an allowed
// response describe the request limits, not a resource budget in other units.
// A peek or check its caller canceled (ratelimit.ErrCanceled: ctx ended)
// ends the decision too, and is its last result (see Canceled): the caller
// is gone, and the limiters after it would count a request that never runs.
func (g *Guard[O]) Decide(ctx context.Context, id ratelimit.Identifier, opts ...ratelimit.CheckOption) *ratelimitheaders.Decision {
	var d *ratelimitheaders.Decision
	if len(g.Limiters)+len(g.Deferred) == 1 {
		// The usual guard, one limiter: the decision and its result in one
		// allocation.
		b := &oneDecision{}
		b.d.Results = b.results[:0]
		d = &b.d
	} else {
		d = &ratelimitheaders.Decision{Results: make([]ratelimit.Result, 0, len(g.Limiters)+1)}
	}
	for _, df := range g.Deferred {
		if res := df.Limiter.Peek(ctx, id, ratelimit.Cost(df.PeekCost)); res.Blocked() && !res.Failed() || canceled(&res) {
			d.Results = append(d.Results, res)
			return d
		}
	}
	for _, l := range g.Limiters {
		res := l.Check(ctx, id, opts...)
		d.Results = append(d.Results, res)
		if res.Blocked() && !res.Failed() || canceled(&res) {
			break
		}
	}
	return d
}

// Canceled returns the error of the check of d that its caller canceled (it
// wraps ratelimit.ErrCanceled and the context's error), or nil. Such a check
// failed open without counting, and the request was not decided: its caller
// went away, or its deadline passed, during the checks. An adapter must not
// run the handler then: a client over its limit would otherwise have it run,
// uncounted, by hanging up during the check.
func Canceled(d *ratelimitheaders.Decision) error {
	for i := range d.Results {
		if r := &d.Results[i]; canceled(r) {
			return r.Err
		}
	}
	return nil
}

func canceled(r *ratelimit.Result) bool {
	return r.Err != nil && errors.Is(r.Err, ratelimit.ErrCanceled)
}

// oneDecision is the decision of a guard with one limiter and room for its
// result.
type oneDecision struct {
	d       ratelimitheaders.Decision
	results [1]ratelimit.Result
}

// Run runs the handler of a request that Decide allowed. When Metering, the
// handler's context carries a Meter (for AddCost), and once it returns the
// Deferred limiters are charged with its outcome (Settle); otherwise handler
// runs with ctx as is. It returns the handler's outcome.
//
// A handler that panics has spent resources too (a reverse proxy panics with
// http.ErrAbortHandler when its client hangs up mid-response): the Deferred
// limiters are charged with panicked's outcome (the zero O when panicked is
// nil), and the panic goes on unrecovered, its value and stack unchanged.
func (g *Guard[O]) Run(ctx context.Context, id ratelimit.Identifier, handler func(ctx context.Context) O,
	panicked func(ctx context.Context) O) O {
	if !g.Metering() {
		return handler(ctx)
	}
	ctx, _ = adapter.WithMeter(ctx)
	returned := false
	defer func() {
		if returned {
			return
		}
		var o O
		if panicked != nil {
			o = panicked(ctx)
		}
		g.Settle(ctx, id, o)
	}()
	o := handler(ctx)
	returned = true
	g.Settle(ctx, id, o)
	return o
}

// Settle charges the Deferred limiters once the handler has finished: each
// whose Charge returns ok and a positive, finite cost (an infinite one is a
// bad measurement, ignored as Meter.Add ignores it: charged, it would fail
// the check open, as a store failure). ctx should be the handler's (it
// carries the Meter that Metered reads). Settle runs without ctx's
// cancellation, so a caller that hangs up still pays for the work it caused.
// It returns the results of the checks it made.
func (g *Guard[O]) Settle(ctx context.Context, id ratelimit.Identifier, o O) []ratelimit.Result {
	ctx = context.WithoutCancel(ctx)
	var out []ratelimit.Result
	for _, df := range g.Deferred {
		if cost, ok := df.Charge(ctx, o); ok && cost > 0 && cost <= math.MaxFloat64 { // not NaN, not +Inf
			out = append(out, df.Limiter.Check(ctx, id, ratelimit.Cost(cost), ratelimit.Spent()))
		}
	}
	return out
}
