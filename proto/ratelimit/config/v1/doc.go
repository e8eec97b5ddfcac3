// Package configv1 is the generated Go of ratelimit.config.v1
// (proto/ratelimit/config/v1/config.proto): the schema of
// available_limiters.yaml (AvailableLimiters), rate_limits.yaml (RateLimits),
// the rule store's document of a limiter (LimiterRules) and a publish request
// (PublishRulesRequest), with the protovalidate rules every path enforces
// (docs/design.md#configuration-files).
//
// Read a file through package github.com/ratekit/ratekit/controlplane/config,
// which walks the YAML against this schema, validates it and the
// cross-document checks, and converts the rules to ratelimit.Rule:
//
//	available, err := config.LoadAvailableLimiters("available_limiters.yaml")
//	if err != nil {
//		return err // FILE:LINE:COL: limiter/rule: message
//	}
//	spec := available.Spec("user_sign_in") // a *configv1.LimiterSpec
//	fmt.Println(spec.GetAvailableProperties())
//
// Regenerate with scripts/gen-proto.sh; do not edit the .pb.go files.
package configv1
