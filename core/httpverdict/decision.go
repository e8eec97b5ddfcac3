package httpverdict

import (
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Decision is the combined verdict of every limiter that looked at one request.
type Decision struct {
	// Results holds one result per limiter check or peek, in order.
	Results []ratelimit.Result
}

// Blocked reports whether any result blocks: any block blocks.
func (d *Decision) Blocked() bool {
	for i := range d.Results {
		if d.Results[i].Blocked() {
			return true
		}
	}
	return false
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
// rule across all results, ranked as ratelimit.Result ranks its own: blocking
// first, then exceeded, then least remaining, ties to the earlier limiter. It is
// nil when no enforcing rule was evaluated (nothing matched, skip, shadow rules
// only, or fail-open), and then no rate-limit headers are sent.
func (d *Decision) Enforcing() *ratelimit.Evaluation {
	var best *ratelimit.Evaluation
	for i := range d.Results {
		e := d.Results[i].Enforcing()
		if e != nil && (best == nil || ratelimit.MoreConstraining(e, best)) {
			best = e
		}
	}
	return best
}

// blocking returns the evaluations that block the request.
func (d *Decision) blocking() []*ratelimit.Evaluation {
	var out []*ratelimit.Evaluation
	for i := range d.Results {
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
	for _, e := range d.blocking() {
		names = append(names, e.Rule.Name)
	}
	return names
}

// RetryAfter returns how long a blocked caller must wait: until the latest
// reset among the blocking rules, rounded up to whole seconds. It is 0 when
// nothing blocks.
func (d *Decision) RetryAfter(now time.Time) time.Duration {
	var max time.Duration
	for _, e := range d.blocking() {
		if ra := e.Info.RetryAfter(now); ra > max {
			max = ra
		}
	}
	return max
}
