package observe

import (
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Tier names, highest precedence first (docs/design.md#tiers).
const (
	TierRemote    = "remote"    // per-request rules from the rules service (Phase 3)
	TierFile      = "file"      // rate_limits.yaml, deployed by operators
	TierPublished = "published" // published into Redis at runtime
	TierDefault   = "default"   // the application's own rules (available_limiters.yaml)
)

// Tiers is a snapshot of one limiter's rule tiers as a rule store holds them.
type Tiers struct {
	Remote    []ratelimit.Rule
	File      []ratelimit.Rule
	Published []ratelimit.Rule
	Defaults  []ratelimit.Rule
	// RefreshedAt is the last successful refresh of the published tier from
	// Redis; zero when none succeeded yet (the limiter runs on its other tiers).
	RefreshedAt time.Time
	// RefreshErr is the error of the last refresh, nil when it succeeded.
	RefreshErr error
}

// TierSource gives the tiers of a limiter, for the debug page and explain.
// The rule store implements it; ok is false for a limiter it does not manage.
type TierSource interface {
	Tiers(limiter string) (t Tiers, ok bool)
}

// TieredRule is a rule with the tier it comes from.
type TieredRule struct {
	Tier string
	Rule ratelimit.Rule
	// OverriddenBy names the higher tier holding a rule of the same name, which
	// replaces this one (and inherits its counter); "" for an effective rule.
	OverriddenBy string
}

// Rules lists every tier's rules, highest tier first, marking those a higher
// tier overrides. The rules with an empty OverriddenBy, in order, are exactly
// ratelimit.MergeTiers(t.Remote, t.File, t.Published, t.Defaults).
func (t Tiers) Rules() []TieredRule {
	tiers := []struct {
		name  string
		rules []ratelimit.Rule
	}{{TierRemote, t.Remote}, {TierFile, t.File}, {TierPublished, t.Published}, {TierDefault, t.Defaults}}
	owner := map[string]string{} // rule name -> highest tier holding it
	var out []TieredRule
	for _, tier := range tiers {
		for _, r := range tier.rules {
			out = append(out, TieredRule{Tier: tier.name, Rule: r, OverriddenBy: owner[r.Name]})
		}
		for _, r := range tier.rules {
			if _, ok := owner[r.Name]; !ok {
				owner[r.Name] = tier.name
			}
		}
	}
	return out
}
