package ratelimit

import "github.com/ratekit/ratekit/internal/keys"

// Counter keys look like <prefix>{<limiter>:<rule>:<prop>=<value>...}, with
// ":ban" appended for a ban and ":set" for a distinct-value set; the braces are
// a Redis Cluster hash tag, so a counter and its ban share a slot. The encoding
// (escaping, hashing of long values, the per-rule keys.Plan a compiled rule
// keeps) lives in internal/keys, shared with the stores and the tools.

const banSuffix = keys.BanSuffix

func newKeyPlan(r *Rule) keys.Plan {
	return keys.NewPlan(r.Name, r.Characteristics, keys.Suffix(r.CountDistinct != "", string(r.Algorithm)))
}

// counterKey builds the key of one rule for one identifier.
func counterKey(prefix, limiter string, r *Rule, id Identifier) string {
	k, _ := keys.Counter(prefix, limiter, r.Name, r.Characteristics, keys.Suffix(r.CountDistinct != "", string(r.Algorithm)), id)
	return k
}
