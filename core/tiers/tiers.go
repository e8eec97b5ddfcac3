// Package tiers holds a limiter's rules by tier, the one representation that
// the config loader, the rule store, the debug page, the admin page and the
// CLI share.
//
// Rules reach a limiter from four tiers, highest precedence first: remote
// (the rules service, per request), file (rate_limits.yaml), published
// (written into the rule store at run time) and default (the application's
// available_limiters.yaml). A rule whose name appears in a higher tier
// replaces the rule of that name in every lower tier and, because the name
// is part of the counter key, inherits its counter (docs/design.md#tiers).
//
// Exemptions: the skip rules that open the lowest tier (the application's
// health and readiness exemptions, such as skip_health_checks) are evaluated
// before every tier, so that an incident rule matching every request
// (`match: {}`) published or deployed above them never rate-limits health
// checks. An operator overrides an exemption only explicitly, with a rule of
// the same name in a higher tier (docs/design.md#exemptions).
package tiers

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Tier names, highest precedence first.
const (
	Remote    = "remote"    // per-request rules from the rules service
	File      = "file"      // rate_limits.yaml, deployed by operators
	Published = "published" // published into the rule store at run time
	Default   = "default"   // the application's own rules (available_limiters.yaml)
)

// Names returns the tier names, highest precedence first.
func Names() []string { return []string{Remote, File, Published, Default} }

// Set is one limiter's rules by tier. A nil tier is an empty one.
type Set struct {
	Remote    []ratelimit.Rule
	File      []ratelimit.Rule
	Published []ratelimit.Rule
	Defaults  []ratelimit.Rule
	// Mode is the limiter's mode (enforce or shadow) from the highest tier
	// that sets one, like rate_limits.yaml's `limiter: {mode: shadow}`; nil
	// when none does, and the limiter keeps the mode it was configured with.
	Mode *ratelimit.Enforcement
}

// CheckBounds reports every tier of s holding more than
// ratelimit.MaxRulesPerTier rules (docs/limits.md); nil when none does. The
// merged list is then at most ratelimit.MaxRules long.
func (s Set) CheckBounds() error {
	var errs []error
	for i, t := range [][]ratelimit.Rule{s.Remote, s.File, s.Published, s.Defaults} {
		if len(t) > ratelimit.MaxRulesPerTier {
			errs = append(errs, fmt.Errorf("tier %s holds %d rules, at most %d", Names()[i], len(t), ratelimit.MaxRulesPerTier))
		}
	}
	return errors.Join(errs...)
}

// Merged returns the list the limiter evaluates:
// Merge(s.Remote, s.File, s.Published, s.Defaults).
func (s Set) Merged() []ratelimit.Rule { return Merge(s.Remote, s.File, s.Published, s.Defaults) }

// Clone returns a copy of s whose tiers and mode share no memory with s, so
// that a holder can hand it out while it keeps changing its own. The rules'
// Match maps and Characteristics are copied too; a Matcher is immutable, so
// the copies share their matchers.
func (s Set) Clone() Set {
	c := Set{Remote: cloneRules(s.Remote), File: cloneRules(s.File),
		Published: cloneRules(s.Published), Defaults: cloneRules(s.Defaults)}
	if s.Mode != nil {
		m := *s.Mode
		c.Mode = &m
	}
	return c
}

// cloneRules copies rules with their Match maps and Characteristics; nil
// stays nil.
func cloneRules(rules []ratelimit.Rule) []ratelimit.Rule {
	out := slices.Clone(rules)
	for i := range out {
		out[i].Match = maps.Clone(out[i].Match)
		out[i].Characteristics = slices.Clone(out[i].Characteristics)
	}
	return out
}

// Merge builds one evaluation list from rule tiers given highest first
// (remote ++ file ++ published ++ default). A rule whose name appears in a
// higher tier removes the lower tiers' rules of that name; the survivor keeps
// the name, and so the counter. Rules keep their order within their tier,
// except the lowest tier's exemptions (Exemptions), which no higher tier
// names: they come first.
func Merge(tiers ...[]ratelimit.Rule) []ratelimit.Rule {
	seen := map[string]bool{}
	var out []ratelimit.Rule
	var lowest []ratelimit.Rule
	if len(tiers) > 0 {
		lowest = tiers[len(tiers)-1]
	}
	held := heldExemptions(tiers)
	exemptions := Exemptions(lowest)
	for _, r := range exemptions {
		if held[r.Name] {
			out = append(out, r)
		}
	}
	for ti, t := range tiers {
		for i, r := range t {
			// A held exemption came first; a later rule of its name in
			// its tier is a duplicate for the limiter to reject.
			if seen[r.Name] || (ti == len(tiers)-1 && i < len(exemptions) && held[r.Name]) {
				continue
			}
			out = append(out, r)
		}
		// Marked after the whole tier: two rules of one name in one tier are
		// for the limiter (ratelimit.New, SetRules) to reject, not for Merge to drop.
		for _, r := range t {
			seen[r.Name] = true
		}
	}
	return out
}

// Exemptions returns the skip rules that open rules, before its first
// counting rule: in the lowest tier, the exemptions that hold against every
// higher tier (ratelimit.Limiter keeps them ahead of its per-request tiers
// too).
func Exemptions(rules []ratelimit.Rule) []ratelimit.Rule {
	n := 0
	for n < len(rules) && rules[n].Action == ratelimit.ActionSkip {
		n++
	}
	return rules[:n]
}

// heldExemptions names the lowest tier's exemptions that no higher tier
// overrides by name.
func heldExemptions(tiers [][]ratelimit.Rule) map[string]bool {
	if len(tiers) == 0 {
		return nil
	}
	ex := Exemptions(tiers[len(tiers)-1])
	if len(ex) == 0 {
		return nil
	}
	held := make(map[string]bool, len(ex))
	for _, r := range ex {
		held[r.Name] = true
	}
	for _, t := range tiers[:len(tiers)-1] {
		for _, r := range t {
			delete(held, r.Name)
		}
	}
	return held
}

// ShadowedExemptions returns the exemptions of defaults that r would
// override by name, and those that r could match if it came first: what an
// operator should be warned about before publishing r (an incident rule with
// `match: {}` would otherwise be a surprise only for health checks). Each
// entry is the exemption's name and why. higher are the tiers above the
// defaults, r's own among them: an exemption that one of their rules
// replaces by name no longer holds, so r is not told that it does.
func ShadowedExemptions(r ratelimit.Rule, defaults []ratelimit.Rule, higher ...[]ratelimit.Rule) []string {
	var out []string
	for _, ex := range Exemptions(defaults) {
		switch {
		case ex.Name == r.Name && r.Action != ratelimit.ActionSkip:
			out = append(out, fmt.Sprintf("rule %q replaces the exemption %q of the default tier: requests it exempted (%s) are now counted", r.Name, ex.Name, describeMatch(ex.Match)))
		case ex.Name == r.Name:
		case slices.ContainsFunc(higher, func(t []ratelimit.Rule) bool {
			return slices.ContainsFunc(t, func(h ratelimit.Rule) bool { return h.Name == ex.Name })
		}):
			// Replaced: the replacing rule is warned about if it counts.
		case r.Action != ratelimit.ActionSkip && overlaps(r.Match, ex.Match):
			out = append(out, fmt.Sprintf("rule %q matches requests that the default exemption %q skips (%s); the exemption still holds for them (override it by name to count them)", r.Name, ex.Name, describeMatch(ex.Match)))
		}
	}
	return out
}

// overlaps reports whether a request could match both a and b: every key
// they share must be able to hold one value accepted by both. A regex
// overlaps a set of values when it matches one of them; two regexes are
// assumed to overlap.
func overlaps(a, b map[string]ratelimit.Matcher) bool {
	for k, ma := range a {
		mb, ok := b[k]
		if !ok {
			continue
		}
		va, vb := values(k, ma), values(k, mb)
		var shared bool
		switch {
		case va == nil && vb == nil:
			shared = true // two regexes: may match
		case va == nil:
			shared = slices.ContainsFunc(vb, func(v string) bool { return accepts(k, ma, v) })
		case vb == nil:
			shared = slices.ContainsFunc(va, func(v string) bool { return accepts(k, mb, v) })
		default:
			shared = slices.ContainsFunc(va, func(v string) bool { return slices.Contains(vb, v) })
		}
		if !shared {
			return false
		}
	}
	return true
}

// accepts reports whether a Match entry of key on m lets the value v
// through, as the limiter evaluates it: on the method, a matcher that
// accepts GET accepts HEAD too (ratelimit.PropertyMethod).
func accepts(key string, m ratelimit.Matcher, v string) bool {
	return m.Matches(v) || (key == ratelimit.PropertyMethod && v == "HEAD" && m.Matches("GET"))
}

// values returns the values a matcher of key accepts, nil for a regex. A
// match on GET also accepts HEAD (ratelimit.PropertyMethod).
func values(key string, m ratelimit.Matcher) []string {
	var vs []string
	switch {
	case m.IsEqual():
		vs = []string{m.Value()}
	case m.IsOneOf():
		vs = m.Values()
		if vs == nil {
			return []string{} // an empty set: overlaps nothing
		}
	default:
		return nil
	}
	if key == ratelimit.PropertyMethod && slices.Contains(vs, "GET") && !slices.Contains(vs, "HEAD") {
		vs = append(slices.Clip(vs), "HEAD")
	}
	return vs
}

func describeMatch(m map[string]ratelimit.Matcher) string {
	if len(m) == 0 {
		return "every request"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + m[k].String()
	}
	return strings.Join(parts, ", ")
}

// Rule is a rule with the tier it comes from.
type Rule struct {
	Tier string
	Rule ratelimit.Rule
	// OverriddenBy names the higher tier holding a rule of the same name,
	// which replaces this one (and inherits its counter); "" for a rule the
	// limiter evaluates.
	OverriddenBy string
	// Exemption marks a default-tier exemption that holds against every
	// tier: the limiter evaluates it first.
	Exemption bool
}

// Rules lists every tier's rules, highest tier first after the exemptions
// that hold (which the limiter evaluates first), marking those a higher tier
// overrides. The rules with an empty OverriddenBy, in order, are exactly
// s.Merged().
func (s Set) Rules() []Rule {
	tiers := []struct {
		name  string
		rules []ratelimit.Rule
	}{{Remote, s.Remote}, {File, s.File}, {Published, s.Published}, {Default, s.Defaults}}
	owner := map[string]string{} // rule name -> highest tier holding it
	held := heldExemptions([][]ratelimit.Rule{s.Remote, s.File, s.Published, s.Defaults})
	var out []Rule
	exemptions := Exemptions(s.Defaults)
	for _, r := range exemptions {
		if held[r.Name] {
			out = append(out, Rule{Tier: Default, Rule: r, Exemption: true})
		}
	}
	for _, tier := range tiers {
		for i, r := range tier.rules {
			if tier.name == Default && i < len(exemptions) && held[r.Name] {
				continue // listed first
			}
			out = append(out, Rule{Tier: tier.name, Rule: r, OverriddenBy: owner[r.Name]})
		}
		for _, r := range tier.rules {
			if _, ok := owner[r.Name]; !ok {
				owner[r.Name] = tier.name
			}
		}
	}
	return out
}
