package config

import (
	"strings"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/identifiers"
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
			for _, msg := range tiers.ShadowedExemptions(rule, reachable(rule, defaults), list) {
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

// reachable returns the exemptions of defaults that r could match, or that
// it replaces by name: it leaves out those that r's gRPC methods rule out
// (grpcDisjoint), which tiers.ShadowedExemptions cannot tell, since it
// compares only the properties both match on.
func reachable(r ratelimit.Rule, defaults []ratelimit.Rule) []ratelimit.Rule {
	var out []ratelimit.Rule
	for _, ex := range tiers.Exemptions(defaults) {
		if ex.Name == r.Name || !grpcDisjoint(r.Match, ex.Match) {
			out = append(out, ex)
		}
	}
	return out
}

// grpcDisjoint reports whether no request matches both a and b because one
// matches grpc_method on values whose services the other's grpc_service
// refuses: a full method "/pkg.Service/Method" comes with grpc_service
// "pkg.Service" (identifiers.GRPCMethod), so a rule on another service's
// method never sees the health service's calls.
func grpcDisjoint(a, b map[string]ratelimit.Matcher) bool {
	return methodsOutside(a, b) || methodsOutside(b, a)
}

// methodsOutside reports whether a's grpc_method is an equality or a set
// whose every method's service b's grpc_service refuses. A regex on the
// method is not decided (false).
func methodsOutside(a, b map[string]ratelimit.Matcher) bool {
	method, ok := a[identifiers.GRPCMethod]
	service, ok2 := b[identifiers.GRPCService]
	if !ok || !ok2 {
		return false
	}
	var methods []string
	switch {
	case method.IsEqual():
		methods = []string{method.Value()}
	case method.IsOneOf():
		methods = method.Values()
	default:
		return false
	}
	for _, m := range methods {
		if service.Matches(serviceOf(m)) {
			return false
		}
	}
	return true
}

// serviceOf is the service of full method m, as the gRPC adapter splits it
// ("/pkg.Service/Method" → "pkg.Service"; "" without a service).
func serviceOf(m string) string {
	m = strings.TrimPrefix(m, "/")
	return m[:max(strings.LastIndexByte(m, '/'), 0)]
}
