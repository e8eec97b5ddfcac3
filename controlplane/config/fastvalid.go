package config

import (
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// protovalidate evaluates the schema's rules through reflection and CEL, and
// a stored document is mostly rules: evaluating every one of them cost more
// than reading the document. validRule states the same rules in Go for one
// Rule (its fields, its match values and their sets, its CEL rules), and
// skipValidRules, the filter validate hands protovalidate, skips each rule
// that validRule accepts. A rule it refuses is evaluated by protovalidate as
// before, so every violation, its message and its path still come from
// protovalidate alone; validRule only has to accept nothing that
// protovalidate rejects. TestValidRuleAgreesWithProtovalidate holds the two
// together on random rules, and TestValidRuleSchemaPinned fails when the
// schema's rules for these messages change, so that validRule changes with
// them.

// validRule reports whether protovalidate finds no violation in r (its own
// rules and those of the messages inside it).
func validRule(r *configv1.Rule) bool {
	if r == nil {
		return false
	}
	// Fields, in field-number order.
	if !maxRunes(r.Description, 1024) {
		return false
	}
	action := r.Action
	if action != configv1.Action_ACTION_LIMIT && action != configv1.Action_ACTION_LOG && action != configv1.Action_ACTION_SKIP {
		return false // required, defined_only
	}
	if !uniqueNames(r.Characteristics) {
		return false
	}
	for k, v := range r.Match {
		if !validNameBytes(k) || !validMatchValue(v) {
			return false
		}
	}
	if r.Algorithm < configv1.Algorithm_ALGORITHM_UNSPECIFIED || r.Algorithm > configv1.Algorithm_ALGORITHM_TOKEN_BUCKET {
		return false // defined_only
	}
	for _, p := range []*uint32{r.Limit, r.PeriodS, r.BanForS, r.Burst} {
		if p != nil && *p < 1 {
			return false
		}
	}
	if r.CountDistinct != "" && !validNameBytes(r.CountDistinct) {
		return false
	}
	if !validNameBytes(r.Name) {
		return false
	}
	// The message's CEL rules.
	skip := action == configv1.Action_ACTION_SKIP
	switch {
	case !skip && (r.Limit == nil || r.PeriodS == nil): // limit_requires_threshold
		return false
	case r.BanForS != nil && r.CountDistinct != "": // ban_excludes_count_distinct
		return false
	case r.BanForS != nil && skip: // ban_requires_threshold
		return false
	case r.CountMissing && (len(r.Characteristics) == 0 || skip): // count_missing_requires_characteristics
		return false
	case r.CountDistinct != "" && skip: // count_distinct_requires_threshold
		return false
	case (r.Algorithm != configv1.Algorithm_ALGORITHM_UNSPECIFIED || r.Burst != nil) && skip: // algorithm_requires_threshold
		return false
	case r.CountDistinct != "" && r.Algorithm > configv1.Algorithm_ALGORITHM_FIXED_WINDOW: // count_distinct_fixed_window
		return false
	case r.Burst != nil && r.Algorithm != configv1.Algorithm_ALGORITHM_TOKEN_BUCKET: // burst_requires_token_bucket
		return false
	}
	return true
}

// validMatchValue reports whether protovalidate finds no violation in v.
func validMatchValue(v *configv1.MatchValue) bool {
	if v == nil {
		return false
	}
	switch k := v.Kind.(type) {
	case *configv1.MatchValue_Equality:
		return k != nil && len(k.Equality) <= 4096 // max_bytes
	case *configv1.MatchValue_Regex:
		return k != nil && k.Regex != "" && len(k.Regex) <= 1024 // min_len 1, max_bytes
	case *configv1.MatchValue_OneOf:
		return k != nil && k.OneOf != nil && len(k.OneOf.Values) >= 1 && unique(k.OneOf.Values)
	}
	return false // the oneof is required
}

// maxRunes reports whether s is at most n characters (runes, as
// protovalidate counts them).
func maxRunes(s string, n int) bool {
	return len(s) <= n || utf8.RuneCountInString(s) <= n
}

// validNameBytes is the pattern ^[a-z0-9_]{1,64}$ of the schema's names.
func validNameBytes(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// uniqueNames reports whether the names of ss are valid and unique.
func uniqueNames(ss []string) bool {
	for _, s := range ss {
		if !validNameBytes(s) {
			return false
		}
	}
	return unique(ss)
}

// unique reports whether no string of ss repeats.
func unique(ss []string) bool {
	if len(ss) > 16 {
		seen := make(map[string]struct{}, len(ss))
		for _, s := range ss {
			if _, dup := seen[s]; dup {
				return false
			}
			seen[s] = struct{}{}
		}
		return true
	}
	for i := 1; i < len(ss); i++ {
		for j := 0; j < i; j++ {
			if ss[i] == ss[j] {
				return false
			}
		}
	}
	return true
}

var ruleListRules = (&configv1.RuleList{}).ProtoReflect().Descriptor().Fields().ByName("rules")

// skipValidRules is the protovalidate.Filter of validate: a rule list whose
// rules are all valid is skipped whole, and in any other list each valid
// rule. Everything else is evaluated.
type skipValidRules struct {
	last      *configv1.Rule // protovalidate asks about each field of a rule in turn
	lastValid bool
}

func (f *skipValidRules) ShouldValidate(m protoreflect.Message, d protoreflect.Descriptor) bool {
	switch x := m.Interface().(type) {
	case *configv1.RuleList:
		if d == ruleListRules {
			for _, r := range x.GetRules() {
				if !f.valid(r) {
					return true
				}
			}
			return false
		}
	case *configv1.Rule:
		return !f.valid(x)
	}
	return true
}

func (f *skipValidRules) valid(r *configv1.Rule) bool {
	if r != f.last || r == nil {
		f.last, f.lastValid = r, validRule(r)
	}
	return f.lastValid
}
