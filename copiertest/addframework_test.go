package copiertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpdateAddsFramework renders the previous release with net/http, runs
// `make tidy` and commits as a service team would (go.mod then holds the
// require blocks tidy wrote), and updates to the current release adding gRPC.
// Release 2.0.0 templated go.mod's require block, which tidy also writes, so
// this update conflicted there; the current release never rewrites go.mod and
// `make tidy` adds the gRPC adapter instead. Release 2.0.0 is built against
// the ratekit it was released with (its code imports packages that have
// moved since), and the update moves the service to this checkout's, as
// `--data ratekit_path=...` does for a service that upgrades both.
func TestUpdateAddsFramework(t *testing.T) {
	prevSrc := filepath.Join(work, "addfw", "template-previous-src")
	previousTemplate(t, prevSrc)
	prevRatekit := filepath.Join(work, "addfw", "ratekit-previous")
	previousRatekit(t, prevRatekit)
	repo := filepath.Join(work, "addfw", "template")
	for _, rel := range []struct{ src, version string }{{prevSrc, previousVersion}, {templateDir, currentVersion}} {
		if out, err := publish(rel.src, repo, rel.version); err != nil {
			t.Fatalf("publish %s: %v\n%s", rel.version, err, out)
		}
	}

	svc := filepath.Join(work, "addfw", "svc_addfw")
	copierCopy(t, repo, svc, map[string]string{"frameworks": "[nethttp]", "ratekit_path": prevRatekit}, "--vcs-ref", "v"+previousVersion)
	env := projectEnv("REDIS_URL")
	run(t, svc, env, "make", "tidy", "build")
	if !strings.Contains(read(t, filepath.Join(svc, "go.mod")), "github.com/prometheus/client_golang") {
		t.Fatalf("make tidy of release %s did not write the require block", previousVersion)
	}
	gitCommitAll(t, svc, "copier copy v"+previousVersion+", make tidy")

	out := run(t, svc, gitEnv(), "copier", "update", "--trust", "--defaults", "--data", "frameworks=[nethttp, grpc]",
		"--data", "ratekit_path="+repoRoot)

	if bad := conflictMarkers(t, svc); len(bad) > 0 {
		t.Fatalf("update left conflicts in %v\n%s", bad, out)
	}
	answers := read(t, filepath.Join(svc, ".copier-answers.yml"))
	for _, want := range []string{"_commit: v" + currentVersion, "- grpc\n"} {
		if !strings.Contains(answers, want) {
			t.Errorf("answers after update lack %q:\n%s", want, answers)
		}
	}
	if _, err := os.Stat(filepath.Join(svc, "internal", "server", "grpc.go")); err != nil {
		t.Errorf("the update did not add the gRPC server: %v", err)
	}
	if diff := run(t, svc, gitEnv(), "git", "diff", "HEAD", "--", "go.mod", "go.sum"); diff != "" {
		t.Errorf("copier update changed go.mod or go.sum, which belong to the service:\n%s", diff)
	}
	if !strings.Contains(out, "make tidy") {
		t.Errorf("copier update did not tell to run make tidy:\n%s", out)
	}

	run(t, svc, env, "make", "tidy", "build", "vet", "validate-rate-limits")
	checkGoMod(t, "example.com/svc_addfw", []string{"nethttp", "grpc"}, svc)
	test := run(t, svc, env, "go", "test", "-count=1", "-v", "./...")
	for _, name := range []string{"TestNetHTTP", "TestGRPC", "TestBuiltInAvailableLimiters", "TestShippedFiles"} {
		if !strings.Contains(test, "--- PASS: "+name+" ") {
			t.Errorf("generated test %s did not pass after the update:\n%s", name, test)
		}
	}
}
