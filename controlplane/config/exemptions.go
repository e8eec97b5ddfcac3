package config

import (
	"errors"
	"slices"
	"strings"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/identifiers"
)

// ExemptionWarnings warns about the counting rules (limit, log) of a rule map
// (a publish payload: limiter → rules) that replace or match what a default
// exemption (a skip rule opening available_limiters.yaml's default_rules,
// such as skip_health_checks) exempts; a skip rule that replaces one is not
// warned about. The exemption still holds against them unless
// they replace it by name (docs/design.md#exemptions); the warning tells the
// operator before the rules apply. It also warns about a skip rule without
// a match that comes before every counting rule of its list: nothing after
// it counts. file names the payload; there are no
// lines (a payload read from a file has them: PublishFile.ExemptionWarnings).
// Warnings are bounded as a ValidationError's problems are: the first
// MaxReportedErrors, each of at most 512 characters (cut in the middle), and
// the count of the others.
func ExemptionWarnings(file string, available *AvailableLimiters, rules map[string]*configv1.RuleList) (warnings []*Error, omitted int) {
	return exemptionWarnings(nil, file, "rate_limits", defaultsOf(available), rules)
}

// ExemptionWarnings is config.ExemptionWarnings for rate_limits.yaml, with
// the line and column of each rule, in file order.
func (r *RateLimits) ExemptionWarnings(available *AvailableLimiters) (warnings []*Error, omitted int) {
	return exemptionWarnings(r.doc, r.File, "rate_limits", defaultsOf(available), r.Proto.GetRateLimits())
}

// ExemptionWarnings is config.ExemptionWarnings for a publish payload read
// from a file, with the line and column of each rule, in file order.
func (p *PublishFile) ExemptionWarnings(available *AvailableLimiters) (warnings []*Error, omitted int) {
	return exemptionWarnings(p.doc, p.File, "rate_limits", defaultsOf(available), p.Proto.GetRateLimits())
}

// StoredExemptionWarnings is PublishFile.ExemptionWarnings where no
// available_limiters.yaml was given (a publish with --skip-available-check):
// each limiter's default rules are those its services seeded in the rule
// store (defaults, by limiter), so that a publish which would rate-limit
// health probes still says so. A limiter without an entry is not judged.
func (p *PublishFile) StoredExemptionWarnings(defaults map[string][]ratelimit.Rule) (warnings []*Error, omitted int) {
	of := func(name string) ([]ratelimit.Rule, error) {
		d, ok := defaults[name]
		if !ok {
			return nil, errors.New("no stored default rules")
		}
		return d, nil
	}
	return exemptionWarnings(p.doc, p.File, "rate_limits", of, p.Proto.GetRateLimits())
}

// defaultsOf returns the default rules of available's limiters, or nil
// (no warnings) for no file.
func defaultsOf(available *AvailableLimiters) func(string) ([]ratelimit.Rule, error) {
	if available == nil {
		return nil
	}
	return available.DefaultRules
}

// maxWarningLen bounds, in characters, the message of one exemption
// warning: it quotes the exemption's match, which may be as large as
// available_limiters.yaml, and every rule the exemption concerns repeats it
// (an exemption of 0.8 MiB and 256 rules made 204 MB of warnings).
const maxWarningLen = 512

func exemptionWarnings(d *doc, file, field string, defaultRules func(limiter string) ([]ratelimit.Rule, error), m map[string]*configv1.RuleList) ([]*Error, int) {
	if defaultRules == nil {
		return nil, 0
	}
	var out []*Error
	for _, name := range sortedKeys(m) {
		at := path{}.field(field).key(name).field("rules")
		place := func(e *Error, i int) *Error {
			if d != nil {
				pos := d.lookup(at.at(i), false)
				e.Line, e.Column = pos.line, pos.col
			}
			return e
		}
		defaults, err := defaultRules(name)
		if err != nil {
			continue
		}
		// The rules that compile (the others are reported by validation); one
		// that replaces an exemption by name lifts it for the others.
		var list []ratelimit.Rule
		var index []int
		for i, pr := range m[name].GetRules() {
			if rule, err := RuleFromProto(pr); err == nil {
				list, index = append(list, rule), append(index, i)
			}
		}
		// A skip rule without a match skips every request that reaches it.
		// After counting rules it ends a list on purpose ("skip the
		// application's defaults"); among the skip rules that open the list
		// (a published skip_health_checks whose match was emptied) it leaves
		// the list nothing to count: valid, and almost never meant.
		for j, r := range tiers.Exemptions(list) {
			if len(r.Match) == 0 {
				out = append(out, place(&Error{File: file, Limiter: name, Rule: r.Name, Message: "skip rule " + r.Name +
					" has no match and comes before every counting rule of its list: every request that reaches it is skipped, so neither the rules after it nor a lower tier's count or block; to stop blocking but keep counting, set the limiter's mode: shadow"}, index[j]))
			}
		}
		if len(tiers.Exemptions(defaults)) == 0 {
			continue
		}
		for j, rule := range list {
			i, pr := index[j], m[name].GetRules()[index[j]]
			for _, msg := range ShadowedExemptions(rule, defaults, list) {
				out = append(out, place(&Error{File: file, Limiter: name, Rule: pr.GetName(), Message: msg}, i))
			}
		}
	}
	if d != nil {
		sortErrors(out)
	}
	if len(out) > MaxReportedErrors {
		return slices.Clip(out[:MaxReportedErrors]), len(out) - MaxReportedErrors
	}
	return out, 0
}

// ShadowedExemptions is tiers.ShadowedExemptions for every surface that
// warns about default exemptions (validate, publish, the admin page): it
// leaves out the exemptions that r's gRPC methods rule out, which the tiers
// package cannot tell, and each message is at most 512 characters (the
// exemption's match cut in the middle).
func ShadowedExemptions(r ratelimit.Rule, defaults []ratelimit.Rule, higher ...[]ratelimit.Rule) []string {
	out := tiers.ShadowedExemptions(r, reachable(r, defaults), higher...)
	for i, msg := range out {
		out[i] = ClipMiddle(msg, maxWarningLen)
	}
	return out
}

// ClipMiddle cuts s to n characters and "..." by leaving out the middle, so
// that both ends stay readable: in an exemption warning the names come
// first and what to do last. The admin page cuts what it repeats with it.
func ClipMiddle(s string, n int) string {
	if len(s) <= n { // no character is less than a byte
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	tail := n / 4
	return string(r[:n-tail]) + "..." + string(r[len(r)-tail:])
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
