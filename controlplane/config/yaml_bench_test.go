package config

import (
	"fmt"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

// rateLimitsYAML is a rate_limits.yaml of n rules for the pipelines_create
// limiter of testdata/available_limiters.yaml, each with a description, a
// match on a plain value and one on a regex.
func rateLimitsYAML(n int) []byte {
	var b strings.Builder
	b.WriteString("rate_limits:\n  pipelines_create:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - name: rule_%d\n      description: \"débit limité — 制限\"\n      limit: %d\n      period_s: 60\n"+
			"      action: limit\n      characteristics: [project_path, username]\n"+
			"      match:\n        root_namespace_plan: free\n        sha: {regex: '^[0-9a-f]+$'}\n", i, 100+i)
	}
	return []byte(b.String())
}

// BenchmarkParseRateLimits reads rate_limits.yaml files of growing size: the
// YAML path shares the schema walk and the checks of stored documents.
func BenchmarkParseRateLimits(b *testing.B) {
	available, err := LoadAvailableLimiters("testdata/available_limiters.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{100, ratelimit.MaxRulesPerTier} {
		data := rateLimitsYAML(n)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRateLimits("rate_limits.yaml", data, available); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
