package adapter

import (
	"context"
	"errors"
	"fmt"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Guard runs the checks of one request, call or task for an adapter, the same
// way in every transport: Check before the handler, Run (or Settle) after it.
// O is what the adapter knows once the handler has finished (an HTTP status, a
// gRPC error, a task error); the deferred limiters' Charge functions read it.
// The zero value checks nothing. A Guard is safe for concurrent use once built.
type Guard[O any] struct {
	// Limiters are checked (counted) before the handler, in order. The first
	// that blocks ends the checks: later limiters do not count a request that
	// is rejected anyway.
	Limiters []*ratelimit.Limiter
	// Deferred limiters are peeked before the handler and charged after it.
	Deferred []Deferred[O]
}

// Deferred is a limiter charged after the handler, with a cost known only then
// (docs/design.md#cost). Before the handler it is peeked, and a caller it would
// block is rejected without running the handler. The charge never changes the
// response, and it is made even when the caller has gone away, because the
// resources were spent.
type Deferred[O any] struct {
	Limiter *ratelimit.Limiter
	// Charge returns the cost to count once the handler has finished, and
	// whether to count at all. ctx is the handler's context without its
	// cancellation; it carries the request's Meter.
	Charge func(ctx context.Context, o O) (cost float64, ok bool)
	// PeekCost is the cost the peek before the handler assumes. 0 blocks only
	// callers already over the limit (right when the cost is unknown until the
	// work is done); 1 blocks callers whom one more counted outcome would put
	// over it, so that a limit of 5 admits exactly 5 counted outcomes.
	PeekCost float64
}

// Metered charges l with the named cost that the handler reported through
// AddCost(ctx, name, v) (database seconds, partner API calls), when it is
// positive. Run gives the handler a context with a Meter. Callers already over
// budget are rejected before the handler; one call may overshoot (its cost is
// known only afterwards), and the next is then rejected.
func Metered[O any](l *ratelimit.Limiter, name string) Deferred[O] {
	return Deferred[O]{Limiter: l, Charge: func(ctx context.Context, _ O) (float64, bool) {
		v := MeterFrom(ctx).Value(name)
		return v, v > 0
	}}
}

// CountWhen charges l with 1 for each outcome that counted reports, for example
// failed logins only. Before the handler (PeekCost 1), callers whom one more
// counted outcome would put over the limit are rejected: with a limit of 5,
// the attempt after five counted outcomes is.
func CountWhen[O any](l *ratelimit.Limiter, counted func(o O) bool) Deferred[O] {
	return Deferred[O]{Limiter: l, PeekCost: 1, Charge: func(_ context.Context, o O) (float64, bool) {
		return 1, counted(o)
	}}
}

// Validate reports a nil limiter or a Deferred without Limiter or Charge.
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
	}
	return errors.Join(errs...)
}

// Metering reports whether the handler needs a Meter and its outcome (some
// Deferred is configured).
func (g *Guard[O]) Metering() bool { return len(g.Deferred) > 0 }

// Check decides whether the request identified by id may proceed. Deferred
// limiters are peeked first (peeks count nothing, so a request they reject is
// not charged to the counting limiters), then Limiters are checked in order
// with opts (a ratelimit.Cost, say), stopping at the first that blocks. A peek's result
// is part of the decision only when it blocks: the headers of an allowed
// response describe the request limits, not a resource budget in other units.
func (g *Guard[O]) Check(ctx context.Context, id ratelimit.Identifier, opts ...ratelimit.CheckOption) *Decision {
	d := &Decision{Results: make([]ratelimit.Result, 0, len(g.Limiters)+1)}
	for _, df := range g.Deferred {
		if res := df.Limiter.Peek(ctx, id, ratelimit.Cost(df.PeekCost)); res.Blocked() && !res.Failed() {
			d.Results = append(d.Results, res)
			return d
		}
	}
	for _, l := range g.Limiters {
		res := l.Check(ctx, id, opts...)
		d.Results = append(d.Results, res)
		if res.Blocked() && !res.Failed() {
			break
		}
	}
	return d
}

// Run runs the handler of a request that Check allowed. When Metering, the
// handler's context carries a Meter (for AddCost), and once it returns the
// Deferred limiters are charged with its outcome (Settle); otherwise handler
// runs with ctx as is. It returns the handler's outcome.
func (g *Guard[O]) Run(ctx context.Context, id ratelimit.Identifier, handler func(ctx context.Context) O) O {
	if !g.Metering() {
		return handler(ctx)
	}
	ctx, _ = WithMeter(ctx)
	o := handler(ctx)
	g.Settle(ctx, id, o)
	return o
}

// Settle charges the Deferred limiters once the handler has finished: each
// whose Charge returns ok and a positive cost. ctx should be the handler's (it
// carries the Meter that Metered reads). Settle runs without ctx's
// cancellation, so a caller that hangs up still pays for the work it caused.
// It returns the results of the checks it made.
func (g *Guard[O]) Settle(ctx context.Context, id ratelimit.Identifier, o O) []ratelimit.Result {
	ctx = context.WithoutCancel(ctx)
	var out []ratelimit.Result
	for _, df := range g.Deferred {
		if cost, ok := df.Charge(ctx, o); ok && cost > 0 {
			out = append(out, df.Limiter.Check(ctx, id, ratelimit.Cost(cost)))
		}
	}
	return out
}

// Decision is the combined verdict of every limiter that looked at one
// request: what each adapter renders (headers, gRPC status and metadata, a
// task's retry delay).
//
// Fail-open: a result with Err set (its limiter's store failed) contributes
// nothing. It never blocks, and rate-limit headers or metadata come only from
// the limiters whose check succeeded; when none did, there are none, since
// there is nothing true to say.
type Decision struct {
	// Results holds one result per limiter check, in order, and the result of
	// a deferred limiter's peek when it blocked.
	Results []ratelimit.Result
}

// Blocked reports whether any result that did not fail open blocks.
func (d *Decision) Blocked() bool { return d.BlockedBy() != nil }

// BlockedBy returns the first result that blocks (the Check stops there), or
// nil when the request may proceed.
func (d *Decision) BlockedBy() *ratelimit.Result {
	for i := range d.Results {
		if r := &d.Results[i]; r.Blocked() && !r.Failed() {
			return r
		}
	}
	return nil
}

// Failed reports whether any limiter failed open.
func (d *Decision) Failed() bool {
	for i := range d.Results {
		if d.Results[i].Failed() {
			return true
		}
	}
	return false
}

// Enforcing returns the most constraining evaluation of an enforcing (limit)
// rule across the results that did not fail open, ranked by ratelimit.Evaluation.MoreConstraining:
// blocking first, then exceeded, then least remaining, ties to the earlier
// limiter. It is nil when no enforcing rule was evaluated (nothing matched,
// skip, shadow rules only, or fail-open), and then adapters send no rate-limit
// headers or metadata.
func (d *Decision) Enforcing() *ratelimit.Evaluation {
	var best *ratelimit.Evaluation
	for i := range d.Results {
		if d.Results[i].Failed() {
			continue
		}
		e := d.Results[i].Enforcing()
		if e != nil && (best == nil || e.MoreConstraining(best)) {
			best = e
		}
	}
	return best
}

// Blocking returns the evaluations that block the request.
func (d *Decision) Blocking() []*ratelimit.Evaluation {
	var out []*ratelimit.Evaluation
	for i := range d.Results {
		if d.Results[i].Failed() {
			continue
		}
		evs := d.Results[i].Evaluations
		for j := range evs {
			if evs[j].Blocked {
				out = append(out, &evs[j])
			}
		}
	}
	return out
}

// ViolatedPolicies returns the names of the rules that block the request.
func (d *Decision) ViolatedPolicies() []string {
	var names []string
	for _, e := range d.Blocking() {
		names = append(names, e.Rule.Name)
	}
	return names
}

// RetryAfter returns how long a blocked caller must wait: until the latest
// reset among the blocking rules, rounded up to whole seconds. It is 0 when
// nothing blocks.
func (d *Decision) RetryAfter(now time.Time) time.Duration {
	var longest time.Duration
	for _, e := range d.Blocking() {
		longest = max(longest, e.Info.RetryAfter(now))
	}
	return longest
}
