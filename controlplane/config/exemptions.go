package config

import (
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
)

// ExemptionWarnings warns about the rules of a rule map (a publish payload:
// limiter → rules) that replace or match what a default exemption (a skip
// rule opening available_limiters.yaml's default_rules, such as
// skip_health_checks) exempts. The exemption still holds against them unless
// they replace it by name (docs/design.md#exemptions); the warning tells the
// operator before the rules apply. file names the payload; there are no lines.
func ExemptionWarnings(file string, available *AvailableLimiters, rules map[string]*configv1.RuleList) []*Error {
	return exemptionWarnings(nil, file, "rate_limits", available, rules)
}

// ExemptionWarnings is config.ExemptionWarnings for rate_limits.yaml, with
// the line and column of each rule.
func (r *RateLimits) ExemptionWarnings(available *AvailableLimiters) []*Error {
	return exemptionWarnings(r.doc, r.File, "rate_limits", available, r.Proto.GetRateLimits())
}

func exemptionWarnings(d *doc, file, field string, available *AvailableLimiters, m map[string]*configv1.RuleList) []*Error {
	if available == nil {
		return nil
	}
	var out []*Error
	for _, name := range sortedKeys(m) {
		defaults, err := available.DefaultRules(name)
		if err != nil || len(tiers.Exemptions(defaults)) == 0 {
			continue
		}
		at := path{}.field(field).key(name).field("rules")
		// The rules that compile (the others are reported by validation); one
		// that replaces an exemption by name lifts it for the others.
		var list []ratelimit.Rule
		var index []int
		for i, pr := range m[name].GetRules() {
			if rule, err := RuleFromProto(pr); err == nil {
				list, index = append(list, rule), append(index, i)
			}
		}
		for j, rule := range list {
			i, pr := index[j], m[name].GetRules()[index[j]]
			for _, msg := range tiers.ShadowedExemptions(rule, defaults, list) {
				e := &Error{File: file, Limiter: name, Rule: pr.GetName(), Message: msg}
				if d != nil {
					pos := d.lookup(at.at(i), false)
					e.Line, e.Column = pos.line, pos.col
				}
				out = append(out, e)
			}
		}
	}
	return out
}
