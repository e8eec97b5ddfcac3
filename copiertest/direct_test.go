package copiertest

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDirectCopyFromCheckout copies copier-template/ straight from this
// checkout (not a published template repository): the service builds
// against this checkout, and copier's message says that `copier update`
// cannot follow such a copy and what to run instead.
func TestDirectCopyFromCheckout(t *testing.T) {
	dst := filepath.Join(work, "direct", "svc_direct")
	out := copierCopy(t, templateDir, dst, map[string]string{"frameworks": "[nethttp]"})
	if answers := read(t, filepath.Join(dst, ".copier-answers.yml")); !strings.Contains(answers, "ratekit_path: "+repoRoot+"\n") {
		t.Fatalf("a direct copy does not build against its checkout %s:\n%s", repoRoot, answers)
	}
	for _, want := range []string{"NOTE: this copy comes straight from a directory", "copier update` cannot follow it", templateDir + "/publish.sh"} {
		if !strings.Contains(out, want) {
			t.Errorf("copier's message lacks %q:\n%s", want, out)
		}
	}
	env := projectEnv("REDIS_URL")
	run(t, dst, env, "make", "tidy")
	run(t, dst, env, "go", "build", "./...")
}

// TestTidyRefusesANonCheckout: a ratekit_path that is no ratekit checkout
// stops `make tidy` with what to answer instead.
func TestTidyRefusesANonCheckout(t *testing.T) {
	dst := filepath.Join(work, "direct", "svc_notcheckout")
	copierCopy(t, templateRepo, dst, map[string]string{"frameworks": "[nethttp]", "ratekit_path": work})
	out, err := command(dst, projectEnv("REDIS_URL"), "make", "tidy")
	if err == nil || !strings.Contains(out, "is not a ratekit checkout") || !strings.Contains(out, "--data ratekit_path=") {
		t.Fatalf("make tidy with ratekit_path=%s: %v\n%s", work, err, out)
	}
}

// TestUpdateReportsConflicts: an update whose change meets the service's own
// change on the same line says so plainly, naming the file and line.
func TestUpdateReportsConflicts(t *testing.T) {
	v1Src := filepath.Join(work, "conflict", "template-v1-src")
	copyDir(t, templateDir, v1Src)
	readme := filepath.Join(v1Src, "template", "README.md.jinja")
	edit(t, readme, "# {{ service_name }}\n", "# {{ service_name }} (v1)\n")
	repo := filepath.Join(work, "conflict", "template")
	for _, rel := range []struct{ src, version string }{{v1Src, "1.0.0"}, {templateDir, currentVersion}} {
		if out, err := publish(rel.src, repo, rel.version); err != nil {
			t.Fatalf("publish %s: %v\n%s", rel.version, err, out)
		}
	}
	svc := filepath.Join(work, "conflict", "svc_conflict")
	copierCopy(t, repo, svc, map[string]string{"frameworks": "[nethttp]", "ratekit_path": repoRoot}, "--vcs-ref", "v1.0.0")
	gitCommitAll(t, svc, "copier copy v1.0.0")
	edit(t, filepath.Join(svc, "README.md"), "# svc_conflict (v1)\n", "# svc_conflict: our billing service\n")
	gitCommitAll(t, svc, "service changes")

	out := run(t, svc, gitEnv(), "copier", "update", "--trust", "--defaults")
	for _, want := range []string{"CONFLICTS: copier update could not merge 1 change(s)", "  README.md:", "make tidy build test validate-rate-limits"} {
		if !strings.Contains(out, want) {
			t.Errorf("copier update's output lacks %q:\n%s", want, out)
		}
	}
}
