package copiertest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The two default rules release 2.0.0 added, as the template renders them.
var v2NewRules = []struct{ file, rule string }{
	{"template/available_limiters.yaml.jinja", "limit_authenticated_requests_by_user"},
	{"template/available_limiters.yaml.jinja", "limit_authenticated_rpcs_by_user_and_method"},
}

// makeV1 writes release 1.0.0 of the template into dir: the current template
// (2.0.0) with 2.0.0's changes undone, namely the cost limiter still named
// db_duration and the two per-user default rules not yet shipped. Each undo
// must find what it undoes, so the test fails if the template drifts.
func makeV1(t *testing.T, dir string) {
	t.Helper()
	copyDir(t, templateDir, dir)
	renamed := 0
	err := filepath.WalkDir(filepath.Join(dir, "template"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		s := read(t, p)
		if n := strings.Count(s, "db_utilization"); n > 0 {
			write(t, p, strings.ReplaceAll(s, "db_utilization", "db_duration"))
			renamed += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if renamed < 3 {
		t.Fatalf("v1: db_utilization renamed %d times, want it in available_limiters, the example and names.go", renamed)
	}
	for _, r := range v2NewRules {
		p := filepath.Join(dir, r.file)
		s := read(t, p)
		start := strings.Index(s, "      - name: "+r.rule+"\n")
		if start < 0 {
			t.Fatalf("v1: rule %s not found in %s", r.rule, r.file)
		}
		end := strings.Index(s[start+1:], "      - name: ")
		if end < 0 {
			t.Fatalf("v1: no rule after %s in %s", r.rule, r.file)
		}
		write(t, p, s[:start]+s[start+1+end:])
	}
}

// TestUpdate renders release 1.0.0 into a git-tracked service, edits the
// service, and updates it to the current release with `copier update`: the new default rules
// arrive, the migration renames db_duration in the service's own rate_limits
// file, the service's edits survive, and the result validates, builds and
// passes its tests.
func TestUpdate(t *testing.T) {
	// The published template repository, with both releases.
	v1Src := filepath.Join(work, "update", "template-v1-src")
	makeV1(t, v1Src)
	repo := filepath.Join(work, "update", "template")
	for _, rel := range []struct{ src, version string }{{v1Src, "1.0.0"}, {templateDir, currentVersion}} {
		if out, err := publish(rel.src, repo, rel.version); err != nil {
			t.Fatalf("publish %s: %v\n%s", rel.version, err, out)
		}
	}

	svc := filepath.Join(work, "update", "svc_updated")
	copierCopy(t, repo, svc, map[string]string{
		"frameworks":   "[nethttp, grpc, echo, gin, asynq]",
		"ratekit_path": repoRoot,
	}, "--vcs-ref", "v1.0.0")
	available := filepath.Join(svc, "available_limiters.yaml")
	v1Available := read(t, available)
	if !strings.Contains(v1Available, "\n  db_duration:\n") || strings.Contains(v1Available, "\n  db_utilization:") ||
		strings.Contains(v1Available, "limit_authenticated_requests_by_user") {
		t.Fatalf("v1.0.0 render is not release 1.0.0:\n%s", v1Available)
	}
	gitCommitAll(t, svc, "copier copy v1.0.0")

	// The service's own changes.
	const ownLimiter = `  user_sign_in: # svc_updated's own limiter
    description: "Enforced before a session is created"
    available_properties: [ip, user]
    default_rules:
      - name: limit_sign_ins_by_ip
        characteristics: [ip]
        limit: 20
        period_s: 60
        action: limit
`
	write(t, available, v1Available+ownLimiter)
	const rateLimitsV1 = `# Operators' rules for svc_updated (kept in the repository).
rate_limits:
  db_duration: # the tenant budget
    - name: db_seconds_large_namespaces
      characteristics: [root_namespace]
      limit: 1200
      period_s: 60
      action: limit
      match:
        root_namespace: {one_of: [acme]}
  user_sign_in:
    - name: limit_sign_ins_by_ip
      characteristics: [ip]
      limit: 10
      period_s: 60
      action: limit
`
	write(t, filepath.Join(svc, "rate_limits.yaml"), rateLimitsV1)
	properties := filepath.Join(svc, "internal", "ratelimits", "properties.go")
	edit(t, properties, "func HTTPProperties(r *http.Request, id ratelimit.Identifier) {}",
		"func HTTPProperties(r *http.Request, id ratelimit.Identifier) {\n\tif ns := r.Header.Get(\"X-Tenant\"); ns != \"\" {\n\t\tid[\"root_namespace\"] = ns\n\t}\n}")
	nethttp := filepath.Join(svc, "internal", "server", "nethttp.go")
	edit(t, nethttp, "\tmux.HandleFunc(\"GET /report\", Report)\n", "\tmux.HandleFunc(\"GET /report\", Report)\n\tmux.HandleFunc(\"GET /orders\", Hello) // svc_updated's route\n")
	write(t, filepath.Join(svc, "internal", "billing", "billing.go"),
		"// Package billing reports to the database-time budget.\npackage billing\n\n// Limiter is the limiter billing charges.\nconst Limiter = \"db_duration\"\n")
	gitCommitAll(t, svc, "service changes")
	run(t, svc, nil, ratekitCLI, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")

	out := run(t, svc, gitEnv(), "copier", "update", "--trust", "--defaults")

	if answers := read(t, filepath.Join(svc, ".copier-answers.yml")); !strings.Contains(answers, "_commit: v"+currentVersion) {
		t.Errorf("answers after update:\n%s", answers)
	}
	if bad := conflictMarkers(t, svc); len(bad) > 0 {
		t.Fatalf("update left conflicts in %v\n%s", bad, out)
	}
	// New defaults and the renamed limiter, in the template's own file.
	got := read(t, available)
	for _, want := range []string{"\n  db_utilization:\n", "- name: limit_authenticated_requests_by_user\n", "- name: limit_authenticated_rpcs_by_user_and_method\n", ownLimiter} {
		if !strings.Contains(got, want) {
			t.Errorf("available_limiters.yaml after update lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\n  db_duration:") {
		t.Errorf("available_limiters.yaml after update still declares db_duration:\n%s", got)
	}
	// The migration, in the service's own file: only the key changed.
	if got, want := read(t, filepath.Join(svc, "rate_limits.yaml")), strings.Replace(rateLimitsV1, "  db_duration: #", "  db_utilization: #", 1); got != want {
		t.Errorf("rate_limits.yaml after the migration:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(out, "rate_limits.yaml: limiter 'db_duration' renamed to 'db_utilization'") {
		t.Errorf("copier update output lacks the migration's report:\n%s", out)
	}
	if !regexp.MustCompile(`warning: internal/billing/billing\.go:5: Go code still names limiter "db_duration"`).MatchString(out) {
		t.Errorf("copier update output lacks the migration's warning about billing.go:\n%s", out)
	}
	if got := read(t, filepath.Join(svc, "internal", "ratelimits", "names.go")); !strings.Contains(got, `DBUtilization = "db_utilization"`) {
		t.Errorf("names.go after update:\n%s", got)
	}
	// The service's edits survived.
	if got := read(t, properties); !strings.Contains(got, `r.Header.Get("X-Tenant")`) {
		t.Errorf("properties.go lost the service's edit:\n%s", got)
	}
	if got := read(t, nethttp); !strings.Contains(got, `mux.HandleFunc("GET /orders", Hello)`) {
		t.Errorf("nethttp.go lost the service's route:\n%s", got)
	}

	// The migrated files validate; without the migration the operator file
	// would not (its limiter no longer exists).
	run(t, svc, nil, ratekitCLI, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	write(t, filepath.Join(work, "update", "rate_limits.unmigrated.yaml"), rateLimitsV1)
	msg, err := command(svc, nil, ratekitCLI, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", filepath.Join(work, "update", "rate_limits.unmigrated.yaml"))
	if err == nil || !strings.Contains(msg, `no limiter "db_duration"`) {
		t.Errorf("the unmigrated rate_limits.yaml validated against 2.0.0 (err %v):\n%s", err, msg)
	}

	env := projectEnv("REDIS_URL")
	run(t, svc, env, "make", "tidy", "build", "validate-rate-limits")
	if out := run(t, svc, env, "go", "test", "-count=1", "./..."); strings.Contains(out, "FAIL") {
		t.Errorf("tests of the updated service:\n%s", out)
	}
}
