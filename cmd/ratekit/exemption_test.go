package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

const exemptAvailable = `available_limiters:
  http_request:
    description: "HTTP requests"
    available_properties: [ip, path]
    allowed_skip_rules: [skip_health_checks]
    default_rules:
      - name: skip_health_checks
        action: skip
        match:
          path: {one_of: [/healthz, /readyz]}
      - name: per_ip
        characteristics: [ip]
        limit: 100
        period_s: 60
        action: limit
`

// incidentYAML is an incident rule matching every request, and one that
// cannot match a health check.
const incidentYAML = `rate_limits:
  http_request:
    - name: api_only
      characteristics: [ip]
      limit: 10
      period_s: 60
      action: limit
      match: {path: /api}
    - name: incident_per_ip
      characteristics: [ip]
      limit: 2
      period_s: 60
      action: limit
      match: {}
`

// TestExemptionWarnings: validate and rules publish --dry-run name the rule
// that matches what the default skip_health_checks exempts, with its line
// (publish named the file alone), and only that one.
func TestExemptionWarnings(t *testing.T) {
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": exemptAvailable, "incident.yaml": incidentYAML})
	want := `http_request/incident_per_ip: rule "incident_per_ip" matches requests that the default exemption "skip_health_checks" skips (path: {one_of: ["/healthz" "/readyz"]})`
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "incident.yaml")
	if code != 0 || stderr != "warning: incident.yaml:9:7: "+want+"; the exemption still holds for them (override it by name to count them)\n" {
		t.Fatalf("validate: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "incident.yaml")
	if code != 0 || !strings.Contains(stdout, `"warnings": [`) || !strings.Contains(stdout, `"rule": "incident_per_ip"`) {
		t.Fatalf("validate --json: exit %d\n%s", code, stdout)
	}
	prefix := redistest.Prefix(t) + "{rules}:"
	code, stdout, stderr = ratekit(t, dir, "rules", "publish", "--dry-run", "--redis", redistest.URL(t), "--rules-prefix", prefix,
		"--file", "incident.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stderr, "warning: incident.yaml:9:7: "+want) || strings.Contains(stderr, "api_only") {
		t.Fatalf("publish --dry-run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// TestExemptionReplacedInTheFile: a file that replaces skip_health_checks by
// name (the copier template's rate_limits.example.yaml does, adding /livez)
// lifts the default exemption, so validate must not warn that it "still
// holds" for the file's other rules; the file's own skip replaces it.
func TestExemptionReplacedInTheFile(t *testing.T) {
	const replaced = `rate_limits:
  http_request:
    - name: skip_health_checks
      action: skip
      match:
        path: {one_of: [/healthz, /readyz, /livez]}
    - name: incident_per_ip
      characteristics: [ip]
      limit: 2
      period_s: 60
      action: limit
      match: {}
`
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": exemptAvailable, "rate_limits.yaml": replaced})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("validate: exit %d, want 0 and no warning\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// The summary lists the skip rules the limiter evaluates: the file's,
	// not the default it replaces.
	if !strings.Contains(stdout, "skip rules: 1 ") || strings.Contains(stdout, "available_limiters.yaml:7:9") {
		t.Errorf("validate lists a replaced default skip rule:\n%s", stdout)
	}
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	if code != 0 || strings.Count(stdout, `"rule": "skip_health_checks"`) != 1 || !strings.Contains(stdout, `"file": "rate_limits.yaml"`) {
		t.Errorf("validate --json: exit %d, want the file's skip rule only:\n%s", code, stdout)
	}
}

// TestExemptionWarningsOmitted: past config.MaxReportedErrors warnings,
// validate says how many it left out, in text and in --json.
func TestExemptionWarningsOmitted(t *testing.T) {
	var rules strings.Builder
	rules.WriteString("rate_limits:\n  http_request:\n")
	for i := range 150 {
		fmt.Fprintf(&rules, "    - {name: r%d, characteristics: [ip], limit: 1, period_s: 1, action: limit}\n", i)
	}
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": exemptAvailable, "many.yaml": rules.String()})
	code, _, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "many.yaml")
	if n := strings.Count(stderr, "\nwarning: many.yaml:"); code != 0 || n != 99 ||
		!strings.HasSuffix(stderr, "warning: ... and 50 more (only the first 100 warnings are reported)\n") {
		t.Fatalf("validate: exit %d, %d warnings after the first\n%s", code, n, stderr)
	}
	code, stdout, _ := ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "many.yaml")
	if code != 0 || strings.Count(stdout, `"rule": "r`) != 100 || !strings.Contains(stdout, `"warnings_omitted": 50`) {
		t.Fatalf("validate --json: exit %d\n%s", code, stdout)
	}
}

// TestExemptionWarningsWithoutAvailable: a publish with
// --skip-available-check (the examples ship no available_limiters.yaml)
// judges the exemptions by the default tier the services seeded in the
// store. It said nothing before, and a published skip_health_checks of
// match {} then answered every health probe 429.
func TestExemptionWarningsWithoutAvailable(t *testing.T) {
	const replaceProbes = `rate_limits:
  http_request:
    - name: skip_health_checks
      characteristics: [ip]
      limit: 1
      period_s: 3600
      action: limit
      match: {}
`
	dir := writeFiles(t, map[string]string{"incident.yaml": incidentYAML, "probes.yaml": replaceProbes})
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(exemptAvailable))
	if err != nil {
		t.Fatal(err)
	}
	local, err := config.Tiers(available, nil, "http_request")
	if err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t) + "{rules}:"
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(context.Background(), map[string]tiers.Set{"http_request": local}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file, want string
	}{
		{"replaces the exemption", "probes.yaml", `warning: probes.yaml:3:7: http_request/skip_health_checks: rule "skip_health_checks" replaces the exemption "skip_health_checks" of the default tier: requests it exempted (path: {one_of: ["/healthz" "/readyz"]}) are now counted`},
		{"matches what it exempts", "incident.yaml", `warning: incident.yaml:9:7: http_request/incident_per_ip: rule "incident_per_ip" matches requests that the default exemption "skip_health_checks" skips`},
	}
	for _, tt := range tests {
		for _, dry := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dry-run=%v", tt.name, dry), func(t *testing.T) {
				args := []string{"rules", "publish", "--redis", redistest.URL(t), "--rules-prefix", prefix, "--file", tt.file, "--skip-available-check"}
				if dry {
					args = append(args, "--dry-run")
				}
				code, stdout, stderr := ratekit(t, dir, args...)
				if code != 0 || !strings.Contains(stderr, tt.want) {
					t.Fatalf("exit %d, want the warning %s\nstdout %s\nstderr %s", code, tt.want, stdout, stderr)
				}
			})
		}
	}
}
