package copiertest

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPublish checks publish.sh: one tagged commit per release whose tree is
// the template, and refusals that protect a repository.
func TestPublish(t *testing.T) {
	repo := filepath.Join(work, "publish", "repo")
	for _, v := range []string{"1.0.0", "v1.1.0"} {
		if out, err := publish(templateDir, repo, v); err != nil {
			t.Fatalf("publish %s: %v\n%s", v, err, out)
		}
	}
	if tags := run(t, repo, nil, "git", "tag", "--list"); tags != "v1.0.0\nv1.1.0\n" {
		t.Errorf("tags = %q, want v1.0.0 and v1.1.0", tags)
	}
	files := run(t, repo, nil, "git", "ls-tree", "-r", "--name-only", "v1.1.0")
	for _, want := range []string{"copier.yml", "publish.sh", "migrations/rename_limiter.py", "template/available_limiters.yaml.jinja", "template/{{ _copier_conf.answers_file }}.jinja"} {
		if !strings.Contains(files, want+"\n") {
			t.Errorf("published tree lacks %s:\n%s", want, files)
		}
	}
	if mode := run(t, repo, nil, "git", "ls-tree", "v1.1.0", "template/scripts/validate-rate-limits.sh.jinja"); !strings.HasPrefix(mode, "100755") {
		t.Errorf("the validation script lost its executable bit: %s", mode)
	}

	// Scratch targets only: a failed refusal empties the target.
	other := filepath.Join(work, "publish", "other-repo")
	write(t, filepath.Join(other, "main.go"), "package main\n")
	gitCommitAll(t, other, "not a template")
	plain := filepath.Join(work, "publish", "plain-dir")
	write(t, filepath.Join(plain, "notes.txt"), "keep me\n")
	for _, c := range []struct {
		name, repo, version, want string
	}{
		{"existing tag", repo, "1.1.0", "already has tag v1.1.0"},
		{"not a version", repo, "latest", "is not a release number"},
		{"not a template repository", other, "9.0.0", "not a template repository"},
		{"non-empty directory", plain, "9.0.0", "is not empty and is not a git repository"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := publish(templateDir, c.repo, c.version)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("publish.sh %s %s: err %v, output %q; want a refusal with %q", c.repo, c.version, err, out, c.want)
			}
		})
	}
	if read(t, filepath.Join(other, "main.go")) != "package main\n" || read(t, filepath.Join(plain, "notes.txt")) != "keep me\n" {
		t.Error("a refused publish changed its target")
	}
	write(t, filepath.Join(repo, "stray.txt"), "uncommitted")
	if out, err := publish(templateDir, repo, "2.0.0"); err == nil || !strings.Contains(out, "has uncommitted changes") {
		t.Errorf("publish.sh into a dirty repository: err %v, output %q", err, out)
	}
}

// TestPublishRatekitDefault checks what publish.sh records as the default
// source of ratekit: a release with --ratekit-version (services `go get` it
// and replace nothing), and a refusal of a path that is no ratekit checkout.
func TestPublishRatekitDefault(t *testing.T) {
	repo := filepath.Join(work, "publish-release", "repo")
	if out, err := publish(templateDir, repo, "3.0.0", "--ratekit-version", "v1.2.3"); err != nil {
		t.Fatalf("publish --ratekit-version: %v\n%s", err, out)
	}
	dst := filepath.Join(work, "publish-release", "svc_release")
	copierCopy(t, repo, dst, nil)
	if answers := read(t, filepath.Join(dst, ".copier-answers.yml")); !strings.Contains(answers, "ratekit_path: ''") || !strings.Contains(answers, "ratekit_version: v1.2.3") {
		t.Errorf("answers of a copy from a release-default template:\n%s", answers)
	}
	tidy := run(t, dst, nil, "make", "-n", "tidy")
	if !strings.Contains(tidy, "go get github.com/ratekit/ratekit@v1.2.3") || strings.Contains(tidy, "-replace=") {
		t.Errorf("make tidy of a release-default service:\n%s", tidy)
	}

	for _, c := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"not a checkout", []string{"--ratekit-path", work}, "is not a ratekit checkout"},
		{"both", []string{"--ratekit-path", repoRoot, "--ratekit-version", "v1.2.3"}, "not both"},
		{"bad version", []string{"--ratekit-version", "1.2"}, "is not a semantic version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := publish(templateDir, repo, "3.1.0", c.flags...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("publish.sh %v: err %v, output %q; want a refusal with %q", c.flags, err, out, c.want)
			}
		})
	}
}
