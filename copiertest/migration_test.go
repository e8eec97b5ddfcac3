package copiertest

import (
	"path/filepath"
	"strings"
	"testing"
)

// renameLimiter runs the template's migration script on dir.
func renameLimiter(dir string) (string, error) {
	return command(dir, nil, "python3", filepath.Join(templateDir, "migrations", "rename_limiter.py"),
		"--from", "db_duration", "--to", "db_utilization", "--project", dir)
}

// TestRenameLimiterMigration checks the migration's edits on the kinds of
// files a service holds, its idempotence and its refusals.
func TestRenameLimiterMigration(t *testing.T) {
	dir := filepath.Join(work, "migration")
	const rules = `# operator rules
rate_limits:
  # the tenant budget
  "db_duration":   # quoted key, comment kept
    - name: db_duration_large # a rule name is not a limiter name
      characteristics: [root_namespace]
      limit: 100
      period_s: 60
      action: limit
      match:
        root_namespace: db_duration
  http_request:
    - name: x
      limit: 1
      period_s: 1
      action: limit
---
available_limiters:
    db_duration:
        description: "four-space indentation"
`
	const manifest = `apiVersion: v1
kind: ConfigMap
data:
  db_duration: "not a rule document"
db_duration: top-level key of another document
`
	write(t, filepath.Join(dir, "deploy", "rate_limits.production.yaml"), rules)
	write(t, filepath.Join(dir, "deploy", "configmap.yaml"), manifest)
	write(t, filepath.Join(dir, "cmd", "main.go"), "package main\n\nconst l = \"db_duration\"\n")

	out, err := renameLimiter(dir)
	if err != nil {
		t.Fatalf("migration failed: %v\n%s", err, out)
	}
	want := strings.NewReplacer(`  "db_duration":   #`, `  "db_utilization":   #`, "\n    db_duration:\n", "\n    db_utilization:\n").Replace(rules)
	if got := read(t, filepath.Join(dir, "deploy", "rate_limits.production.yaml")); got != want {
		t.Errorf("rule file after the migration:\n%s\nwant:\n%s", got, want)
	}
	if got := read(t, filepath.Join(dir, "deploy", "configmap.yaml")); got != manifest {
		t.Errorf("a file that is no rule document changed:\n%s", got)
	}
	if !strings.Contains(out, `warning: cmd/main.go:3: Go code still names limiter "db_duration"`) {
		t.Errorf("no warning about the Go literal:\n%s", out)
	}

	// Idempotent: a second run changes nothing, and says so (a migration
	// that touched nothing never reads as one that did its work).
	out, err = renameLimiter(dir)
	if err != nil || strings.Contains(out, "renamed to") || read(t, filepath.Join(dir, "deploy", "rate_limits.production.yaml")) != want {
		t.Errorf("second run: err %v\n%s", err, out)
	}
	if !strings.Contains(out, `no rule document declares limiter 'db_duration': nothing renamed`) {
		t.Errorf("second run does not say it renamed nothing:\n%s", out)
	}

	// Both names in one document: refused, file untouched.
	both := "rate_limits:\n  db_utilization:\n    - name: a\n      limit: 1\n      period_s: 1\n  db_duration:\n    - name: b\n      limit: 1\n      period_s: 1\n"
	write(t, filepath.Join(dir, "rate_limits.yaml"), both)
	out, err = renameLimiter(dir)
	if err == nil || !strings.Contains(out, "rate_limits.yaml:6: declares both limiters 'db_duration' and 'db_utilization'") {
		t.Errorf("both names: err %v, output:\n%s", err, out)
	}
	if read(t, filepath.Join(dir, "rate_limits.yaml")) != both {
		t.Error("a refused file was changed")
	}

	// Conflict markers left by copier update: refused, file untouched.
	conflicted := "rate_limits:\n<<<<<<< before updating\n  db_duration:\n=======\n  db_utilization:\n>>>>>>> after updating\n    - name: a\n"
	write(t, filepath.Join(dir, "rate_limits.yaml"), conflicted)
	out, err = renameLimiter(dir)
	if err == nil || !strings.Contains(out, "rate_limits.yaml: has merge conflict markers") || read(t, filepath.Join(dir, "rate_limits.yaml")) != conflicted {
		t.Errorf("conflict markers: err %v, output:\n%s", err, out)
	}
}

// TestMovePackagesMigration checks the import rewrites of the service's own
// Go files: only an unaliased import of the debug page gains the alias
// debugpage (its old package name); an aliased one keeps its own.
func TestMovePackagesMigration(t *testing.T) {
	dir := filepath.Join(work, "move-packages")
	const src = `package main

import (
	"github.com/ratekit/ratekit/core/observe/debugpage"
	dp "github.com/ratekit/ratekit/core/observe/debugpage"
	rs "github.com/ratekit/ratekit/core/rulestore"
)

var _, _, _ = debugpage.New, dp.New, rs.New
`
	file := filepath.Join(dir, "cmd", "main.go")
	write(t, file, src)
	out, err := command(dir, nil, "python3", filepath.Join(templateDir, "migrations", "move_packages.py"), "--project", dir)
	if err != nil || !strings.Contains(out, "rewrote the ratekit imports of cmd/main.go") {
		t.Fatalf("migration: err %v\n%s", err, out)
	}
	got := read(t, file)
	for _, want := range []string{"\tdebugpage \"github.com/ratekit/ratekit/pages/debug\"\n", "\tdp \"github.com/ratekit/ratekit/pages/debug\"\n", "\trs \"github.com/ratekit/ratekit/controlplane/rulestore\"\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("after the migration, main.go lacks %q:\n%s", want, got)
		}
	}
	if out, err := command(dir, nil, "gofmt", "-e", "-l", file); err != nil {
		t.Errorf("main.go is no longer Go: %v\n%s\n%s", err, out, got)
	}
}
