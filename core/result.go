package ratelimit

import (
	"math"
	"time"
)

// Result is the verdict of a Check or Peek (docs/design.md#the-result).
type Result struct {
	// Limiter is the name of the limiter that produced the result.
	Limiter string
	// Action is ActionAllow or ActionBlock: what the caller should do.
	Action Verdict
	// Exceeded reports whether any evaluated rule exceeded its limit (including
	// shadow log rules, which never block).
	Exceeded bool
	// Matched reports whether any rule applied.
	Matched bool
	// Skipped reports that a skip rule ended the evaluation.
	Skipped bool
	// RulePerRequest reports that Rule came from a per-request tier
	// (WithRules or Config.RuleSource), as Evaluation.PerRequest does of an
	// evaluation; a skip rule has no evaluation to say so.
	RulePerRequest bool
	// Rule is the most constraining evaluated rule: the blocking rule, else an
	// exceeded one, else the one with the least remaining, ties to rule order.
	// For a skip it is the skip rule. Nil when nothing matched or on error.
	Rule *Rule
	// Info holds the resolved values of Rule's evaluation; nil for skip, no
	// match and error results.
	Info *Info
	// Err is set when the check failed open: the store was unavailable, timed
	// out, or a limit or period resolver failed. Action is then ActionAllow.
	Err error
	// Degraded reports that rules were left out of the check: a counting
	// rule whose characteristic or count_distinct property the identifier
	// lacks, or the per-request rules (Config.RuleSource, WithRules) when
	// they would take the list past MaxRules. Each is logged at WARN and
	// counted as a failed check by observability/observe.
	Degraded bool
	// Evaluations lists every counting rule evaluated, in rule order.
	Evaluations []Evaluation
	// Shadow reports that the limiter ran in shadow mode (Enforcement
	// Shadow): it counted as enforcing would, but Action is always
	// ActionAllow and Enforcing returns nil, so a client sees nothing of it.
	// WouldBlock tells the verdict enforcement would have given.
	Shadow bool
}

// Info holds the resolved values of one rule evaluation.
type Info struct {
	Limit     int64         // resolved limit
	Period    time.Duration // resolved window length
	Count     float64       // count (or distinct values) in the window, after this check; a sliding window's estimate; a token bucket's tokens in use
	Remaining float64       // max(Limit - Count, 0); for a token bucket, the tokens left of its burst; 0 while Banned
	ResetAt   time.Time     // when the window ends (a token bucket: is full again), or the ban when Banned; a blocked sliding window or token bucket: when the same check passes, or for a cost that never does (over the limit, over the burst) when the rule is as good as it gets: the window empty, the bucket full (now if it already is), so a client retrying then gets the same answer and one retrying sooner no other
	Banned    bool          // a ban is active
	// Never reports that the check exceeded the rule by its cost alone: the
	// cost is over the rule's fixed limit (a token bucket's burst), so no wait
	// lets the same check pass under the rule's present limit. ResetAt is then
	// when the rule is as good as it gets, and a client should not retry the
	// check: the adapters send no Retry-After for it (docs/design.md#cost). A
	// LimitFunc's limit (0 denies all) is a switch an operator turns back: it
	// never sets Never.
	Never bool
}

// RetryAfter returns the time from now until ResetAt, rounded up to whole
// seconds so that a caller told to wait never comes back early, and at most
// MaxRetryAfter.
func (i *Info) RetryAfter(now time.Time) time.Duration {
	if i == nil {
		return 0
	}
	d := i.ResetAt.Sub(now)
	if d <= 0 {
		return 0
	}
	if d > MaxRetryAfter {
		return MaxRetryAfter
	}
	return time.Duration(math.Ceil(d.Seconds())) * time.Second
}

// Evaluation is one counting rule's part of a Result.
type Evaluation struct {
	Rule     *Rule
	Exceeded bool
	Blocked  bool // an exceeded limit rule: the verdict is block (in shadow mode: would be)
	Info     Info
	// PerRequest reports that the rule came from a per-request tier
	// (WithRules or Config.RuleSource) rather than the limiter's own rules.
	PerRequest bool
	// Tier names the per-request tier the rule came from when its RuleSet
	// was compiled with a tier name by CompileRules (the rules service's client says
	// "remote"); "" otherwise.
	Tier string
}

// Shadow reports whether the evaluated rule is a log (shadow) rule.
func (e *Evaluation) Shadow() bool { return e.Rule.Action == ActionLog }

// Blocked reports whether the verdict is block.
func (r *Result) Blocked() bool { return r.Action == ActionBlock }

// The accessors below read Rule and Info without a nil check: they return the
// zero value when the result has no rule or no info (a skip, no match, or a
// store failure, when Info and Rule are nil). They have value receivers so
// that limiter.Check(ctx, id).Remaining() compiles.

// RuleName returns the name of Rule, or "".
func (r Result) RuleName() string {
	if r.Rule == nil {
		return ""
	}
	return r.Rule.Name
}

// Limit returns Info.Limit, or 0.
func (r Result) Limit() int64 { return r.info().Limit }

// Count returns Info.Count, or 0.
func (r Result) Count() float64 { return r.info().Count }

// Remaining returns Info.Remaining, or 0.
func (r Result) Remaining() float64 { return r.info().Remaining }

// ResetAt returns Info.ResetAt, or the zero time.
func (r Result) ResetAt() time.Time { return r.info().ResetAt }

// Banned reports Info.Banned (false without info).
func (r Result) Banned() bool { return r.info().Banned }

// RetryAfter returns how long a blocked caller should wait (Info.RetryAfter),
// at least MinRetryAfter, or 0 when the verdict is not block. When Info.Never
// no wait helps: tell the caller not to retry instead (the adapters send no
// Retry-After then).
func (r Result) RetryAfter(now time.Time) time.Duration {
	if r.Action != ActionBlock {
		return 0
	}
	return max(r.Info.RetryAfter(now), MinRetryAfter) // nil-safe
}

// MinRetryAfter is the least wait a blocked caller is told: never to come
// back at once. A block can reset now: a cost that never passes resets when
// its rule is at its best (the window empty, the bucket full), which it may
// be already, and a reset can pass between the check and the answer.
const MinRetryAfter = time.Second

// MaxRetryAfter is the longest wait a blocked caller is told: the longest
// Duration of whole seconds (292 years), what a reset beyond it (a saturated
// wait, see Info.ResetAt) is told. Rounding such a wait up to whole seconds
// would overflow into a negative one, which tells the caller to come back at
// once.
const MaxRetryAfter = math.MaxInt64 / time.Second * time.Second

func (r Result) info() Info {
	if r.Info == nil {
		return Info{}
	}
	return *r.Info
}

// WouldBlock reports whether the verdict is block, or would have been had the
// limiter been enforcing (a shadow result with a blocking evaluation). It is
// what a rollout compares with the legacy decision.
func (r *Result) WouldBlock() bool {
	if r.Action == ActionBlock {
		return true
	}
	if !r.Shadow {
		return false
	}
	for i := range r.Evaluations {
		if r.Evaluations[i].Blocked {
			return true
		}
	}
	return false
}

// Failed reports whether the result failed open (Err != nil).
func (r *Result) Failed() bool { return r.Err != nil }

// Enforcing returns the most constraining evaluation of a limit (enforcing)
// rule, or nil. Response headers are built from it, so shadow rules never
// change what a client sees; for the same reason it is nil for a result of a
// limiter in shadow mode.
func (r *Result) Enforcing() *Evaluation {
	if r.Shadow {
		return nil
	}
	return mostConstraining(r.Evaluations, true)
}

// MoreConstraining reports whether evaluation a ranks before b: blocking
// first, then exceeded, then least remaining (docs/design.md#the-result). Equal
// evaluations rank by rule order, which the caller keeps by preferring the
// earlier one. Adapters use it to pick one evaluation across several limiters.
func (a *Evaluation) MoreConstraining(b *Evaluation) bool {
	if a.Blocked != b.Blocked {
		return a.Blocked
	}
	if a.Exceeded != b.Exceeded {
		return a.Exceeded
	}
	// Remaining allowances within floating-point error are a tie (a token
	// bucket's 0.5000000001 and a sliding window's 0.5), as counts within it
	// are within their limit (algoEps).
	if d := a.Info.Remaining - b.Info.Remaining; d < -algoEps || d > algoEps {
		return d < 0
	}
	return false // stable: earlier rule wins
}

func mostConstraining(evs []Evaluation, enforcingOnly bool) *Evaluation {
	var best *Evaluation
	for i := range evs {
		e := &evs[i]
		if enforcingOnly && e.Rule.Action != ActionLimit {
			continue
		}
		if best == nil || e.MoreConstraining(best) {
			best = e
		}
	}
	return best
}
