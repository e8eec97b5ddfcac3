package config

import (
	"slices"
	"sort"

	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// ruleAt is one rule of a limiter and where it is in the document.
type ruleAt struct {
	at path
	r  *configv1.Rule
}

func rulesAt(at path, rules []*configv1.Rule) []ruleAt {
	out := make([]ruleAt, len(rules))
	for i, r := range rules {
		out[i] = ruleAt{at: at.at(i), r: r}
	}
	return out
}

// checkRules is the hand-written part of validation (what protovalidate
// cannot express) for one limiter's rule list: names unique, regexes valid RE2 within the
// core's bounds, and, when the limiter's spec is known, properties declared
// in available_properties and skip rules within allowed_skip_rules.
func (d *doc) checkRules(spec *configv1.LimiterSpec, rules []ruleAt) {
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
	available := quoteList(spec.GetAvailableProperties())
	first := map[string]path{}
	for _, ra := range rules {
		r, at := ra.r, ra.at
		if name := r.GetName(); name != "" {
			if prev, dup := first[name]; dup {
				d.check(at.field("name"), false, "rule name %q is used twice in this limiter (first at line %d)", name, d.lookup(prev, false).line)
			} else {
				first[name] = at.field("name")
			}
		}
		for _, k := range sortedKeys(r.GetMatch()) {
			mp := at.field("match").key(k)
			if !declared(k) {
				d.check(mp, true, "match property %q is not one of the limiter's available_properties (%s)", k, available)
			}
			if re, ok := r.GetMatch()[k].GetKind().(*configv1.MatchValue_Regex); ok && re.Regex != "" && len(re.Regex) <= rulecheck.MaxRegexLen {
				if _, err := rulecheck.CompileRegex(re.Regex); err != nil {
					d.check(mp, false, "match %q: %v", k, err)
				}
			}
		}
		for i, c := range r.GetCharacteristics() {
			if !declared(c) {
				d.check(at.field("characteristics").at(i), false, "characteristic %q is not one of the limiter's available_properties (%s)", c, available)
			}
		}
		if cd := r.GetCountDistinct(); cd != "" && !declared(cd) {
			d.check(at.field("count_distinct"), false, "count_distinct property %q is not one of the limiter's available_properties (%s)", cd, available)
		}
		if allow := spec.GetAllowedSkipRules(); allow != nil && r.GetAction() == configv1.Action_ACTION_SKIP &&
			!slices.Contains(allow.GetNames(), r.GetName()) {
			if len(allow.GetNames()) == 0 {
				d.check(at.field("action"), false, "skip rules are not allowed on this limiter: its allowed_skip_rules list is empty (a skip bypasses the limiter for every request it matches)")
			} else {
				d.check(at.field("action"), false, "skip rule %q is not in the limiter's allowed_skip_rules (%s); a skip bypasses the limiter for every request it matches", r.GetName(), quoteList(allow.GetNames()))
			}
		}
	}
}

// checkRuleMap checks a limiter → rule list map (rate_limits.yaml, a publish
// request): every limiter must be declared in available, and each list must
// pass checkRules. available may be nil, for checks that do not know it.
func (d *doc) checkRuleMap(field string, m map[string]*configv1.RuleList, available *AvailableLimiters) {
	for _, name := range sortedKeys(m) {
		at := path{}.field(field).key(name)
		var spec *configv1.LimiterSpec
		if available != nil {
			spec = available.Spec(name)
			if spec == nil && rulecheck.ValidName(name) {
				d.check(at, true, "no limiter %q in %s (it declares %s)", name, available.source(), quoteList(available.Names()))
			}
		}
		d.checkRules(spec, rulesAt(at.field("rules"), m[name].GetRules()))
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
