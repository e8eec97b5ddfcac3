package config

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	ratelimit "github.com/ratekit/ratekit/core"
)

// TestExemptionWarningsGRPC: a full method ("/pkg.Service/Method") carries
// its service as grpc_service (identifiers.GRPCMethod), so a rule on one
// property and an exemption on the other overlap only where the method's
// service is the exempt one. The warning compared shared keys only, so a
// rule on another service's method was told the health exemption skips it.
func TestExemptionWarningsGRPC(t *testing.T) {
	tests := []struct {
		name       string
		exemption  string // the default skip rule's match
		rule       string // the rate_limits.yaml rule's match
		wantWarned bool
	}{
		{"service exempt, method of another service", `{grpc_service: grpc.health.v1.Health}`,
			`{grpc_method: /svc.v1.Admin/Reindex}`, false},
		{"service exempt, methods of other services", `{grpc_service: grpc.health.v1.Health}`,
			`{grpc_method: {one_of: [/svc.v1.Admin/Reindex, /svc.v1.Search/Query]}}`, false},
		{"service exempt, a method of it", `{grpc_service: grpc.health.v1.Health}`,
			`{grpc_method: {one_of: [/svc.v1.Admin/Reindex, /grpc.health.v1.Health/Watch]}}`, true},
		{"service regex exempt, method it matches", `{grpc_service: {regex: "^grpc\\.health\\."}}`,
			`{grpc_method: /grpc.health.v1.Health/Check}`, true},
		{"service regex exempt, method it misses", `{grpc_service: {regex: "^grpc\\.health\\."}}`,
			`{grpc_method: /svc.v1.Admin/Reindex}`, false},
		{"service exempt, method regex", `{grpc_service: grpc.health.v1.Health}`,
			`{grpc_method: {regex: "^/svc\\."}}`, true}, // not decided: assumed to overlap
		{"method exempt, another service", `{grpc_method: /grpc.health.v1.Health/Check}`,
			`{grpc_service: svc.v1.Admin}`, false},
		{"method exempt, its service", `{grpc_method: /grpc.health.v1.Health/Check}`,
			`{grpc_service: grpc.health.v1.Health}`, true},
		{"service exempt, rule on another property", `{grpc_service: grpc.health.v1.Health}`,
			`{user: alice}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			available := mustAvailable(t, fmt.Sprintf(`available_limiters:
  grpc_request:
    description: gRPC calls
    available_properties: [user, grpc_service, grpc_method]
    default_rules:
      - name: skip_health_checks
        action: skip
        match: %s
`, tt.exemption))
			rl, err := ParseRateLimits("r.yaml", []byte(fmt.Sprintf(`rate_limits:
  grpc_request:
    - name: per_user
      characteristics: [user]
      limit: 5
      period_s: 60
      action: limit
      match: %s
`, tt.rule)), available)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := rl.ExemptionWarnings(available)
			if warned := len(got) != 0; warned != tt.wantWarned {
				t.Fatalf("warnings %v, want warned %v", got, tt.wantWarned)
			}
			// The same of the rules as core rules, as the admin page
			// shows them for every tier.
			rules, err := rl.Rules("grpc_request")
			if err != nil {
				t.Fatal(err)
			}
			defaults, err := available.DefaultRules("grpc_request")
			if err != nil {
				t.Fatal(err)
			}
			if msgs := ShadowedExemptions(rules[0], defaults, rules); (len(msgs) != 0) != tt.wantWarned {
				t.Fatalf("ShadowedExemptions %q, want warned %v", msgs, tt.wantWarned)
			}
		})
	}
}

// TestExemptionWarningsBounded: every rule that matches what an exemption
// skips repeats its match in a warning, so an exemption of 100 KB and 256
// rules made 25 MB of warnings (an exemption of 0.8 MiB made 204 MB). They
// are bounded like a ValidationError's problems: the first
// MaxReportedErrors, and each quotes a cut match.
func TestExemptionWarningsBounded(t *testing.T) {
	var values, rules strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&values, "%q, ", fmt.Sprintf("/p%04d%s", i, strings.Repeat("x", 95)))
	}
	for i := range ratelimit.MaxRulesPerTier {
		fmt.Fprintf(&rules, "    - {name: r%d, action: log, limit: 1, period_s: 1}\n", i)
	}
	available := mustAvailable(t, `available_limiters:
  api:
    description: HTTP requests
    available_properties: [path]
    default_rules:
      - name: skip_health_checks
        action: skip
        match: {path: {one_of: [`+values.String()+`]}}
`)
	rl, err := ParseRateLimits("r.yaml", []byte("rate_limits:\n  api:\n"+rules.String()), available)
	if err != nil {
		t.Fatal(err)
	}
	got, omitted := rl.ExemptionWarnings(available)
	if len(got) != MaxReportedErrors || omitted != ratelimit.MaxRulesPerTier-MaxReportedErrors {
		t.Errorf("%d warnings and %d omitted, want %d and %d", len(got), omitted, MaxReportedErrors, ratelimit.MaxRulesPerTier-MaxReportedErrors)
	}
	if got[0].Rule != "r0" || got[0].Line != 3 {
		t.Errorf("first warning %v, want r0's at line 3", got[0])
	}
	for _, w := range got {
		if n := utf8.RuneCountInString(w.Message); n > maxWarningLen+3 {
			t.Fatalf("a warning of %d characters, want at most %d and \"...\": %.200s", n, maxWarningLen, w.Message)
		}
		// The cut leaves out the match: what to do stays.
		if !strings.HasSuffix(w.Message, "(override it by name to count them)") {
			t.Fatalf("a cut warning lost its end: %s", w.Message)
		}
	}
}

// A skip rule without a match (an exemption whose match an operator emptied,
// or left out) before every counting rule of its list leaves nothing after
// it to count: validate and publish warned about nothing. It is warned
// about, at its line, on every limiter (exemptions or not); a skip rule with
// a match is not, nor one that ends a list after counting rules (the
// design's "skip the application's defaults").
func TestSkipWithoutMatchWarned(t *testing.T) {
	available := mustAvailable(t, `available_limiters:
  http_request:
    description: requests
    available_properties: [ip, path]
    allowed_skip_rules: [skip_health_checks, skip_internal, skip_internal_after]
    default_rules:
      - name: skip_health_checks
        action: skip
        match: {path: /healthz}
  jobs:
    description: jobs
    available_properties: [queue]
    allowed_skip_rules: [skip_all]
`)
	rl, err := ParseRateLimits("r.yaml", []byte(`rate_limits:
  http_request:
    - name: skip_internal
      action: skip
      match: {ip: 10.0.0.1}
    - name: skip_health_checks
      action: skip
      match: {}
    - name: per_ip
      characteristics: [ip]
      limit: 10
      period_s: 60
      action: limit
    - name: skip_internal_after
      action: skip
  jobs:
    - name: skip_all
      action: skip
`), available)
	if err != nil {
		t.Fatal(err)
	}
	got, omitted := rl.ExemptionWarnings(available)
	var lines []string
	for _, w := range got {
		lines = append(lines, w.Error())
	}
	want := []string{
		"r.yaml:6:7: http_request/skip_health_checks: skip rule skip_health_checks has no match and comes before every counting rule of its list: every request that reaches it is skipped, so neither the rules after it nor a lower tier's count or block; to stop blocking but keep counting, set the limiter's mode: shadow",
		"r.yaml:17:7: jobs/skip_all: skip rule skip_all has no match and comes before every counting rule of its list: every request that reaches it is skipped, so neither the rules after it nor a lower tier's count or block; to stop blocking but keep counting, set the limiter's mode: shadow",
	}
	if omitted != 0 || strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings (%d omitted):\n%s\nwant:\n%s", omitted, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
