package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

// Identifier is what the caller knows about a request: property name to value.
// Values are compared and keyed by their canonical string: integers of any
// width render in decimal, so user_id 42 and "42" are the same caller; floats
// use the shortest representation that round-trips; booleans are
// "true"/"false"; times are RFC 3339 in UTC; a []byte is its bytes as a
// string; other values use String, MarshalText, Error or fmt.Sprint. A nil
// value (typed nil included) is the same as an absent property.
type Identifier map[string]any

// Well-known identifier properties and values.
const (
	// Anonymous is the value of the "user" property for unauthenticated
	// callers. The angle brackets keep it from colliding with any real user name.
	Anonymous = "<anonymous>"
	// PropertyMethod is the identifier property of the HTTP method
	// (identifiers.Method). A Match entry on it that accepts "GET" also
	// accepts "HEAD": HTTP servers, Go's ServeMux among them, answer HEAD with
	// the GET handler, so a rule that limits GET must count HEAD too or it
	// could be walked past. A matcher that accepts "HEAD" itself is unchanged.
	PropertyMethod = "method"
)

// Get returns the canonical string of property k and whether it is present.
func (id Identifier) Get(k string) (string, bool) { return keys.Value(id, k) }

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
	// Limit is the threshold: a limit of 5 admits 5 and blocks the 6th. Limit
	// and log rules need a Limit of at least 1 (at most MaxCount) or a
	// LimitFunc.
	Limit int64
	// LimitFunc, when set instead of Limit, resolves the limit on every check,
	// for values held by the host application (docs/design.md#dynamic-values).
	// It may return 0 to deny all; an error or a negative limit fails the
	// check open, and a limit over MaxCount counts as MaxCount.
	LimitFunc func(ctx context.Context) (int64, error)
	// Period is the length of the fixed window, at least 1ms. Limit and log
	// rules need a Period or a PeriodFunc.
	Period time.Duration
	// PeriodFunc, when set instead of Period, resolves the window length on
	// every check; an error or a period under 1ms fails the check open.
	PeriodFunc func(ctx context.Context) (time.Duration, error)
	// Action is ActionLimit (the default when empty), ActionLog or ActionSkip.
	Action Action
	// BanFor, when positive, keeps an exceeded rule exceeded for this long,
	// without counting, even after the window expires (docs/design.md#bans).
	BanFor time.Duration
	// CountDistinct counts distinct values of this property instead of request
	// volume. It cannot be combined with BanFor, and counts in fixed windows
	// only.
	CountDistinct string
	// Algorithm is how the rule counts: FixedWindow (the default when empty),
	// SlidingWindow or TokenBucket (docs/design.md#algorithms). It is part of
	// the counter's identity: changing it starts a fresh counter.
	Algorithm Algorithm
	// Burst is a TokenBucket rule's capacity: how many requests (of cost 1)
	// it admits at once after a quiet spell; 0 means Limit. It refills at
	// Limit per Period.
	Burst int64
}

// Algorithm is how a rule counts (docs/design.md#algorithms).
type Algorithm string

const (
	// FixedWindow counts in a window of Period that starts at a counter's
	// first hit; every check is charged, blocked ones too.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindow estimates the count over the last Period from two fixed
	// windows: the previous one weighted by the part of it still inside the
	// sliding period, plus the current one. A check it rejects is not charged.
	SlidingWindow Algorithm = "sliding_window"
	// TokenBucket is GCRA: a bucket of Burst tokens refilled at Limit per
	// Period. A check it rejects is not charged.
	TokenBucket Algorithm = "token_bucket"
)

// MaxBurst bounds a token bucket's Burst.
const MaxBurst = 1 << 40

// MaxCount bounds what a rule counts to (docs/limits.md#counts): 2^53 - 1,
// the last of the whole numbers a float64 holds every one of. A rule's Limit
// is at most MaxCount (a LimitFunc's larger limit counts as MaxCount), a
// check's cost over it counts as MaxCount + 1 (it exceeds every limit), and
// a Store reports a count of MaxCount + 1 or more as MaxCount + 1. So every
// Store gives the same verdicts and counts: the memory store sums a float64,
// which rounds past 2^53, and Redis an exact int64, which INCRBY refuses to
// carry past 2^63.
const MaxCount = 1<<53 - 1

// maxCost is what a cost over MaxCount counts as, and the largest count a
// Store reports (MaxCount + 1).
const maxCost = MaxCount + 1

// valid reports whether a is one of the algorithms ("" is FixedWindow).
func (a Algorithm) valid() bool {
	return a == "" || a == FixedWindow || a == SlidingWindow || a == TokenBucket
}

// opKind is the store op kind of a rule counting with a.
func (a Algorithm) opKind() OpKind {
	switch a {
	case SlidingWindow:
		return OpSliding
	case TokenBucket:
		return OpTokenBucket
	}
	return OpCount
}

// matcherKind tells the form of a Matcher.
type matcherKind uint8

const (
	// matchEqual matches one value exactly (canonical strings, see Identifier).
	matchEqual matcherKind = iota + 1
	// matchRegex matches an RE2 regular expression (unanchored, as in RE2; anchor it yourself).
	matchRegex
	// matchOneOf matches any value of a set.
	matchOneOf
)

// Matcher is the value side of a Rule.Match entry. The explicit forms mirror the
// YAML markers of the config files: a scalar (equality), {regex: ...} and {one_of: [...]}.
type Matcher struct {
	kind  matcherKind
	value string
	set   []string
	re    *regexp.Regexp // compiled by Regex; nil with err set when invalid
	err   error
}

// errNilMatch is the error of a matcher given a nil value: New refuses it.
var errNilMatch = errors.New("a nil value is an absent property, which nothing matches")

// Equal matches a property whose canonical value equals v. A nil v (a typed
// nil too) is an absent property, which no matcher matches: New refuses the
// rule.
func Equal(v any) Matcher {
	if keys.IsNil(v) {
		return Matcher{kind: matchEqual, err: errNilMatch}
	}
	return Matcher{kind: matchEqual, value: keys.Canonical(v)}
}

// Regex matches a property against an RE2 expression, unanchored as in RE2
// (anchor it yourself). The expression is compiled, and bounded to 1024 bytes
// and 10000 instructions, when the matcher is made; an invalid one is reported
// when the limiter is built.
func Regex(expr string) Matcher {
	re, err := rulecheck.CompileRegex(expr)
	return Matcher{kind: matchRegex, value: expr, re: re, err: err}
}

// OneOf matches a property whose canonical value is one of vs. An empty set
// matches nothing. A nil value in vs is an absent property, as in Equal: New
// refuses the rule.
func OneOf(vs ...any) Matcher {
	m := Matcher{kind: matchOneOf, set: make([]string, 0, len(vs))}
	for _, v := range vs {
		if keys.IsNil(v) {
			m.err = errNilMatch
			continue
		}
		m.set = append(m.set, keys.Canonical(v))
	}
	return m
}

// IsEqual reports whether m was made by Equal.
func (m Matcher) IsEqual() bool { return m.kind == matchEqual }

// IsRegex reports whether m was made by Regex.
func (m Matcher) IsRegex() bool { return m.kind == matchRegex }

// IsOneOf reports whether m was made by OneOf.
func (m Matcher) IsOneOf() bool { return m.kind == matchOneOf }

// Value returns the equality value or the regular expression.
func (m Matcher) Value() string { return m.value }

// Values returns the set of a OneOf matcher.
func (m Matcher) Values() []string { return append([]string(nil), m.set...) }

func (m Matcher) String() string {
	switch m.kind {
	case matchEqual:
		return fmt.Sprintf("%q", m.value)
	case matchRegex:
		return fmt.Sprintf("{regex: %q}", m.value)
	case matchOneOf:
		return fmt.Sprintf("{one_of: %q}", m.set)
	}
	return "<invalid matcher>"
}

// RuleError is a rule that failed validation.
type RuleError struct {
	Index int    // position in the rule list
	Rule  string // rule name, possibly empty or invalid
	Err   error
}

func (e *RuleError) Error() string {
	name := e.Rule
	if !rulecheck.ValidName(name) { // named by its position: Err quotes it short
		name = fmt.Sprintf("#%d", e.Index)
	}
	return fmt.Sprintf("rule %s: %v", name, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// Validate checks one rule on its own (not its uniqueness within a list). It
// leaves r as it is: it is safe to call on a rule shared by goroutines.
func (r *Rule) Validate() error {
	c := *r // compileRule fills in the default Action
	_, err := compileRule(&c)
	return err
}

// resolveLimit returns the rule's limit for one check: Limit, or what
// LimitFunc returns.
func (r *Rule) resolveLimit(ctx context.Context) (int64, error) {
	if r.LimitFunc == nil {
		return r.Limit, nil
	}
	n, err := r.LimitFunc(ctx)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("limit resolved to %d, want >= 0", n)
	}
	return min(n, MaxCount), nil
}

// resolvePeriod returns the rule's window length for one check: Period, or
// what PeriodFunc returns.
func (r *Rule) resolvePeriod(ctx context.Context) (time.Duration, error) {
	if r.PeriodFunc == nil {
		return r.Period, nil
	}
	d, err := r.PeriodFunc(ctx)
	if err != nil {
		return 0, err
	}
	if d < time.Millisecond {
		return 0, fmt.Errorf("period resolved to %v, want >= 1ms", d)
	}
	return d, nil
}

// matchEntry is one Match entry of a compiled rule; a OneOf set is a map so
// that a long set costs one lookup.
type matchEntry struct {
	key string
	m   Matcher
	set map[string]struct{}
	// headAsGet: the entry is on PropertyMethod and accepts GET but not HEAD,
	// so HEAD matches it as well (see PropertyMethod).
	headAsGet bool
}

func (e *matchEntry) matches(id Identifier) bool {
	v, ok := id.Get(e.key)
	if !ok {
		return false
	}
	if e.headAsGet && v == methodHead {
		return true
	}
	if e.m.kind == matchOneOf {
		_, ok := e.set[v]
		return ok
	}
	return e.m.Matches(v)
}

// Matches reports whether the canonical value v satisfies the matcher. An
// invalid regex matches nothing (New rejects rules holding one).
func (m Matcher) Matches(v string) bool {
	switch m.kind {
	case matchEqual:
		return v == m.value && m.err == nil
	case matchRegex:
		return m.re != nil && m.re.MatchString(v)
	case matchOneOf:
		return slices.Contains(m.set, v)
	}
	return false
}

const (
	methodGet  = "GET"
	methodHead = "HEAD"
)

// headAsGet reports whether a Match entry of key on m lets HEAD through as
// GET: HTTP servers serve HEAD with the GET handler (see PropertyMethod).
func headAsGet(key string, m Matcher) bool {
	return key == PropertyMethod && m.Matches(methodGet) && !m.Matches(methodHead)
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
		case m.Matches(v), v == methodHead && headAsGet(k, m):
		case m.kind == matchEqual:
			out = append(out, fmt.Sprintf("%s: %q is not %s", k, v, m))
		case m.kind == matchRegex:
			out = append(out, fmt.Sprintf("%s: %q does not match %s", k, v, m))
		default:
			out = append(out, fmt.Sprintf("%s: %q is not in %s", k, v, m))
		}
	}
	return out
}

// Counter keys look like <prefix>{<limiter>:<rule>:<prop>=<value>...}, with
// ":ban" appended for a ban and ":set" for a distinct-value set; the braces are
// a Redis Cluster hash tag, so a counter and its ban share a slot. The encoding
// (escaping, hashing of long values, the per-rule keys.Plan a compiled rule
// keeps) lives in internal/keys, shared with the stores and the tools.

const banSuffix = keys.BanSuffix

func newKeyPlan(r *Rule) keys.Plan {
	return keys.NewPlan(r.Name, r.Characteristics, keys.Suffix(r.CountDistinct != "", string(r.Algorithm)))
}

type compiledRule struct {
	rule   *Rule
	match  []matchEntry
	static bool // limit and period both static
	limit  int64
	period time.Duration
	key    keys.Plan // the constant parts of the rule's counter keys
	// perRequest marks a rule of a per-request tier (WithRules, Config.RuleSource).
	perRequest bool
	tier       string // the per-request tier's name (CompileRules), for Evaluation.Tier
}

// compileRule validates r, defaulting its Action, and precomputes what a check
// needs: the match entries in property order, the static limit and period,
// and the key plan. Every problem is reported, joined.
func compileRule(r *Rule) (*compiledRule, error) {
	var errs []error
	if !rulecheck.ValidName(r.Name) {
		errs = append(errs, rulecheck.NameError("rule", r.Name))
	}
	if r.Action == "" {
		r.Action = ActionLimit
	}
	if !r.Action.isRuleAction() {
		errs = append(errs, fmt.Errorf("action %.*q is not limit, log or skip", MaxPropertyLen, r.Action))
	}
	errs = append(errs, checkRuleShape(r)...)
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
		e := matchEntry{key: k, m: m, headAsGet: headAsGet(k, m)}
		switch m.kind {
		case matchEqual, matchRegex:
		case matchOneOf:
			e.set = make(map[string]struct{}, len(m.set))
			for _, v := range m.set {
				e.set[v] = struct{}{}
			}
		default:
			errs = append(errs, fmt.Errorf("match %.*q: empty matcher (use Equal, Regex or OneOf)", MaxPropertyLen, k))
		}
		if m.err != nil { // an invalid regex, a nil value
			errs = append(errs, fmt.Errorf("match %.*q: %w", MaxPropertyLen, k, m.err))
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
			errs = append(errs, fmt.Errorf("characteristic %.*q is listed twice", MaxPropertyLen, ch))
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
	if r.Algorithm != "" || r.Burst != 0 {
		errs = append(errs, errors.New("algorithm and burst are not valid on skip rules"))
	}
	return errs
}

// compileCounting validates the limit, period and ban of a limit or log rule
// and keeps the limit and period when both are static.
func (c *compiledRule) compileCounting(r *Rule) []error {
	var errs []error
	n, d := r.Limit, r.Period
	limStatic, perStatic := r.LimitFunc == nil, r.PeriodFunc == nil
	// Name the field left out: "require limit and period" sent an adopter
	// looking for which of the two.
	var missing []string
	if limStatic && n == 0 {
		missing = append(missing, "Limit (or LimitFunc)")
	}
	if perStatic && d == 0 {
		missing = append(missing, "Period (or PeriodFunc)")
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("limit and log rules require limit and period: %s not set", strings.Join(missing, " and ")))
	}
	if !limStatic && n != 0 {
		errs = append(errs, errors.New("both a limit and a LimitFunc are set (set one)"))
	}
	if !perStatic && d != 0 {
		errs = append(errs, errors.New("both a period and a PeriodFunc are set (set one)"))
	}
	if limStatic && n < 0 {
		errs = append(errs, fmt.Errorf("limit %d must be at least 1 (a LimitFunc may return 0 to deny all)", n))
	}
	if limStatic && n > MaxCount {
		errs = append(errs, fmt.Errorf("limit %d is over %d (MaxCount, 2^53 - 1)", n, int64(MaxCount)))
	}
	if perStatic && (d < 0 || (d > 0 && d < time.Millisecond)) {
		errs = append(errs, fmt.Errorf("period %v must be at least 1ms", d))
	}
	if r.BanFor < 0 || (r.BanFor > 0 && r.BanFor < time.Millisecond) {
		errs = append(errs, fmt.Errorf("ban_for %v must be at least 1ms", r.BanFor))
	}
	if r.BanFor != 0 && r.CountDistinct != "" {
		errs = append(errs, errors.New("ban_for cannot be combined with count_distinct"))
	}
	errs = append(errs, checkAlgorithm(r)...)
	c.static = limStatic && perStatic
	c.limit, c.period = n, d
	return errs
}

// checkAlgorithm rejects an unknown algorithm and the fields it cannot use.
func checkAlgorithm(r *Rule) []error {
	var errs []error
	if !r.Algorithm.valid() {
		errs = append(errs, fmt.Errorf("algorithm %.*q is not fixed_window, sliding_window or token_bucket", MaxPropertyLen, r.Algorithm))
	}
	if r.CountDistinct != "" && r.Algorithm != "" && r.Algorithm != FixedWindow {
		errs = append(errs, fmt.Errorf("count_distinct counts in fixed windows only, not with algorithm %s", r.Algorithm))
	}
	if r.Burst != 0 && r.Algorithm != TokenBucket {
		errs = append(errs, errors.New("burst is valid with algorithm token_bucket only"))
	}
	if r.Burst < 0 || r.Burst > MaxBurst {
		errs = append(errs, fmt.Errorf("burst %d must be between 1 and %d", r.Burst, int64(MaxBurst)))
	}
	return errs
}

func compileRules(rules []Rule) ([]*compiledRule, error) {
	if err := checkRuleCount(len(rules)); err != nil {
		return nil, err // before compiling: the list's size is the cost to bound
	}
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

// cloneRules returns a copy of rules that shares no map or slice with them,
// for a caller to edit: a rule's Characteristics back its counter keys, and
// its Match what MatchFailures explains.
func cloneRules(rules []Rule) []Rule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]Rule, len(rules))
	for i, r := range rules {
		r.Match = cloneMatch(r.Match)
		r.Characteristics = slices.Clone(r.Characteristics)
		out[i] = r
	}
	return out
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
