package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The bash script, sourced by a real bash, completes commands and a
// command's flags; zsh and fish scripts name every command.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	code, script, stderr := ratekit(t, dir, "completion", "bash")
	if code != 0 || stderr != "" {
		t.Fatalf("completion bash: exit %d\n%s", code, stderr)
	}
	path := filepath.Join(dir, "ratekit.bash")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		words string
		want  string
	}{
		{"ratekit cl", "clear"},
		{"ratekit co", "completion"},
		{"ratekit clear --lim", "--limiter"},
		{"ratekit rules pu", "publish"},
		{"ratekit rules publish --dry", "--dry-run"},
		{"ratekit admin --serv", "--service"},
		{"ratekit rules rem", "remove"},
		{"ratekit rollout ga", "gate"},
	} {
		words := strings.Fields(tt.words)
		cmd := exec.Command("bash", "-c", `source "$1"; COMP_WORDS=(${@:2}); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _ratekit; echo "${COMPREPLY[*]}"`, "bash", path)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tt.want {
			t.Errorf("%q: completed %q (%v), want %q", tt.words, out, err, tt.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		code, script, _ := ratekit(t, dir, "completion", shell)
		for _, cmd := range []string{"clear", "explain", "rules", "validate", "--limiter"} {
			if code != 0 || !strings.Contains(script, cmd) && !strings.Contains(script, strings.TrimPrefix(cmd, "--")) {
				t.Errorf("completion %s: exit %d, lacks %s", shell, code, cmd)
			}
		}
	}
	if _, script, _ := ratekit(t, dir, "completion", "fish"); !strings.Contains(script, "-a 'list show publish delete remove gc'") ||
		!strings.Contains(script, "__fish_seen_subcommand_from rollout' -a 'gate'") {
		t.Errorf("completion fish lacks a subcommand of rules or rollout:\n%s", script)
	}
	// The completed rules subcommands are those its help lists.
	listed, _, _ := strings.Cut(strings.SplitN(rulesUsage, "\ncommands:\n", 2)[1], "\nflags:")
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z]+)\b`).FindAllStringSubmatch(listed, -1) {
		documented = append(documented, m[1])
	}
	if !slices.Equal(documented, rulesCommands) {
		t.Errorf("rules help lists %q, completion offers %q", documented, rulesCommands)
	}
	if code, _, stderr := ratekit(t, dir, "completion", "tcsh"); code != 2 || !strings.Contains(stderr, `no completion for shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, stderr)
	}
}
