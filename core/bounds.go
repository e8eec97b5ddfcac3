package ratelimit

import (
	"fmt"
	"unicode/utf8"

	"github.com/ratekit/ratekit/internal/rulecheck"
)

// Maxima of the rules model (docs/limits.md). Every path that writes or
// reads rules enforces them: New and SetRules, CompileRules, a check that
// merges per-request tiers, the config loader and `ratekit validate`, the
// rule store's publish and replica, the admin page, the rules service and
// its client. Each rule a check evaluates may cost one store key, so the
// number of rules bounds a check's work: about 16,500 rules made a check
// on Redis outlast its 100ms timeout and fail open.
const (
	// MaxRulesPerTier bounds one tier of a limiter: the rules of
	// rate_limits.yaml, of the published tier, of the application's
	// defaults, and of one answer of a rules service (a RuleSet).
	MaxRulesPerTier = 256
	// MaxRules bounds the list a limiter evaluates once its tiers are
	// merged (remote ++ file ++ published ++ default): New, SetRules and
	// CompileRules refuse a longer list, and a check whose per-request
	// tiers would take the merged list past it leaves them out (the
	// result is Degraded).
	MaxRules = 4 * MaxRulesPerTier
	// MaxCharacteristics bounds a rule's Characteristics.
	MaxCharacteristics = 16
	// MaxMatchEntries bounds the entries of a rule's Match.
	MaxMatchEntries = 32
	// MaxOneOfValues bounds the values of one OneOf matcher.
	MaxOneOfValues = 1024
	// MaxRegexLen (1024) bounds a Regex matcher's expression, in bytes; it must
	// also compile to at most 10000 RE2 instructions.
	MaxRegexLen = rulecheck.MaxRegexLen
	// MaxPropertyLen bounds a property name a rule uses, in bytes: a Match
	// key, a characteristic, CountDistinct. The config files' names are
	// ^[a-z0-9_]{1,64}$, as are the rules service's.
	MaxPropertyLen = 64
	// MaxMatchValueLen bounds a value a rule matches, in bytes: an Equal
	// value, each value of a OneOf. The rules service bounds an
	// identifier's values so too.
	MaxMatchValueLen = 4096
	// MaxDescriptionLen bounds a rule's Description, in characters (a
	// description may be in any script), as the config schema does: a rule
	// the core took beyond it could not be stored, published or seeded.
	MaxDescriptionLen = 1024
	// MaxDocumentBytes bounds one rules document before it is parsed: a
	// configuration file (available_limiters.yaml, rate_limits.yaml), a
	// limiter's document in the rule store, a publish payload, a rules
	// service's override document.
	MaxDocumentBytes = 1 << 20
	// MaxKeyPrefixLen bounds a key prefix an operator sets, in bytes: a
	// limiter's Config.KeyPrefix, which starts every counter and ban key it
	// writes, and the rule store's prefix. Every other part of a key is
	// bounded already, so a key is too.
	MaxKeyPrefixLen = 256
)

// checkRuleShape reports the bounds r's lists break.
func checkRuleShape(r *Rule) []error {
	var errs []error
	if n := len(r.Characteristics); n > MaxCharacteristics {
		errs = append(errs, fmt.Errorf("%d characteristics, at most %d", n, MaxCharacteristics))
	}
	if n := len(r.Match); n > MaxMatchEntries {
		errs = append(errs, fmt.Errorf("%d match entries, at most %d", n, MaxMatchEntries))
	}
	for k, m := range r.Match {
		if n := len(k); n > MaxPropertyLen {
			errs = append(errs, fmt.Errorf("match property %q... is %d bytes, at most %d", k[:MaxPropertyLen], n, MaxPropertyLen))
		}
		if n := len(m.set); n > MaxOneOfValues {
			errs = append(errs, fmt.Errorf("match %.*q: one_of has %d values, at most %d", MaxPropertyLen, k, n, MaxOneOfValues))
		}
		if n := len(m.value); m.kind == matchEqual && n > MaxMatchValueLen {
			errs = append(errs, fmt.Errorf("match %.*q: the value is %d bytes, at most %d", MaxPropertyLen, k, n, MaxMatchValueLen))
		}
		for i, v := range m.set {
			if n := len(v); n > MaxMatchValueLen {
				errs = append(errs, fmt.Errorf("match %.*q: one_of value #%d is %d bytes, at most %d", MaxPropertyLen, k, i+1, n, MaxMatchValueLen))
				break // one is enough to refuse the rule
			}
		}
	}
	for _, c := range r.Characteristics {
		if n := len(c); n > MaxPropertyLen {
			errs = append(errs, fmt.Errorf("characteristic %q... is %d bytes, at most %d", c[:MaxPropertyLen], n, MaxPropertyLen))
		}
	}
	if n := len(r.CountDistinct); n > MaxPropertyLen {
		errs = append(errs, fmt.Errorf("count_distinct property %q... is %d bytes, at most %d", r.CountDistinct[:MaxPropertyLen], n, MaxPropertyLen))
	}
	if len(r.Description) > MaxDescriptionLen { // no rune is less than a byte
		if n := utf8.RuneCountInString(r.Description); n > MaxDescriptionLen {
			errs = append(errs, fmt.Errorf("description is %d characters, at most %d", n, MaxDescriptionLen))
		}
	}
	return errs
}

// checkRuleCount refuses a rule list longer than MaxRules.
func checkRuleCount(n int) error {
	if n > MaxRules {
		return fmt.Errorf("%d rules, at most %d once the tiers are merged", n, MaxRules)
	}
	return nil
}
