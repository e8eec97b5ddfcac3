package config

import (
	"fmt"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// ModeWord returns the config-file spelling of a limiter mode: "enforce",
// "shadow", or "" when unset.
func ModeWord(m configv1.Mode) string {
	switch m {
	case configv1.Mode_MODE_ENFORCE:
		return ratelimit.Enforce.String()
	case configv1.Mode_MODE_SHADOW:
		return ratelimit.Shadow.String()
	}
	return ""
}

// ParseEnforcement parses a limiter mode in its config-file spelling,
// "enforce" or "shadow".
func ParseEnforcement(s string) (ratelimit.Enforcement, error) {
	switch s {
	case "enforce":
		return ratelimit.Enforce, nil
	case "shadow":
		return ratelimit.Shadow, nil
	}
	return ratelimit.Enforce, fmt.Errorf("unknown limiter mode %q (want enforce or shadow)", s)
}

// ModeFromProto converts a rule list's mode; ok is false when it is unset (or
// not a known value), leaving the mode to the next tier.
func ModeFromProto(m configv1.Mode) (e ratelimit.Enforcement, ok bool) {
	switch m {
	case configv1.Mode_MODE_ENFORCE:
		return ratelimit.Enforce, true
	case configv1.Mode_MODE_SHADOW:
		return ratelimit.Shadow, true
	}
	return ratelimit.Enforce, false
}

// ModeToProto converts a limiter mode to the schema's enum.
func ModeToProto(e ratelimit.Enforcement) configv1.Mode {
	if e == ratelimit.Shadow {
		return configv1.Mode_MODE_SHADOW
	}
	return configv1.Mode_MODE_ENFORCE
}

// Mode returns the mode rate_limits.yaml sets for a limiter
// (`limiter: {mode: shadow, rules: [...]}`), or MODE_UNSPECIFIED.
func (r *RateLimits) Mode(limiter string) configv1.Mode {
	if r == nil {
		return configv1.Mode_MODE_UNSPECIFIED
	}
	return r.Proto.GetRateLimits()[limiter].GetMode()
}
