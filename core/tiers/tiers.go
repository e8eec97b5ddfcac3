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
package tiers

import (
	"errors"
	"fmt"
	"slices"

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
// that a holder can hand it out while it keeps changing its own.
func (s Set) Clone() Set {
	c := Set{Remote: slices.Clone(s.Remote), File: slices.Clone(s.File),
		Published: slices.Clone(s.Published), Defaults: slices.Clone(s.Defaults)}
	if s.Mode != nil {
		m := *s.Mode
		c.Mode = &m
	}
	return c
}

// Merge builds one evaluation list from rule tiers given highest first
// (remote ++ file ++ published ++ default). A rule whose name appears in a
// higher tier removes the lower tiers' rules of that name; the survivor keeps
// the name, and so the counter. Rules keep their order within their tier.
func Merge(tiers ...[]ratelimit.Rule) []ratelimit.Rule {
	seen := map[string]bool{}
	var out []ratelimit.Rule
	for _, t := range tiers {
		for _, r := range t {
			if seen[r.Name] {
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

// Rule is a rule with the tier it comes from.
type Rule struct {
	Tier string
	Rule ratelimit.Rule
	// OverriddenBy names the higher tier holding a rule of the same name,
	// which replaces this one (and inherits its counter); "" for a rule the
	// limiter evaluates.
	OverriddenBy string
}

// Rules lists every tier's rules, highest tier first, marking those a higher
// tier overrides. The rules with an empty OverriddenBy, in order, are exactly
// s.Merged().
func (s Set) Rules() []Rule {
	tiers := []struct {
		name  string
		rules []ratelimit.Rule
	}{{Remote, s.Remote}, {File, s.File}, {Published, s.Published}, {Default, s.Defaults}}
	owner := map[string]string{} // rule name -> highest tier holding it
	var out []Rule
	for _, tier := range tiers {
		for _, r := range tier.rules {
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
