package main

import (
	"strings"
	"testing"
)

// TestRulesPublishMode: an operator flips a limiter to shadow mode with
// `rules publish` (the real binary against the real Redis, standalone and
// cluster); `rules show` tells the mode and its tier, and the published
// rules are untouched.
func TestRulesPublishMode(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := map[bool]string{false: "standalone", true: "cluster"}[cluster]
		t.Run(name, func(t *testing.T) {
			e := newRulesCLI(t, cluster)
			e.dir = writeFiles(t, map[string]string{
				"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
				"shadow.yaml":             "rate_limits:\n  user_sign_in: {mode: shadow, rules: []}\n",
				"enforce.yaml":            "rate_limits:\n  user_sign_in: {mode: enforce, rules: []}\n",
				"bad.yaml":                "rate_limits:\n  user_sign_in: {mode: dry, rules: []}\n",
				"shadow_rule.yaml":        "rate_limits:\n  user_sign_in:\n    mode: shadow\n    rules: [{name: per_ip, characteristics: [ip], limit: 1, period_s: 60, action: limit}]\n",
			})
			if code, stdout, stderr := e.run(t, "publish", "--file", "shadow.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK || !strings.Contains(stdout, "changed: user_sign_in") {
				t.Fatalf("publish shadow: exit %d\n%s%s", code, stdout, stderr)
			}
			code, stdout, _ := e.run(t, "show", "user_sign_in")
			if code != exitOK || !strings.Contains(stdout, "mode: shadow (the highest tier that sets one wins)") ||
				!strings.Contains(stdout, "published_rules (publish API): 0 rules, mode shadow") {
				t.Fatalf("show after shadow: exit %d\n%s", code, stdout)
			}
			if code, stdout, _ := e.run(t, "show", "--json", "user_sign_in"); code != exitOK || strings.TrimSpace(stdout) != `{"published_rules":{"mode":"shadow","rules":[]}}` {
				t.Fatalf("show --json: exit %d %s", code, stdout)
			}
			if code, _, stderr := e.run(t, "publish", "--file", "bad.yaml", "--available-limiters", "available_limiters.yaml"); code != exitInvalid || !strings.Contains(stderr, "bad.yaml:2:24: user_sign_in: mode must be one of enforce, shadow") {
				t.Fatalf("bad mode: exit %d %s", code, stderr)
			}
			if code, _, _ := e.run(t, "publish", "--file", "enforce.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatal("publish enforce failed")
			}
			if _, stdout, _ := e.run(t, "show", "user_sign_in"); !strings.Contains(stdout, "mode: enforce") {
				t.Fatalf("show after enforce:\n%s", stdout)
			}
			// explain follows the document's mode: in shadow it says what
			// enforcing would do.
			if code, _, stderr := e.run(t, "publish", "--file", "shadow_rule.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatalf("publish shadow_rule: %s", stderr)
			}
			explain := append([]string{"explain", "--limiter", "user_sign_in", "--rules-prefix", e.prefix, "--cost", "2",
				"--available-limiters", "available_limiters.yaml"}, e.flags[:len(e.flags)-2]...) // the document has no default tier
			code, stdout, stderr := ratekit(t, e.dir, append(explain, "ip=10.1.2.3")...)
			if code != exitOK || !strings.Contains(stdout, "verdict: allow: the limiter is in shadow mode; enforcing, it would block by per_ip") {
				t.Fatalf("explain in shadow: exit %d\n%s%s", code, stdout, stderr)
			}
		})
	}
}

// A file that holds no rule and no mode publishes nothing: publish says so
// and exits 1 (with --dry-run too) instead of reporting a publish.
func TestRulesPublishNothing(t *testing.T) {
	e := newRulesCLI(t, false)
	e.dir = writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"blank.yaml":              "",
		"empty.yaml":              "rate_limits: {}\n",
		"no_rules.yaml":           "rate_limits:\n  user_sign_in: []\n  pipelines_create: {rules: []}\n",
	})
	for _, file := range []string{"blank.yaml", "empty.yaml", "no_rules.yaml"} {
		for _, dry := range [][]string{nil, {"--dry-run"}} {
			code, stdout, stderr := e.run(t, "publish", append([]string{"--file", file, "--available-limiters", "available_limiters.yaml"}, dry...)...)
			want := "ratekit rules: nothing to publish: " + file + " holds no rule and no mode under rate_limits\n"
			if code != exitInvalid || stdout != "" || stderr != want {
				t.Fatalf("publish %s %q: exit %d\nstdout %q\nstderr %q\nwant exit 1 and stderr %q", file, dry, code, stdout, stderr, want)
			}
		}
	}
	if code, stdout, _ := e.run(t, "list"); code != exitOK || !strings.Contains(stdout, "0 limiters, revision 0") {
		t.Fatalf("list after publishing nothing: exit %d\n%s", code, stdout)
	}
}
