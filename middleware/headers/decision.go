package ratelimitheaders

import (
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

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

// Blocking returns the evaluations that block the request: those of the
// results that block. A limiter in shadow mode keeps its would-block
// evaluation in a result that allows (see ratelimit.Result.WouldBlock); it is
// left out, so a shadow rule never names a violated policy nor lengthens
// Retry-After.
func (d *Decision) Blocking() []*ratelimit.Evaluation {
	var out []*ratelimit.Evaluation
	d.eachBlocking(func(e *ratelimit.Evaluation) { out = append(out, e) })
	return out
}

// eachBlocking calls f with each evaluation that Blocking returns, in order,
// without building its slice.
func (d *Decision) eachBlocking(f func(e *ratelimit.Evaluation)) {
	for i := range d.Results {
		if r := &d.Results[i]; !r.Blocked() || r.Failed() {
			continue
		}
		evs := d.Results[i].Evaluations
		for j := range evs {
			if evs[j].Blocked {
				f(&evs[j])
			}
		}
	}
}

// ViolatedPolicies returns the names of the rules that block the request.
func (d *Decision) ViolatedPolicies() []string {
	var names []string
	for _, e := range d.Blocking() {
		names = append(names, e.Rule.Name)
	}
	return names
}

// Never reports whether a rule blocks the request by its cost alone (its
// ratelimit.Info.Never): no wait lets the same request pass, so it must not be
// retried. SetHeaders then sends no Retry-After and NewProblem says so. It
// walks the results as Blocking does, without building its slice: SetHeaders
// asks on every blocked request.
func (d *Decision) Never() bool {
	for i := range d.Results {
		if r := &d.Results[i]; !r.Blocked() || r.Failed() {
			continue
		}
		for j := range d.Results[i].Evaluations {
			if e := &d.Results[i].Evaluations[j]; e.Blocked && e.Info.Never {
				return true
			}
		}
	}
	return false
}

// RetryAfter returns how long a blocked caller must wait: until the latest
// reset among the blocking rules, rounded up to whole seconds, and at least
// ratelimit.MinRetryAfter. It is 0 when nothing blocks. When Never, no wait
// helps: it is then when the blocking rules are as good as they get. It
// does not build Blocking's slice: SetHeaders asks on every blocked request.
func (d *Decision) RetryAfter(now time.Time) time.Duration {
	var longest time.Duration // 0 until a blocking evaluation is seen
	d.eachBlocking(func(e *ratelimit.Evaluation) {
		longest = max(longest, ratelimit.MinRetryAfter, e.Info.RetryAfter(now))
	})
	return longest
}
