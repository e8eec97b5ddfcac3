package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekit/ratekit/conformance"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

// The scenario runner: conformance/README.md documents the format it reads.

// scenario is one file of conformance/scenarios.
type scenario struct {
	Description string            `yaml:"description"`
	Rules       []scenarioRule    `yaml:"rules"`
	Tiers       *scenarioTiers    `yaml:"tiers"`
	Mode        string            `yaml:"mode"`
	Limiters    []scenarioLimiter `yaml:"limiters"`
	Steps       []scenarioStep    `yaml:"steps"`

	lims []scenarioLimiter // Limiters, or the one limiter of Rules or Tiers and Mode
	vals *scenarioValues   // the values limit_from reads, set by set_values steps
}

// scenarioLimiter is one limiter of a scenario.
type scenarioLimiter struct {
	Name  string         `yaml:"name"`
	Mode  string         `yaml:"mode"`
	Rules []scenarioRule `yaml:"rules"`
	Tiers *scenarioTiers `yaml:"tiers"`
}

// oneLimiter is the name of the limiter of a scenario that gives rules or
// tiers rather than limiters.
const oneLimiter = "conformance"

// scenarioValues are the application's values that rules read their limit
// from (limit_from), as a LimitFunc does: resolved at every check.
type scenarioValues struct {
	mu sync.Mutex
	m  map[string]int64
}

func (v *scenarioValues) set(m map[string]int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, n := range m {
		v.m[k] = n
	}
}

func (v *scenarioValues) get(name string) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n, ok := v.m[name]
	if !ok {
		return 0, fmt.Errorf("value %s is not set", name)
	}
	return n, nil
}

func (v *scenarioValues) reset() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m = map[string]int64{}
}

// scenarioTiers are rule tiers merged by name, highest first.
type scenarioTiers struct {
	Remote    []scenarioRule `yaml:"remote"`
	File      []scenarioRule `yaml:"file"`
	Published []scenarioRule `yaml:"published"`
	Default   []scenarioRule `yaml:"default"`
}

// scenarioRule is a rule as rate_limits.yaml spells it.
type scenarioRule struct {
	Name            string               `yaml:"name"`
	Match           map[string]yaml.Node `yaml:"match"`
	Characteristics []string             `yaml:"characteristics"`
	CountMissing    bool                 `yaml:"count_missing"`
	Limit           int64                `yaml:"limit"`
	LimitFrom       string               `yaml:"limit_from"`
	PeriodS         float64              `yaml:"period_s"`
	Action          string               `yaml:"action"`
	BanForS         float64              `yaml:"ban_for_s"`
	CountDistinct   string               `yaml:"count_distinct"`
	Algorithm       string               `yaml:"algorithm"`
	Burst           int64                `yaml:"burst"`
}

type scenarioStep struct {
	Check     map[string]any   `yaml:"check"`
	Peek      map[string]any   `yaml:"peek"`
	Clear     map[string]any   `yaml:"clear"`
	AdvanceS  float64          `yaml:"advance_s"`
	SetRules  []scenarioRule   `yaml:"set_rules"`
	SetTiers  *scenarioTiers   `yaml:"set_tiers"`
	SetMode   string           `yaml:"set_mode"`
	SetValues map[string]int64 `yaml:"set_values"`
	Batch     []scenarioStep   `yaml:"batch"` // checks made as one CheckBatch
	Limiter   string           `yaml:"limiter"`
	Cost      *float64         `yaml:"cost"`
	Spent     bool             `yaml:"spent"` // a check's cost already spent (ratelimit.Spent)
	Repeat    int              `yaml:"repeat"`
	Expect    *scenarioExpect  `yaml:"expect"`
	line      int
}

// scenarioExpect is what a step's result must be; an absent field is not checked.
type scenarioExpect struct {
	Action      *string              `yaml:"action"`
	Exceeded    *bool                `yaml:"exceeded"`
	Rule        *string              `yaml:"rule"` // "" for none
	Skipped     *bool                `yaml:"skipped"`
	Degraded    *bool                `yaml:"degraded"`
	Matched     *bool                `yaml:"matched"`
	Count       *float64             `yaml:"count"`
	Remaining   *float64             `yaml:"remaining"`
	Limit       *int64               `yaml:"limit"`
	Banned      *bool                `yaml:"banned"`
	Never       *bool                `yaml:"never"`
	ResetS      *float64             `yaml:"reset_s"`
	NoInfo      *bool                `yaml:"no_info"`
	Evaluations []scenarioEvaluation `yaml:"evaluations"`
	Shadow      *bool                `yaml:"shadow"`
	WouldBlock  *bool                `yaml:"would_block"`
	Error       *bool                `yaml:"error"`
	Cleared     *int                 `yaml:"cleared"`
}

type scenarioEvaluation struct {
	Rule      string   `yaml:"rule"`
	Exceeded  *bool    `yaml:"exceeded"`
	Blocked   *bool    `yaml:"blocked"`
	Count     *float64 `yaml:"count"`
	Remaining *float64 `yaml:"remaining"`
	Banned    *bool    `yaml:"banned"`
	ResetS    *float64 `yaml:"reset_s"`
}

// RunScenarios runs every file of conformance/scenarios on fresh harnesses
// from newHarness, one subtest per file.
func RunScenarios(t *testing.T, newHarness NewHarness) { runScenarios(t, newHarness, false) }

// RunScenariosBatched runs every file as RunScenarios does, each check made
// as a batch of one (ratelimit.CheckBatch): a batch's result is the one its
// Check would give (docs/design.md#batches), through the store's EvalBatch.
func RunScenariosBatched(t *testing.T, newHarness NewHarness) { runScenarios(t, newHarness, true) }

func runScenarios(t *testing.T, newHarness NewHarness, batched bool) {
	scenarios := conformance.Scenarios()
	names, err := fs.Glob(scenarios, "*.yaml")
	if err != nil || len(names) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			data, err := fs.ReadFile(scenarios, name)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := parseScenario(data)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			sc.run(t, name, newHarness(t), batched)
		})
	}
}

// parseScenario reads one file strictly: an unknown field is an error, so
// that a typo never turns an expectation into no expectation.
func parseScenario(data []byte) (*scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var sc scenario
	if err := dec.Decode(&sc); err != nil {
		return nil, err
	}
	// A second document would never be read, its steps never run.
	switch err := dec.Decode(new(yaml.Node)); {
	case err == nil:
		return nil, fmt.Errorf("want one YAML document, not a second one after it")
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("after the document: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	// Step line numbers, for messages.
	if len(root.Content) == 1 {
		m := root.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "steps" {
				for j, s := range m.Content[i+1].Content {
					if j < len(sc.Steps) {
						sc.Steps[j].line = s.Line
					}
				}
			}
		}
	}
	if len(sc.Steps) == 0 {
		return nil, fmt.Errorf("no steps")
	}
	if err := sc.validateLimiters(); err != nil {
		return nil, err
	}
	sc.vals = &scenarioValues{}
	sc.vals.reset()
	// Rules are converted here, not only when run, so that a match form
	// the runner does not know is refused like an unknown key.
	reads, sets := map[string]bool{}, map[string]bool{} // values limit_from reads, set_values sets
	for _, l := range sc.lims {
		if _, err := sc.rules(l.Rules, l.Tiers, reads); err != nil {
			return nil, fmt.Errorf("limiter %s: rules: %w", l.Name, err)
		}
	}
	expects := 0
	for i := range sc.Steps {
		st := &sc.Steps[i]
		err := st.validate()
		if err == nil {
			err = sc.validateLimiterOf(st)
		}
		if err == nil && (st.SetRules != nil || st.SetTiers != nil) {
			_, err = sc.rules(st.SetRules, st.SetTiers, reads)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d (step %d): %w", st.line, i+1, err)
		}
		for k := range st.SetValues {
			sets[k] = true
		}
		if st.Expect != nil {
			expects++
		}
		for j := range st.Batch {
			if st.Batch[j].Expect != nil {
				expects++
			}
		}
	}
	if expects == 0 {
		return nil, fmt.Errorf("no step has an expect: the scenario expects nothing")
	}
	// A misspelt value name would leave a limit unset (every check failing
	// open) or a set_values step setting nothing any rule reads.
	for _, k := range slices.Sorted(maps.Keys(reads)) {
		if !sets[k] {
			return nil, fmt.Errorf("limit_from %s: no set_values step sets it", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sets)) {
		if !reads[k] {
			return nil, fmt.Errorf("set_values %s: no rule reads it (limit_from)", k)
		}
	}
	return &sc, nil
}

// validateLimiters checks the scenario's limiters (limiters, or rules or
// tiers with mode) and resolves them into sc.lims.
func (sc *scenario) validateLimiters() error {
	if sc.Limiters == nil {
		if (sc.Rules == nil) == (sc.Tiers == nil) {
			return fmt.Errorf("want exactly one of rules, tiers and limiters")
		}
		sc.lims = []scenarioLimiter{{Name: oneLimiter, Mode: sc.Mode, Rules: sc.Rules, Tiers: sc.Tiers}}
	} else {
		switch {
		case sc.Rules != nil || sc.Tiers != nil || sc.Mode != "":
			return fmt.Errorf("limiters: rules, tiers and mode go on each limiter, not beside limiters")
		case len(sc.Limiters) == 0:
			return fmt.Errorf("limiters: want at least one")
		}
		sc.lims = sc.Limiters
	}
	seen := map[string]bool{}
	for i, l := range sc.lims {
		switch {
		case !rulecheck.ValidName(l.Name):
			return fmt.Errorf("limiter %d: %w", i+1, rulecheck.NameError("limiter", l.Name))
		case seen[l.Name]:
			return fmt.Errorf("limiter %s: named twice", l.Name)
		case (l.Rules == nil) == (l.Tiers == nil):
			return fmt.Errorf("limiter %s: want exactly one of rules and tiers", l.Name)
		}
		seen[l.Name] = true
		if _, err := enforcement(l.Mode); err != nil {
			return fmt.Errorf("limiter %s: %w", l.Name, err)
		}
	}
	return nil
}

// validateLimiterOf checks the limiter a step names: one of the scenario's,
// and named on every step that acts on a limiter when there are several
// (which one would be a guess); steps that act on none name none.
func (sc *scenario) validateLimiterOf(st *scenarioStep) error {
	if st.SetMode != "" {
		if _, err := enforcement(st.SetMode); err != nil {
			return fmt.Errorf("set_mode: %w", err)
		}
	}
	if st.Batch != nil {
		for i := range st.Batch {
			if err := sc.validateLimiterOf(&st.Batch[i]); err != nil {
				return fmt.Errorf("batch check %d: %w", i+1, err)
			}
		}
	}
	switch {
	case st.AdvanceS != 0 || st.SetValues != nil || st.Batch != nil:
		if st.Limiter != "" {
			return fmt.Errorf("limiter: advance_s and set_values act on no limiter, a batch on those of its checks")
		}
		return nil
	case st.Limiter == "" && len(sc.lims) > 1:
		return fmt.Errorf("limiter: the scenario has %d limiters: name the one the step acts on", len(sc.lims))
	case st.Limiter != "" && sc.limiterIndex(st.Limiter) < 0:
		return fmt.Errorf("limiter %s: the scenario has no limiter of that name", st.Limiter)
	}
	return nil
}

// limiterIndex is the index in sc.lims of the limiter a step names, the
// only one when it names none, or -1.
func (sc *scenario) limiterIndex(name string) int {
	if name == "" && len(sc.lims) == 1 {
		return 0
	}
	return slices.IndexFunc(sc.lims, func(l scenarioLimiter) bool { return l.Name == name })
}

// enforcement reads a mode: "enforce" (or none) or "shadow".
func enforcement(mode string) (ratelimit.Enforcement, error) {
	switch mode {
	case "", "enforce":
		return ratelimit.Enforce, nil
	case "shadow":
		return ratelimit.Shadow, nil
	}
	return ratelimit.Enforce, fmt.Errorf("mode %q: want enforce or shadow", mode)
}

// validate refuses a step that is not exactly one operation, or that holds
// an option or an expectation its operation does not use: like an unknown
// key, it would be dropped, and the step would pass without checking it.
func (st *scenarioStep) validate() error {
	ops := 0
	for _, set := range []bool{st.Check != nil, st.Peek != nil, st.Clear != nil, st.AdvanceS != 0, st.SetRules != nil, st.SetTiers != nil, st.SetMode != "", st.SetValues != nil, st.Batch != nil} {
		if set {
			ops++
		}
	}
	switch {
	case ops != 1:
		return fmt.Errorf("a step is exactly one of check, peek, clear, advance_s, set_rules, set_tiers, set_mode, set_values and batch, not %d", ops)
	case st.AdvanceS < 0:
		return fmt.Errorf("advance_s %v: time only moves forward", st.AdvanceS)
	case st.SetValues != nil && len(st.SetValues) == 0:
		return fmt.Errorf("set_values: want at least one value")
	case st.Expect != nil && reflect.DeepEqual(*st.Expect, scenarioExpect{}):
		return fmt.Errorf("expect names no field: it would check nothing")
	case st.Check != nil || st.Peek != nil:
		if st.Repeat < 0 {
			return fmt.Errorf("repeat %d: want at least 1", st.Repeat)
		}
		if st.Expect != nil && st.Expect.Cleared != nil {
			return fmt.Errorf("cleared is expected of clear steps only")
		}
		if st.Spent && st.Check == nil {
			return fmt.Errorf("spent is for check steps only: a peek charges nothing")
		}
		return nil
	case st.Batch != nil:
		return st.validateBatch()
	}
	if st.Cost != nil || st.Repeat != 0 || st.Spent {
		return fmt.Errorf("cost, spent and repeat are for check and peek steps only")
	}
	if e := st.Expect; e != nil && (st.Clear == nil || !reflect.DeepEqual(*e, scenarioExpect{Cleared: e.Cleared})) {
		return fmt.Errorf("expect: a clear step expects cleared only, an advance, rules, mode or values step nothing")
	}
	return nil
}

// options are a check's or peek's options: its cost, and Spent.
func (st *scenarioStep) options() []ratelimit.CheckOption {
	var opts []ratelimit.CheckOption
	if st.Cost != nil {
		opts = append(opts, ratelimit.Cost(*st.Cost))
	}
	if st.Spent {
		opts = append(opts, ratelimit.Spent())
	}
	return opts
}

// validateBatch refuses a batch that is not a list of checks, each with at
// most a cost and an expect: the batch itself takes neither, and a check in
// it is made once.
func (st *scenarioStep) validateBatch() error {
	switch {
	case len(st.Batch) == 0:
		return fmt.Errorf("batch: want at least one check")
	case st.Cost != nil || st.Spent || st.Repeat != 0 || st.Expect != nil:
		return fmt.Errorf("batch: cost, spent, repeat and expect go on its checks, not on the batch")
	}
	for i := range st.Batch {
		c := &st.Batch[i]
		if c.Check == nil || c.Repeat != 0 {
			return fmt.Errorf("batch check %d: want a check, made once (no repeat)", i+1)
		}
		if err := c.validate(); err != nil {
			return fmt.Errorf("batch check %d: %w", i+1, err)
		}
	}
	return nil
}

func (sc *scenario) run(t *testing.T, file string, h *Harness, batched bool) {
	if err := sc.runSteps(t, file, h, batched); err != nil {
		t.Fatal(err)
	}
}

// runSteps runs the scenario's steps on h and returns the first step's
// failure, naming the file, line and step.
func (sc *scenario) runSteps(t *testing.T, file string, h *Harness, batched bool) error {
	sc.vals.reset() // every run starts with no value set
	ls := make([]*ratelimit.Limiter, len(sc.lims))
	for i, sl := range sc.lims {
		rules, err := sc.rules(sl.Rules, sl.Tiers, nil)
		if err != nil {
			return fmt.Errorf("%s: limiter %s: rules: %w", file, sl.Name, err)
		}
		mode, err := enforcement(sl.Mode)
		if err != nil {
			return fmt.Errorf("%s: limiter %s: %w", file, sl.Name, err)
		}
		// One store and one key prefix for all: only their names keep
		// the limiters' keys apart.
		if ls[i], err = newLimiter(h, sl.Name, mode, rules); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	h.start = time.Now() // real time, whatever h's clock: see tolerance
	for i := range sc.Steps {
		st := &sc.Steps[i]
		if err := st.run(t, h, ls, sc, batched); err != nil {
			return fmt.Errorf("%s:%d (step %d): %w", file, st.line, i+1, err)
		}
	}
	return nil
}

// rules converts a rule list, or tiers merged, into the engine's rules; the
// names of the values their limit_from reads go into reads when it is not nil.
func (sc *scenario) rules(list []scenarioRule, ts *scenarioTiers, reads map[string]bool) ([]ratelimit.Rule, error) {
	if ts == nil {
		return convertRules(list, sc.vals, reads)
	}
	var set [4][]ratelimit.Rule
	for i, l := range [][]scenarioRule{ts.Remote, ts.File, ts.Published, ts.Default} {
		rs, err := convertRules(l, sc.vals, reads)
		if err != nil {
			return nil, err
		}
		set[i] = rs
	}
	return tiers.Merge(set[:]...), nil
}

func convertRules(list []scenarioRule, vals *scenarioValues, reads map[string]bool) ([]ratelimit.Rule, error) {
	out := make([]ratelimit.Rule, 0, len(list))
	for _, r := range list {
		if r.LimitFrom != "" && reads != nil {
			reads[r.LimitFrom] = true
		}
		rr, err := r.rule(vals)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.Name, err)
		}
		out = append(out, rr)
	}
	return out, nil
}

func (r *scenarioRule) rule(vals *scenarioValues) (ratelimit.Rule, error) {
	out := ratelimit.Rule{
		Name:            r.Name,
		Characteristics: r.Characteristics,
		CountMissing:    r.CountMissing,
		Limit:           r.Limit,
		Period:          seconds(r.PeriodS),
		Action:          ratelimit.Action(r.Action),
		BanFor:          seconds(r.BanForS),
		CountDistinct:   r.CountDistinct,
		Algorithm:       ratelimit.Algorithm(r.Algorithm),
		Burst:           r.Burst,
	}
	if r.Action == "" {
		return out, fmt.Errorf("action is required")
	}
	if name := r.LimitFrom; name != "" {
		if r.Limit != 0 {
			return out, fmt.Errorf("limit and limit_from: give one")
		}
		// Resolved at every check, as the application's value is.
		out.LimitFunc = func(context.Context) (int64, error) { return vals.get(name) }
	}
	for k, n := range r.Match {
		m, err := matcher(&n)
		if err != nil {
			return out, fmt.Errorf("match %s: %w", k, err)
		}
		if out.Match == nil {
			out.Match = map[string]ratelimit.Matcher{}
		}
		out.Match[k] = m
	}
	return out, nil
}

// matcher reads a match value: a scalar (equality), {regex: ...} or {one_of: [...]}.
func matcher(n *yaml.Node) (ratelimit.Matcher, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return ratelimit.Equal(n.Value), nil
	case yaml.MappingNode:
		var m struct {
			Regex *string  `yaml:"regex"`
			OneOf []string `yaml:"one_of"`
		}
		// Strictly, as the file: a misspelt key would leave an empty
		// one_of, which matches nothing, and the rule would never apply.
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i].Value; k != "regex" && k != "one_of" {
				return ratelimit.Matcher{}, fmt.Errorf("line %d: unknown key %q: want {regex: ...} or {one_of: [...]}", n.Content[i].Line, k)
			}
		}
		if err := n.Decode(&m); err != nil {
			return ratelimit.Matcher{}, err
		}
		if (m.Regex != nil) == (m.OneOf != nil) {
			return ratelimit.Matcher{}, fmt.Errorf("line %d: want one of {regex: ...} and {one_of: [...]}", n.Line)
		}
		if m.Regex != nil {
			return ratelimit.Regex(*m.Regex), nil
		}
		vs := make([]any, len(m.OneOf))
		for i, v := range m.OneOf {
			vs[i] = v
		}
		return ratelimit.OneOf(vs...), nil
	}
	return ratelimit.Matcher{}, fmt.Errorf("want a scalar, {regex: ...} or {one_of: [...]}")
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// run runs one step on the scenario's limiters ls (sc.lims's, in order).
func (st *scenarioStep) run(t *testing.T, h *Harness, ls []*ratelimit.Limiter, sc *scenario, batched bool) error {
	var l *ratelimit.Limiter
	if i := sc.limiterIndex(st.Limiter); i >= 0 {
		l = ls[i]
	}
	switch {
	case st.AdvanceS > 0:
		h.Advance(t, seconds(st.AdvanceS))
		return nil
	case st.SetValues != nil:
		sc.vals.set(st.SetValues)
		return nil
	case st.SetMode != "":
		mode, err := enforcement(st.SetMode)
		if err != nil {
			return err
		}
		return l.SetEnforcement(mode)
	case st.SetRules != nil || st.SetTiers != nil:
		rules, err := sc.rules(st.SetRules, st.SetTiers, nil)
		if err != nil {
			return err
		}
		return l.SetRules(rules)
	case st.Batch != nil:
		reqs := make([]ratelimit.Request, len(st.Batch))
		for i := range st.Batch {
			c := &st.Batch[i]
			reqs[i] = ratelimit.Request{Limiter: ls[sc.limiterIndex(c.Limiter)], Identifier: c.Check}
			reqs[i].Options = c.options()
		}
		var errs []error
		for i, r := range ratelimit.CheckBatch(ctx, reqs) {
			switch {
			case r.Err != nil && !st.Batch[i].Expect.failsOpen():
				errs = append(errs, fmt.Errorf("batch check %d: unexpected error: %w", i+1, r.Err))
			case st.Batch[i].Expect != nil:
				if err := st.Batch[i].Expect.verify(h, &r); err != nil {
					errs = append(errs, fmt.Errorf("batch check %d: %w", i+1, err))
				}
			}
		}
		return errors.Join(errs...)
	case st.Clear != nil:
		n, err := l.Clear(ctx, st.Clear)
		if err != nil {
			return err
		}
		if e := st.Expect; e != nil && e.Cleared != nil && n != *e.Cleared {
			return fmt.Errorf("cleared %d keys, want %d", n, *e.Cleared)
		}
		return nil
	case st.Check != nil || st.Peek != nil:
		opts := st.options()
		var r ratelimit.Result
		for range max(st.Repeat, 1) {
			switch {
			case st.Check != nil && batched:
				r = ratelimit.CheckBatch(ctx, []ratelimit.Request{{Limiter: l, Identifier: st.Check, Options: opts}})[0]
			case st.Check != nil:
				r = l.Check(ctx, st.Check, opts...)
			default:
				r = l.Peek(ctx, st.Peek, opts...)
			}
			if r.Err != nil && !st.Expect.failsOpen() {
				return fmt.Errorf("unexpected error: %w", r.Err)
			}
		}
		if st.Expect == nil {
			return nil
		}
		return st.Expect.verify(h, &r)
	}
	return fmt.Errorf("empty step")
}

// tolerance is how far the state a scenario or case stored may have aged, in
// real time, past what it expects: 0 on a simulated clock (TTLTolerance 0);
// on a real clock TTLTolerance, or the real time since h.start when that is
// longer. Nothing it stored is older than that, however long a loaded
// machine stalled between two steps, so the comparison stays exact about
// everything else. Measure it after reading the clock the results are
// compared with.
func (h *Harness) tolerance() time.Duration {
	switch {
	case h.TTLTolerance <= 0:
		return 0
	case h.start.IsZero(): // not run by the suite
		return h.TTLTolerance
	}
	return max(h.TTLTolerance, time.Since(h.start))
}

// countTol is how far a count may be from the expected one. The stores that
// run on a real clock (Redis) see time pass between steps, which moves the
// time-weighted estimate of a sliding window and the refill of a token
// bucket by at most limit/period per second: their counts may drift by what
// tol of real time (and the 10ms slack of a reset, for the millisecond TTLs)
// can move. A fixed window's count is exact.
func countTol(tol time.Duration, rule *ratelimit.Rule, info *ratelimit.Info) float64 {
	if tol <= 0 || rule == nil || (rule.Algorithm != ratelimit.SlidingWindow && rule.Algorithm != ratelimit.TokenBucket) || info.Period <= 0 {
		return 1e-9
	}
	return float64(info.Limit)*(tol+10*time.Millisecond).Seconds()/info.Period.Seconds() + 1e-9
}

// failsOpen reports whether e expects the check to fail open (error: true):
// any other check that does is a failure.
func (e *scenarioExpect) failsOpen() bool { return e != nil && e.Error != nil && *e.Error }

func (e *scenarioExpect) verify(h *Harness, r *ratelimit.Result) error {
	now := h.Now()
	tol := h.tolerance() // after now: it covers the real time up to it
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if e.Action != nil && string(r.Action) != *e.Action {
		fail("action %s, want %s", r.Action, *e.Action)
	}
	if e.Exceeded != nil && r.Exceeded != *e.Exceeded {
		fail("exceeded %v, want %v", r.Exceeded, *e.Exceeded)
	}
	if e.Skipped != nil && r.Skipped != *e.Skipped {
		fail("skipped %v, want %v", r.Skipped, *e.Skipped)
	}
	if e.Degraded != nil && r.Degraded != *e.Degraded {
		fail("degraded %v, want %v", r.Degraded, *e.Degraded)
	}
	if e.Matched != nil && r.Matched != *e.Matched {
		fail("matched %v, want %v", r.Matched, *e.Matched)
	}
	if e.Rule != nil && r.RuleName() != *e.Rule {
		fail("rule %q, want %q", r.RuleName(), *e.Rule)
	}
	if e.NoInfo != nil && *e.NoInfo != (r.Info == nil) {
		fail("info %+v, want no_info %v", r.Info, *e.NoInfo)
	}
	if e.Shadow != nil && r.Shadow != *e.Shadow {
		fail("shadow %v, want %v", r.Shadow, *e.Shadow)
	}
	if e.WouldBlock != nil && r.WouldBlock() != *e.WouldBlock {
		fail("would_block %v, want %v", r.WouldBlock(), *e.WouldBlock)
	}
	if e.Error != nil && (r.Err != nil) != *e.Error {
		fail("error %v, want error %v", r.Err, *e.Error)
	}
	if info := r.Info; info == nil {
		if e.Count != nil || e.Remaining != nil || e.Limit != nil || e.Banned != nil || e.Never != nil || e.ResetS != nil {
			fail("no info, want count/remaining/limit/banned/never/reset")
		}
	} else {
		errs = append(errs, checkInfo(now, tol, "", r.Rule, info, e.Count, e.Remaining, e.Banned, e.ResetS)...)
		if e.Limit != nil && info.Limit != *e.Limit {
			fail("limit %d, want %d", info.Limit, *e.Limit)
		}
		if e.Never != nil && info.Never != *e.Never {
			fail("never %v, want %v", info.Never, *e.Never)
		}
	}
	if e.Evaluations != nil {
		if len(r.Evaluations) != len(e.Evaluations) {
			names := make([]string, len(r.Evaluations))
			for i := range r.Evaluations {
				names[i] = r.Evaluations[i].Rule.Name
			}
			fail("evaluated %v, want %d evaluations", names, len(e.Evaluations))
		} else {
			for i, we := range e.Evaluations {
				ev := &r.Evaluations[i]
				at := fmt.Sprintf("evaluation %d: ", i+1)
				if ev.Rule.Name != we.Rule {
					fail("%srule %s, want %s", at, ev.Rule.Name, we.Rule)
				}
				if we.Exceeded != nil && ev.Exceeded != *we.Exceeded {
					fail("%sexceeded %v, want %v", at, ev.Exceeded, *we.Exceeded)
				}
				if we.Blocked != nil && ev.Blocked != *we.Blocked {
					fail("%sblocked %v, want %v", at, ev.Blocked, *we.Blocked)
				}
				errs = append(errs, checkInfo(now, tol, at, ev.Rule, &ev.Info, we.Count, we.Remaining, we.Banned, we.ResetS)...)
			}
		}
	}
	if len(errs) > 0 {
		failed := ""
		if r.Err != nil {
			failed = " error=" + r.Err.Error()
		}
		return fmt.Errorf("%s\n\tresult: action=%s exceeded=%v rule=%q info=%+v%s", strings.Join(errs, "; "), r.Action, r.Exceeded, r.RuleName(), r.Info, failed)
	}
	return nil
}

// checkInfo compares info with what a step expects at now, its reset lagging
// by at most tol and its count and remaining moved by what tol can move.
func checkInfo(now time.Time, tol time.Duration, at string, rule *ratelimit.Rule, info *ratelimit.Info, count, rem *float64, banned *bool, resetS *float64) []string {
	var errs []string
	ctol := countTol(tol, rule, info)
	if count != nil && math.Abs(info.Count-*count) > ctol {
		errs = append(errs, fmt.Sprintf("%scount %v, want %v (tolerance %v)", at, info.Count, *count, ctol))
	}
	if rem != nil && math.Abs(info.Remaining-*rem) > ctol {
		errs = append(errs, fmt.Sprintf("%sremaining %v, want %v (tolerance %v)", at, info.Remaining, *rem, ctol))
	}
	if banned != nil && info.Banned != *banned {
		errs = append(errs, fmt.Sprintf("%sbanned %v, want %v", at, info.Banned, *banned))
	}
	if resetS != nil {
		want := seconds(*resetS)
		got := info.ResetAt.Sub(now)
		// Differences, not sums: want+10ms overflows near the longest Duration.
		if got-want > 10*time.Millisecond || want-got > tol+10*time.Millisecond {
			errs = append(errs, fmt.Sprintf("%sreset in %v, want %v (tolerance %v)", at, got, want, tol))
		}
	}
	return errs
}
