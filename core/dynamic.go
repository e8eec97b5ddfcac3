package ratelimit

// RuleSet is a validated, compiled rule list that a check can use as its
// highest tier: the per-request rules of a rules service, or a gateway's
// per-request limit override. Compile it once and reuse it; it is immutable
// and safe for concurrent use.
type RuleSet struct {
	rules    []*compiledRule
	original []Rule
	names    map[string]struct{}
}

// CompileRules validates rules exactly as New and SetRules do (every rule
// valid, names unique, at most MaxRules; all problems reported, joined) and
// compiles them into a RuleSet. On error nothing is returned: a list is used
// whole or not at all.
// tier names the set: the evaluations of its rules carry it in
// Evaluation.Tier, so a result says where each rule came from (the rules
// service's client names its tier "remote"); it may be "".
func CompileRules(tier string, rules []Rule) (*RuleSet, error) {
	compiled, err := compileRules(rules)
	if err != nil {
		return nil, err
	}
	s := &RuleSet{rules: compiled, original: make([]Rule, len(compiled)), names: make(map[string]struct{}, len(compiled))}
	for i, c := range compiled {
		s.original[i] = *c.rule
		c.rule = &s.original[i]
		c.perRequest, c.tier = true, tier
		s.names[c.rule.Name] = struct{}{}
	}
	return s, nil
}

// Rules returns a copy of the set's rules in order, the caller's to edit
// (their Match maps and Characteristics too).
func (s *RuleSet) Rules() []Rule {
	if s == nil {
		return nil
	}
	return cloneRules(s.original)
}

// Len returns the number of rules in the set (0 for nil).
func (s *RuleSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.rules)
}

// WithRules puts s above the limiter's rules for one check or peek: its rules
// are evaluated first, after only the skip rules that open the limiter's list
// (its exemptions, such as health checks), and a limiter rule of the same
// name, exemption or not, is replaced by the set's rule, which inherits its
// counter (the name is part of the key). It stacks on top of
// Config.RuleSource: WithRules's set comes first.
func WithRules(s *RuleSet) CheckOption { return func(o *checkOpts) { o.extra = s } }

// withPerRequest merges the per-request tiers (highest first) over base. The
// skip rules that open base are its exemptions (health checks): they stay
// first unless a per-request tier replaces one by name
// (docs/design.md#exemptions). A merge longer than MaxRules gives base
// alone, with over set.
func withPerRequest(base []*compiledRule, tiers ...*RuleSet) (_ []*compiledRule, over bool) {
	n := len(base)
	for _, t := range tiers {
		n += t.Len()
	}
	out := make([]*compiledRule, 0, n)
	seen := func(name string, upto int) bool {
		for _, t := range tiers[:upto] {
			if t != nil {
				if _, ok := t.names[name]; ok {
					return true
				}
			}
		}
		return false
	}
	lead := 0
	for lead < len(base) && base[lead].rule.Action == ActionSkip {
		lead++
	}
	for _, c := range base[:lead] {
		if !seen(c.rule.Name, len(tiers)) {
			out = append(out, c)
		}
	}
	for i, t := range tiers {
		if t == nil {
			continue
		}
		for _, c := range t.rules {
			if !seen(c.rule.Name, i) {
				out = append(out, c)
			}
		}
	}
	for _, c := range base[lead:] {
		if !seen(c.rule.Name, len(tiers)) {
			out = append(out, c)
		}
	}
	if len(out) > MaxRules {
		return base, true
	}
	return out, false
}
