package config

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"unicode/utf8"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// checkRules is the hand-written part of validation (what protovalidate
// cannot express) for one limiter's rule list, at path at: names unique,
// regexes valid RE2 within the core's bounds, and, when the limiter's spec is
// known, properties declared in available_properties and skip rules within
// allowed_skip_rules. Paths are built only for the problems found.
func (d *doc) checkRules(spec *configv1.LimiterSpec, at path, rules []*configv1.Rule) {
	var props map[string]bool
	if spec != nil {
		props = make(map[string]bool, len(spec.GetAvailableProperties()))
		for _, p := range spec.GetAvailableProperties() {
			props[p] = true
		}
	}
	declared := func(prop string) bool {
		// An invalid name is reported by protovalidate already.
		return props == nil || props[prop] || !rulecheck.ValidName(prop)
	}
	available := func() string { return ListNames(spec.GetAvailableProperties()) }
	if n := len(rules); n > ratelimit.MaxRulesPerTier {
		d.check(at.at(ratelimit.MaxRulesPerTier), false, "%d rules in this list, at most %d per tier (docs/limits.md); this is the first rule over the limit", n, ratelimit.MaxRulesPerTier)
	}
	first := make(map[string]int, len(rules))
	for i, r := range rules {
		d.checkShape(at.at(i), r)
		if name := r.GetName(); name != "" {
			if prev, dup := first[name]; dup {
				// A message (a publish request, a rules service's answer) has
				// no lines: its first rule is named by its place in the list.
				where := fmt.Sprintf("rules[%d]", prev)
				if line := d.lookup(at.at(prev).field("name"), false).line; line > 0 {
					where = fmt.Sprintf("line %d", line)
				}
				d.check(at.at(i).field("name"), false, "rule name %s is used twice in this limiter (first at %s)", quote(name), where)
			} else {
				first[name] = i
			}
		}
		for _, k := range sortedKeys(r.GetMatch()) {
			mp := func() path { return at.at(i).field("match").key(k) }
			if !declared(k) {
				d.check(mp(), true, "match property %q is not one of the limiter's available_properties (%s)", k, available())
			}
			if re, ok := r.GetMatch()[k].GetKind().(*configv1.MatchValue_Regex); ok && re.Regex != "" && len(re.Regex) <= rulecheck.MaxRegexLen {
				if err := checkRegex(re.Regex); err != nil {
					d.check(mp(), false, "match %s: %v", quote(k), err)
				}
			}
		}
		for j, c := range r.GetCharacteristics() {
			if !declared(c) {
				d.check(at.at(i).field("characteristics").at(j), false, "characteristic %q is not one of the limiter's available_properties (%s)", c, available())
			}
		}
		if cd := r.GetCountDistinct(); cd != "" && !declared(cd) {
			d.check(at.at(i).field("count_distinct"), false, "count_distinct property %q is not one of the limiter's available_properties (%s)", cd, available())
		}
		if allow := spec.GetAllowedSkipRules(); allow != nil && r.GetAction() == configv1.Action_ACTION_SKIP &&
			!slices.Contains(allow.GetNames(), r.GetName()) {
			if len(allow.GetNames()) == 0 {
				d.check(at.at(i).field("action"), false, "skip rules are not allowed on this limiter: its allowed_skip_rules list is empty (a skip bypasses the limiter for every request it matches)")
			} else {
				d.check(at.at(i).field("action"), false, "skip rule %s is not in the limiter's allowed_skip_rules (%s); a skip bypasses the limiter for every request it matches", quote(r.GetName()), ListNames(allow.GetNames()))
			}
		}
	}
}

// checkShape reports the bounds of the core's rule model that rule r at
// path at breaks. Protovalidate bounds property names (^[a-z0-9_]{1,64}$:
// ratelimit.MaxPropertyLen) and an equality value's bytes
// (ratelimit.MaxMatchValueLen); the one_of values' bytes, and that every
// matched value is UTF-8 text, are checked here.
func (d *doc) checkShape(at path, r *configv1.Rule) {
	if n := len(r.GetCharacteristics()); n > ratelimit.MaxCharacteristics {
		d.check(at.field("characteristics"), false, "%d characteristics, at most %d (docs/limits.md)", n, ratelimit.MaxCharacteristics)
	}
	if n := len(r.GetMatch()); n > ratelimit.MaxMatchEntries {
		d.check(at.field("match"), false, "%d match entries, at most %d (docs/limits.md)", n, ratelimit.MaxMatchEntries)
	}
	for k, v := range r.GetMatch() {
		// A stored document is JSON, which holds UTF-8 text only: a value
		// built in code with other bytes would be written as U+FFFD (three
		// bytes each, over the bound a reader checks) and so match other
		// requests than the rule that was published. The YAML and JSON
		// readers give UTF-8 only.
		if notUTF8(v.GetEquality()) || slices.ContainsFunc(v.GetOneOf().GetValues(), notUTF8) {
			d.check(at.field("match").key(k), false, "match %s: a value is not UTF-8 text", quote(k))
		}
		if n := len(v.GetOneOf().GetValues()); n > ratelimit.MaxOneOfValues {
			d.check(at.field("match").key(k), false, "match %s: one_of has %d values, at most %d (docs/limits.md)", quote(k), n, ratelimit.MaxOneOfValues)
		}
		for i, s := range v.GetOneOf().GetValues() {
			if n := len(s); n > ratelimit.MaxMatchValueLen {
				d.check(at.field("match").key(k), false, "match %s: one_of value #%d is %d bytes, at most %d (docs/limits.md)", quote(k), i+1, n, ratelimit.MaxMatchValueLen)
				break // one is enough to refuse the rule
			}
		}
	}
}

func notUTF8(s string) bool { return !utf8.ValidString(s) }

// maxRegexChecks bounds regexChecks.
const maxRegexChecks = 4096

// regexChecks remembers what rulecheck.CompileRegex said of each regex (nil
// when it compiles within the core's bounds). Every process decodes a stored
// document on every change, and compiling its regexes again cost more than
// the rest of the decode; the answer depends on the text alone. It is emptied
// when full.
var regexChecks struct {
	sync.Mutex
	m map[string]error
}

// checkRegex is rulecheck.CompileRegex's error for expr, remembered.
func checkRegex(expr string) error {
	regexChecks.Lock()
	err, ok := regexChecks.m[expr]
	regexChecks.Unlock()
	if ok {
		return err
	}
	_, err = rulecheck.CompileRegex(expr) // outside the lock: it may be slow
	regexChecks.Lock()
	if regexChecks.m == nil || len(regexChecks.m) >= maxRegexChecks {
		regexChecks.m = make(map[string]error)
	}
	regexChecks.m[expr] = err
	regexChecks.Unlock()
	return err
}

// checkRuleMap checks a limiter → rule list map (rate_limits.yaml, a publish
// request): every limiter must be declared in available, and each list must
// pass checkRules. available may be nil, for checks that do not know it.
func (d *doc) checkRuleMap(field string, m map[string]*configv1.RuleList, available *AvailableLimiters) {
	d.checkLimiterCount(field, len(m))
	for _, name := range sortedKeys(m) {
		at := path{}.field(field).key(name)
		var spec *configv1.LimiterSpec
		if available != nil {
			spec = available.Spec(name)
			if spec == nil && rulecheck.ValidName(name) {
				d.check(at, true, "%v", available.NoLimiter(name))
			}
		}
		d.checkRules(spec, at.field("rules"), m[name].GetRules())
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkSpecLists refuses, at the limiter at, a spec over
// MaxAvailableProperties or MaxAllowedSkipRules.
func (d *doc) checkSpecLists(at path, spec *configv1.LimiterSpec) {
	if n := len(spec.GetAvailableProperties()); n > MaxAvailableProperties {
		d.check(at.field("available_properties").at(MaxAvailableProperties), false, "%d available properties, at most %d (config.MaxAvailableProperties, docs/limits.md); this is the first over the limit", n, MaxAvailableProperties)
	}
	if n := len(spec.GetAllowedSkipRules().GetNames()); n > MaxAllowedSkipRules {
		d.check(at.field("allowed_skip_rules").field("names").at(MaxAllowedSkipRules), false, "%d allowed skip rules, at most %d (config.MaxAllowedSkipRules, docs/limits.md); this is the first over the limit", n, MaxAllowedSkipRules)
	}
}

// checkLimiterCount refuses a map of more than MaxLimiters limiters at field.
func (d *doc) checkLimiterCount(field string, n int) {
	if n > MaxLimiters {
		d.check(path{}.field(field), false, "%d limiters, at most %d (config.MaxLimiters, docs/limits.md)", n, MaxLimiters)
	}
}
