package rollout

import (
	"context"
	"sort"
	"sync"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Agreement classifies one request's pair of decisions.
type Agreement string

const (
	// Agree means both blocked, or both allowed.
	Agree Agreement = "agree"
	// NewOnly means the new limiter blocked (or would have, in shadow mode) and
	// the legacy check allowed.
	NewOnly Agreement = "new_only"
	// LegacyOnly means the legacy check blocked and the new limiter allowed.
	LegacyOnly Agreement = "legacy_only"
	// Failed means the new limiter failed open (Result.Err), so it gave no
	// decision to compare. Failed decisions are counted but left out of the
	// divergence ratio.
	Failed Agreement = "failed"
)

// NoRule is the rule label of a decision whose new result names no rule
// (nothing matched). It cannot collide with a rule name.
const NoRule = "(none)"

// Decision is the outcome of one Check: the new limiter's result beside the
// legacy decision.
type Decision struct {
	Result ratelimit.Result
	// Legacy reports that the legacy check blocked the request.
	Legacy bool
	// Agreement compares Legacy with Result.WouldBlock().
	Agreement Agreement
	// Rule is the new result's deciding rule (the blocking one, else the most
	// constraining), or NoRule: the label divergence is counted under.
	Rule string
}

// Block reports what the caller must do: while the limiter runs in shadow
// mode the legacy check decides; once it enforces, the new limiter does.
func (d *Decision) Block() bool {
	if d.Result.Shadow {
		return d.Legacy
	}
	return d.Result.Blocked()
}

// Recorder receives every decision (observe.RolloutMetrics counts them for
// Prometheus; Tally keeps them in memory). It must be safe for concurrent use
// and must not block.
type Recorder interface {
	RecordDecision(ctx context.Context, limiter string, d *Decision)
}

// Rollout runs a legacy decision beside a limiter on the same request and
// records whether they agree. It is safe for concurrent use.
type Rollout struct {
	limiter  *ratelimit.Limiter
	recorder Recorder
}

// New returns a Rollout of l; rec may be nil (nothing recorded).
func New(l *ratelimit.Limiter, rec Recorder) *Rollout {
	return &Rollout{limiter: l, recorder: rec}
}

// Limiter returns the limiter under rollout.
func (r *Rollout) Limiter() *ratelimit.Limiter { return r.limiter }

// Check runs the limiter's Check for id (counting as it always does) and
// compares its verdict with legacyBlocked, the decision the legacy check
// made for the same request. Call Decision.Block to know what to do.
func (r *Rollout) Check(ctx context.Context, id ratelimit.Identifier, legacyBlocked bool, opts ...ratelimit.CheckOption) Decision {
	return r.Compare(ctx, r.limiter.Check(ctx, id, opts...), legacyBlocked)
}

// Compare records a result the caller already has (for example from an
// adapter's hook) beside the legacy decision, and returns the Decision.
func (r *Rollout) Compare(ctx context.Context, res ratelimit.Result, legacyBlocked bool) Decision {
	d := Decision{Result: res, Legacy: legacyBlocked, Rule: NoRule}
	if res.Rule != nil {
		d.Rule = res.Rule.Name
	}
	switch nb := res.WouldBlock(); {
	case res.Err != nil:
		d.Agreement = Failed
	case nb == legacyBlocked:
		d.Agreement = Agree
	case nb:
		d.Agreement = NewOnly
	default:
		d.Agreement = LegacyOnly
	}
	if r.recorder != nil {
		record(ctx, r.recorder, r.limiter.Name(), &d)
	}
	return d
}

// record never lets a recorder's panic reach the request.
func record(ctx context.Context, rec Recorder, limiter string, d *Decision) {
	defer func() { _ = recover() }()
	rec.RecordDecision(ctx, limiter, d)
}

// Counts are the decisions of one limiter (or one of its rules).
type Counts struct {
	Agree      uint64 `json:"agree"`
	NewOnly    uint64 `json:"new_only"`
	LegacyOnly uint64 `json:"legacy_only"`
	Failed     uint64 `json:"failed"`
}

// Add counts n decisions of agreement a (a Tally adds them one at a time;
// the gate adds the counts it read). An Agreement other than the four
// constants counts nothing.
func (c *Counts) Add(a Agreement, n uint64) {
	switch a {
	case Agree:
		c.Agree += n
	case NewOnly:
		c.NewOnly += n
	case LegacyOnly:
		c.LegacyOnly += n
	case Failed:
		c.Failed += n
	}
}

// Compared is the number of decisions compared (failed ones excluded).
func (c Counts) Compared() uint64 { return c.Agree + c.NewOnly + c.LegacyOnly }

// Divergent is the number of compared decisions that disagreed.
func (c Counts) Divergent() uint64 { return c.NewOnly + c.LegacyOnly }

// Ratio is Divergent / Compared, 0 when nothing was compared.
func (c Counts) Ratio() float64 {
	if c.Compared() == 0 {
		return 0
	}
	return float64(c.Divergent()) / float64(c.Compared())
}

// The gate of the rollout: the new limiter may enforce once fewer than
// MaxDivergence of its decisions over GateWindow disagreed with the legacy
// check. MinDecisions guards against a gate passed on too little traffic.
const (
	MaxDivergence = 0.005 // 0.5 %
	GateWindow    = "24h"
	MinDecisions  = 1000
)

// Verdict is the gate's answer for one limiter.
type Verdict struct {
	Limiter string  `json:"limiter"`
	Counts  Counts  `json:"counts"`
	Ratio   float64 `json:"divergence_ratio"`
	Pass    bool    `json:"pass"`
	Reason  string  `json:"reason"`
}

// Gate judges counts: it passes when at least minDecisions were compared
// (and at least one: the ratio of none says nothing) and the divergence ratio
// is below maxDivergence.
func Gate(limiter string, c Counts, maxDivergence float64, minDecisions uint64) Verdict {
	v := Verdict{Limiter: limiter, Counts: c, Ratio: c.Ratio()}
	switch {
	case c.Compared() < max(minDecisions, 1):
		v.Reason = "too few decisions compared"
	case v.Ratio >= maxDivergence:
		v.Reason = "divergence at or above the threshold"
	default:
		v.Pass, v.Reason = true, "divergence below the threshold"
	}
	return v
}

// MaxTallyRules bounds the names of a limiter's own rules (its Config.Rules
// and SetRules) that a Tally counts apart, and MaxTallyPerRequestRules the
// names its per-request rules (a rules service's answers, Envoy's limit
// overrides: ratelimit.Result.RulePerRequest) bring: those can come with
// each request, and a Tally lives as long as its process. Each has its own
// budget, so per-request names never take the place of a rule the operator
// publishes later (as observe's rule labels). The decisions of rules beyond
// them are counted together under OverflowRule, so totals stay exact.
const (
	MaxTallyRules           = ratelimit.MaxRules
	MaxTallyPerRequestRules = ratelimit.MaxRulesPerTier
)

// OverflowRule is the rule name a Tally counts the rules beyond its budgets
// under (the name observe's metrics use for theirs). No valid rule name takes
// it.
const OverflowRule = "(other)"

// Tally is an in-memory Recorder: decision counts per limiter and rule since
// it was made, within MaxTallyRules and MaxTallyPerRequestRules names per
// limiter, with NoRule and OverflowRule beside them. The debug page reads it
// (DivergenceSource).
type Tally struct {
	mu     sync.Mutex
	counts map[string]*tallyRules // by limiter
}

// tallyRules are one limiter's counts by rule name, and how many names each
// budget has given out.
type tallyRules struct {
	rules             map[string]*Counts
	local, perRequest int
}

var (
	_ Recorder         = (*Tally)(nil)
	_ DivergenceSource = (*Tally)(nil)
)

// NewTally returns an empty Tally.
func NewTally() *Tally {
	return &Tally{counts: map[string]*tallyRules{}}
}

// RecordDecision implements Recorder.
func (t *Tally) RecordDecision(_ context.Context, limiter string, d *Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.counts[limiter]
	if tr == nil {
		tr = &tallyRules{rules: map[string]*Counts{}}
		t.counts[limiter] = tr
	}
	name := d.Rule
	c := tr.rules[name]
	if c == nil && name != NoRule {
		n, budget := &tr.local, MaxTallyRules
		if d.Result.RulePerRequest {
			n, budget = &tr.perRequest, MaxTallyPerRequestRules
		}
		if *n < budget {
			*n++
		} else {
			name = OverflowRule
			c = tr.rules[name]
		}
	}
	if c == nil {
		c = &Counts{}
		tr.rules[name] = c
	}
	c.Add(d.Agreement, 1)
}

// Divergence implements DivergenceSource.
func (t *Tally) Divergence(limiter string) (Divergence, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr, ok := t.counts[limiter]
	if !ok {
		return Divergence{}, false
	}
	var d Divergence
	for name, c := range tr.rules {
		d.Total.Agree += c.Agree
		d.Total.NewOnly += c.NewOnly
		d.Total.LegacyOnly += c.LegacyOnly
		d.Total.Failed += c.Failed
		d.Rules = append(d.Rules, RuleCounts{Rule: name, Counts: *c})
	}
	sort.Slice(d.Rules, func(i, j int) bool { return d.Rules[i].Rule < d.Rules[j].Rule })
	return d, true
}

// Divergence is a limiter's decisions so far, in total and per rule.
type Divergence struct {
	Total Counts
	Rules []RuleCounts // sorted by rule name
}

// RuleCounts are the decisions counted under one rule label.
type RuleCounts struct {
	Rule   string `json:"rule"`
	Counts Counts `json:"counts"`
}

// DivergenceSource gives a limiter's decisions so far; ok is false for a
// limiter it has no decision of. Tally and observe.RolloutMetrics implement it.
type DivergenceSource interface {
	Divergence(limiter string) (d Divergence, ok bool)
}
