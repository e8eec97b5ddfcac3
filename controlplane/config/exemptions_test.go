package config

import (
	"fmt"
	"testing"
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
			got := rl.ExemptionWarnings(available)
			if warned := len(got) != 0; warned != tt.wantWarned {
				t.Fatalf("warnings %v, want warned %v", got, tt.wantWarned)
			}
		})
	}
}
