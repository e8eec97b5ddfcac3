package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"time"
)

// Rule is one entry of a limiter's ordered rule list
// (docs/design.md#rules-and-matching).
type Rule struct {
	// Name is the stable identity of the rule: part of every counter key, and
	// what a higher tier overrides. It must match ^[a-z0-9_]{1,64}$.
	Name string
	// Description is for people; it never affects evaluation.
	Description string
	// Match selects the requests the rule applies to: every entry must be present
	// in the identifier and match. An empty Match applies to every request.
	Match map[string]Matcher
	// Characteristics are the identifier properties that scope the counter, in
	// order (for example []string{"user"}: one counter per user). A rule whose
	// characteristic is missing from the identifier does not apply (the result
	// is Degraded), so a typo never folds every caller into one counter.
	Characteristics []string
	// CountMissing opts into counting identifiers that lack a characteristic
	// under one shared "missing" value (one bucket for all of them) instead of
	// leaving the rule out.
	CountMissing bool
	// Limit is the threshold: a limit of 5 admits 5 and blocks the 6th.
	// Required for limit and log rules.
	Limit Limit
	// Period is the length of the fixed window. Required for limit and log rules.
	Period Period
	// Action is ActionLimit (the default when empty), ActionLog or ActionSkip.
	Action Action
	// BanFor, when positive, keeps an exceeded rule exceeded for this long,
	// without counting, even after the window expires (docs/design.md#bans).
	BanFor time.Duration
	// CountDistinct counts distinct values of this property instead of request
	// volume. It cannot be combined with BanFor.
	CountDistinct string
}

// Limit is a rule's threshold: Static or resolved at check time by a function.
type Limit struct {
	n  int64
	fn func(context.Context) (int64, error)
}

// Static returns a fixed limit. It must be at least 1; a deny-all limit of 0
// is expressed with a LimitFunc that returns 0.
func Static(n int64) Limit { return Limit{n: n} }

// LimitFunc returns a limit resolved on every check (for values held by the host
// application, docs/design.md#dynamic-values). A resolver error fails the check open.
func LimitFunc(fn func(ctx context.Context) (int64, error)) Limit { return Limit{fn: fn} }

// IsSet reports whether the limit was given.
func (l Limit) IsSet() bool { return l.fn != nil || l.n != 0 }

// IsStatic reports whether the limit is a constant, and returns it.
func (l Limit) IsStatic() (int64, bool) { return l.n, l.fn == nil }

// Resolve returns the limit for one check.
func (l Limit) Resolve(ctx context.Context) (int64, error) {
	if l.fn == nil {
		return l.n, nil
	}
	n, err := l.fn(ctx)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("limit resolved to %d, want >= 0", n)
	}
	return n, nil
}

// Period is a rule's window length: StaticPeriod or resolved at check time.
type Period struct {
	d  time.Duration
	fn func(context.Context) (time.Duration, error)
}

// StaticPeriod returns a fixed window length of at least one millisecond.
func StaticPeriod(d time.Duration) Period { return Period{d: d} }

// PeriodFunc returns a window length resolved on every check.
func PeriodFunc(fn func(ctx context.Context) (time.Duration, error)) Period { return Period{fn: fn} }

// IsSet reports whether the period was given.
func (p Period) IsSet() bool { return p.fn != nil || p.d != 0 }

// IsStatic reports whether the period is a constant, and returns it.
func (p Period) IsStatic() (time.Duration, bool) { return p.d, p.fn == nil }

// Resolve returns the period for one check.
func (p Period) Resolve(ctx context.Context) (time.Duration, error) {
	if p.fn == nil {
		return p.d, nil
	}
	d, err := p.fn(ctx)
	if err != nil {
		return 0, err
	}
	if d < time.Millisecond {
		return 0, fmt.Errorf("period resolved to %v, want >= 1ms", d)
	}
	return d, nil
}

// MatcherKind tells the form of a Matcher.
type MatcherKind uint8

const (
	// MatchEqual matches one value exactly (after Canonical).
	MatchEqual MatcherKind = iota + 1
	// MatchRegex matches an RE2 regular expression (unanchored, as in RE2; anchor it yourself).
	MatchRegex
	// MatchOneOf matches any value of a set.
	MatchOneOf
)

// Limits on regular expressions in rules: RE2 already runs in linear time; these
// bound the memory and per-check work of a rule that operators may write.
const (
	MaxRegexLen   = 1024
	MaxRegexInsts = 10000
)

// Matcher is the value side of a Rule.Match entry. The explicit forms mirror the
// YAML markers of the config files: a scalar (equality), {regex: ...} and {one_of: [...]}.
type Matcher struct {
	kind  MatcherKind
	value string
	set   []string
	re    *regexp.Regexp // compiled by Regex; nil with err set when invalid
	err   error
}

// Equal matches a property whose canonical value equals v.
func Equal(v any) Matcher { return Matcher{kind: MatchEqual, value: Canonical(v)} }

// Regex matches a property against an RE2 expression. The expression is
// compiled (and bounded by MaxRegexLen and MaxRegexInsts) when the limiter is built.
func Regex(expr string) Matcher {
	re, err := CompileRegex(expr)
	return Matcher{kind: MatchRegex, value: expr, re: re, err: err}
}

// OneOf matches a property whose canonical value is one of vs. An empty set matches nothing.
func OneOf(vs ...any) Matcher {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = Canonical(v)
	}
	return Matcher{kind: MatchOneOf, set: s}
}

// Kind returns the form of the matcher.
func (m Matcher) Kind() MatcherKind { return m.kind }

// Value returns the equality value or the regular expression.
func (m Matcher) Value() string { return m.value }

// Values returns the set of a OneOf matcher.
func (m Matcher) Values() []string { return append([]string(nil), m.set...) }

func (m Matcher) String() string {
	switch m.kind {
	case MatchEqual:
		return fmt.Sprintf("%q", m.value)
	case MatchRegex:
		return fmt.Sprintf("{regex: %q}", m.value)
	case MatchOneOf:
		return fmt.Sprintf("{one_of: %q}", m.set)
	}
	return "<invalid matcher>"
}

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// ValidName reports whether s is a valid limiter or rule name (^[a-z0-9_]{1,64}$).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// CompileRegex compiles a rule regex under the size bounds every rule obeys.
func CompileRegex(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexLen {
		return nil, fmt.Errorf("regex is %d bytes, the limit is %d", len(expr), MaxRegexLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("invalid RE2 regex %q: %w", expr, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("invalid RE2 regex %q: %w", expr, err)
	}
	if len(prog.Inst) > MaxRegexInsts {
		return nil, fmt.Errorf("regex %q compiles to %d instructions, the limit is %d", expr, len(prog.Inst), MaxRegexInsts)
	}
	return regexp.Compile(expr)
}

// RuleError is a rule that failed validation.
type RuleError struct {
	Index int    // position in the rule list
	Rule  string // rule name, possibly empty or invalid
	Err   error
}

func (e *RuleError) Error() string {
	name := e.Rule
	if name == "" {
		name = fmt.Sprintf("#%d", e.Index)
	}
	return fmt.Sprintf("rule %s: %v", name, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// Validate checks one rule on its own (not its uniqueness within a list).
func (r *Rule) Validate() error {
	_, err := compileRule(r)
	return err
}

// ValidateRules checks a rule list as New and SetRules do: every rule valid and
// names unique. All problems are reported, joined.
func ValidateRules(rules []Rule) error {
	_, err := compileRules(rules)
	return err
}

// matchEntry is one Match entry of a compiled rule; a OneOf set is a map so
// that a long set costs one lookup.
type matchEntry struct {
	key string
	m   Matcher
	set map[string]struct{}
}

func (e *matchEntry) matches(id Identifier) bool {
	v, ok := id.Get(e.key)
	if !ok {
		return false
	}
	if e.m.kind == MatchOneOf {
		_, ok := e.set[v]
		return ok
	}
	return e.m.Matches(v)
}

// Matches reports whether the canonical value v satisfies the matcher. An
// invalid regex matches nothing (New rejects rules holding one).
func (m Matcher) Matches(v string) bool {
	switch m.kind {
	case MatchEqual:
		return v == m.value
	case MatchRegex:
		return m.re != nil && m.re.MatchString(v)
	case MatchOneOf:
		return slices.Contains(m.set, v)
	}
	return false
}

// MatchFailures explains why r does not apply to id: one line per Match entry
// that id fails, in property order; nil when r applies. Tools such as
// ratekit explain show it; the hot path uses the compiled rule instead.
func (r *Rule) MatchFailures(id Identifier) []string {
	keys := make([]string, 0, len(r.Match))
	for k := range r.Match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		m := r.Match[k]
		v, ok := id.Get(k)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: not in the identifier (want %s)", k, m))
		case m.Matches(v):
		case m.kind == MatchEqual:
			out = append(out, fmt.Sprintf("%s: %q is not %s", k, v, m))
		case m.kind == MatchRegex:
			out = append(out, fmt.Sprintf("%s: %q does not match %s", k, v, m))
		default:
			out = append(out, fmt.Sprintf("%s: %q is not in %s", k, v, m))
		}
	}
	return out
}

type compiledRule struct {
	rule   *Rule
	match  []matchEntry
	static bool // limit and period both static
	limit  int64
	period time.Duration
	key    keyPlan // the constant parts of the rule's counter keys
	// perRequest marks a rule of a per-request tier (WithRules, RuleSource).
	perRequest bool
	tier       string // the per-request tier's name (CompileTier), for Evaluation.Tier
}

// compileRule validates r, defaulting its Action, and precomputes what a check
// needs: the match entries in property order, the static limit and period,
// and the key plan. Every problem is reported, joined.
func compileRule(r *Rule) (*compiledRule, error) {
	var errs []error
	if !ValidName(r.Name) {
		errs = append(errs, fmt.Errorf("name %q must match ^[a-z0-9_]{1,64}$", r.Name))
	}
	if r.Action == "" {
		r.Action = ActionLimit
	}
	if !r.Action.isRuleAction() {
		errs = append(errs, fmt.Errorf("action %q is not limit, log or skip", r.Action))
	}
	c := &compiledRule{rule: r, key: newKeyPlan(r)}
	var err []error
	c.match, err = compileMatch(r.Match)
	errs = append(errs, err...)
	errs = append(errs, checkCharacteristics(r.Characteristics)...)
	switch {
	case r.Action == ActionSkip:
		errs = append(errs, checkSkip(r)...)
	case r.Action.counts():
		errs = append(errs, c.compileCounting(r)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// compileMatch returns the entries of a rule's Match in property order.
func compileMatch(match map[string]Matcher) ([]matchEntry, []error) {
	var errs []error
	keys := make([]string, 0, len(match))
	for k := range match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	entries := make([]matchEntry, 0, len(keys))
	for _, k := range keys {
		m := match[k]
		e := matchEntry{key: k, m: m}
		switch m.kind {
		case MatchEqual:
		case MatchRegex:
			if m.err != nil {
				errs = append(errs, fmt.Errorf("match %q: %w", k, m.err))
			}
		case MatchOneOf:
			e.set = make(map[string]struct{}, len(m.set))
			for _, v := range m.set {
				e.set[v] = struct{}{}
			}
		default:
			errs = append(errs, fmt.Errorf("match %q: empty matcher (use Equal, Regex or OneOf)", k))
		}
		if k == "" {
			errs = append(errs, errors.New("match has an empty property name"))
		}
		entries = append(entries, e)
	}
	return entries, errs
}

func checkCharacteristics(chars []string) []error {
	var errs []error
	seen := map[string]bool{}
	for _, ch := range chars {
		if ch == "" {
			errs = append(errs, errors.New("characteristics contain an empty property name"))
		}
		if seen[ch] {
			errs = append(errs, fmt.Errorf("characteristic %q is listed twice", ch))
		}
		seen[ch] = true
	}
	return errs
}

// checkSkip rejects the counting fields a skip rule cannot use.
func checkSkip(r *Rule) []error {
	var errs []error
	if r.BanFor != 0 {
		errs = append(errs, errors.New("ban_for is not valid on skip rules"))
	}
	if r.CountDistinct != "" {
		errs = append(errs, errors.New("count_distinct is not valid on skip rules"))
	}
	return errs
}

// compileCounting validates the limit, period and ban of a limit or log rule
// and keeps the limit and period when both are static.
func (c *compiledRule) compileCounting(r *Rule) []error {
	var errs []error
	if !r.Limit.IsSet() || !r.Period.IsSet() {
		errs = append(errs, errors.New("limit and log rules require limit and period"))
	}
	n, limStatic := r.Limit.IsStatic()
	if r.Limit.IsSet() && limStatic && n < 1 {
		errs = append(errs, fmt.Errorf("limit %d must be at least 1 (a LimitFunc may return 0 to deny all)", n))
	}
	d, perStatic := r.Period.IsStatic()
	if r.Period.IsSet() && perStatic && d < time.Millisecond {
		errs = append(errs, fmt.Errorf("period %v must be at least 1ms", d))
	}
	if r.BanFor < 0 || (r.BanFor > 0 && r.BanFor < time.Millisecond) {
		errs = append(errs, fmt.Errorf("ban_for %v must be at least 1ms", r.BanFor))
	}
	if r.BanFor != 0 && r.CountDistinct != "" {
		errs = append(errs, errors.New("ban_for cannot be combined with count_distinct"))
	}
	c.static = limStatic && perStatic
	c.limit, c.period = n, d
	return errs
}

func compileRules(rules []Rule) ([]*compiledRule, error) {
	var errs []error
	out := make([]*compiledRule, 0, len(rules))
	names := map[string]int{}
	for i := range rules {
		r := rules[i] // copy: the limiter owns its rules
		r.Match = cloneMatch(r.Match)
		r.Characteristics = append([]string(nil), r.Characteristics...)
		c, err := compileRule(&r)
		if err != nil {
			errs = append(errs, &RuleError{Index: i, Rule: r.Name, Err: err})
			continue
		}
		if j, dup := names[r.Name]; dup {
			errs = append(errs, &RuleError{Index: i, Rule: r.Name, Err: fmt.Errorf("duplicate rule name (also rule #%d)", j)})
			continue
		}
		names[r.Name] = i
		out = append(out, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func cloneMatch(m map[string]Matcher) map[string]Matcher {
	if m == nil {
		return nil
	}
	out := make(map[string]Matcher, len(m))
	for k, v := range m {
		v.set = append([]string(nil), v.set...)
		out[k] = v
	}
	return out
}
