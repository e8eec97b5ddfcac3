package ratelimit

import "github.com/ratekit/ratekit/internal/keys"

// setMember returns the member a distinct-count rule stores for value v,
// bounded in size (see keys.Member).
func setMember(v string) string { return keys.Member(v) }
