package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
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
			code, stdout, stderr := e.run(t, "publish", "--file", "shadow.yaml", "--available-limiters", "available_limiters.yaml")
			if code != exitOK || !strings.Contains(stdout, "changed: user_sign_in") {
				t.Fatalf("publish shadow: exit %d\n%s%s", code, stdout, stderr)
			}
			// The audit record says what was published: the mode.
			oneAudit(t, cutUnseededNote(t, stderr, e.prefix, "user_sign_in"), map[string]any{"op": "publish", "modes": map[string]string{"user_sign_in": "shadow"}, "rules": map[string][]string{}})
			code, stdout, _ = e.run(t, "show", "user_sign_in")
			if code != exitOK || !strings.Contains(stdout, "mode: shadow, set by published_rules (the highest tier that sets one wins); ratekit rules delete --rules-prefix '"+e.prefix+"' user_sign_in --mode removes it\n") ||
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
			if _, stdout, _ := e.run(t, "show", "user_sign_in"); !strings.Contains(stdout, "mode: enforce, set by published_rules") {
				t.Fatalf("show after enforce:\n%s", stdout)
			}
			// explain follows the document's mode: in shadow it says what
			// enforcing would do.
			if code, _, stderr := e.run(t, "publish", "--file", "shadow_rule.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatalf("publish shadow_rule: %s", stderr)
			}
			explain := append([]string{"explain", "--limiter", "user_sign_in", "--rules-prefix", e.prefix, "--cost", "2",
				"--available-limiters", "available_limiters.yaml"}, e.flags[:len(e.flags)-2]...) // the document has no default tier
			code, stdout, stderr = ratekit(t, e.dir, append(explain, "ip=10.1.2.3")...)
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
	if code, stdout, _ := e.run(t, "list"); code != exitInvalid || !strings.Contains(stdout, "0 limiters, revision 0") {
		t.Fatalf("list after publishing nothing: exit %d\n%s", code, stdout)
	}
}

// TestRulesPublishDryRunMode: the dry run of a publish says what the publish
// then changes, the published tier's mode included. It counted rules only,
// so a file that flips a limiter to shadow was "0 changes, nothing written"
// and its publish "changed: user_sign_in". A limiter the file lists with no
// rule and no mode is not written, so its dry run creates no document.
func TestRulesPublishDryRunMode(t *testing.T) {
	e := newRulesCLI(t, false)
	e.dir = writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"shadow.yaml":             "rate_limits:\n  user_sign_in: {mode: shadow, rules: []}\n",
		"enforce.yaml":            "rate_limits:\n  user_sign_in: {mode: enforce, rules: []}\n",
		"rules_only.yaml":         "rate_limits:\n  user_sign_in: [{name: per_ip, characteristics: [ip], limit: 1, period_s: 60, action: limit}]\n  pipelines_create: []\n",
	})
	publish := func(file string, dry bool) (int, string, string) {
		args := []string{"--file", file, "--available-limiters", "available_limiters.yaml"}
		if dry {
			args = append(args, "--dry-run")
		}
		return e.run(t, "publish", args...)
	}
	steps := []struct {
		file    string
		dry     bool
		want    []string // in stdout
		notWant []string
	}{
		{file: "shadow.yaml", dry: true, want: []string{"  + mode shadow\n", "dry run: 1 change, nothing written"}},
		{file: "shadow.yaml", want: []string{"changed: user_sign_in"}},
		{file: "shadow.yaml", dry: true, want: []string{"  = mode shadow: unchanged\n", "dry run: 0 changes, nothing written"}},
		{file: "enforce.yaml", dry: true, want: []string{"  ~ mode:\n      - shadow\n      + enforce\n", "dry run: 1 change, nothing written"}},
		{file: "rules_only.yaml", dry: true, want: []string{"  + per_ip: ", "dry run: 1 change, nothing written"},
			notWant: []string{"mode", "pipelines_create"}},
		// pipelines_create is named as not published, not counted as one
		// (it said "published 1 rule for 2 limiters").
		{file: "rules_only.yaml", want: []string{"published 1 rule for 1 limiter; changed: user_sign_in"}},
	}
	for _, s := range steps {
		code, stdout, stderr := publish(s.file, s.dry)
		if note := "note: pipelines_create: no rule and no mode in rules_only.yaml, nothing is published for them"; s.file == "rules_only.yaml" && !strings.Contains(stderr, note) {
			t.Fatalf("publish %s (dry run %v): stderr %q, want %q", s.file, s.dry, stderr, note)
		}
		for _, w := range s.want {
			if code != exitOK || !strings.Contains(stdout, w) {
				t.Fatalf("publish %s (dry run %v): exit %d, want 0 and %q in stdout\nstdout:\n%s\nstderr:\n%s", s.file, s.dry, code, w, stdout, stderr)
			}
		}
		for _, w := range s.notWant {
			if strings.Contains(stdout, w) {
				t.Errorf("publish %s (dry run %v): %q in stdout, want none\n%s", s.file, s.dry, w, stdout)
			}
		}
	}
	if _, ok := e.raw(t, "pipelines_create"); ok {
		t.Error("a dry run wrote pipelines_create's document")
	}
}

// TestRulesDeleteDryRunKeepsMode: a published mode outlives the published
// rules, so the dry run of a delete of every one of them says the mode stays
// rather than that the document would be removed, as it says (and the delete
// does) for a document that holds nothing else.
func TestRulesDeleteDryRunKeepsMode(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
		kept             bool
	}{
		{"mode", "rate_limits:\n  user_sign_in:\n    mode: shadow\n    rules: [{name: per_ip, characteristics: [ip], limit: 1, period_s: 60, action: limit}]\n",
			"  the published mode shadow stays (--mode deletes it too)\n", true},
		{"no mode", "rate_limits:\n  user_sign_in: [{name: per_ip, characteristics: [ip], limit: 1, period_s: 60, action: limit}]\n",
			"  the document would be left empty and removed\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRulesCLI(t, false)
			e.dir = writeFiles(t, map[string]string{
				"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
				"publish.yaml":            tc.file,
			})
			if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatalf("publish: exit %d\n%s", code, stderr)
			}
			code, stdout, stderr := e.run(t, "delete", "--dry-run", "user_sign_in", "per_ip")
			if code != exitOK || !strings.Contains(stdout, "  - per_ip: ") || !strings.Contains(stdout, tc.want) {
				t.Fatalf("delete --dry-run: exit %d, want 0, per_ip listed and %q\nstdout:\n%s\nstderr:\n%s", code, tc.want, stdout, stderr)
			}
			if code, _, stderr := e.run(t, "delete", "user_sign_in", "per_ip"); code != exitOK {
				t.Fatalf("delete: exit %d\n%s", code, stderr)
			}
			if raw, ok := e.raw(t, "user_sign_in"); ok != tc.kept {
				t.Fatalf("after the delete the document is %q (present %v), want present %v", raw, ok, tc.kept)
			}
		})
	}
}

// TestRulesPublishWarnsFileOutranks: file_rules (rate_limits.yaml) outrank
// the published tier, so a published mode or rule that the file's overrides
// is written but not in force. publish warns of each (it printed only
// "published ...; changed: user_sign_in", while an operator's mode shadow
// left the limiter enforcing) and of nothing the file does not outrank.
func TestRulesPublishWarnsFileOutranks(t *testing.T) {
	e := newRulesCLI(t, false)
	store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	enforce := ratelimit.Enforce
	if _, err := store.Seed(context.Background(), map[string]tiers.Set{"user_sign_in": {Mode: &enforce, File: []ratelimit.Rule{
		{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 5, Period: time.Minute},
		{Name: "same_in_file", Characteristics: []string{"ip"}, Limit: 9, Period: time.Minute},
	}}}); err != nil {
		t.Fatal(err)
	}
	e.dir = writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"shadow_rules.yaml": "rate_limits:\n  user_sign_in:\n    mode: shadow\n    rules:\n" +
			"      - {name: per_ip, characteristics: [ip], limit: 1, period_s: 60, action: limit}\n" +
			"      - {name: same_in_file, characteristics: [ip], limit: 9, period_s: 60, action: limit}\n" +
			"      - {name: incident_only, characteristics: [ip], limit: 1, period_s: 60, action: limit}\n",
		"enforce.yaml": "rate_limits:\n  user_sign_in: {mode: enforce, rules: []}\n",
	})
	code, stdout, stderr := e.run(t, "publish", "--file", "shadow_rules.yaml", "--available-limiters", "available_limiters.yaml")
	if code != exitOK || !strings.Contains(stdout, "changed: user_sign_in") {
		t.Fatalf("publish: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"warning: user_sign_in: not in force: file_rules (rate_limits.yaml) sets mode enforce, which outranks the published mode shadow; the limiter stays in enforce mode until rate_limits.yaml drops its mode\n",
		"warning: user_sign_in/per_ip: not in force: file_rules (rate_limits.yaml) holds a rule of this name, which outranks the published one and stays in force: limit 5 per 1m0s by ip",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("publish stderr lacks %q:\n%s", want, stderr)
		}
	}
	// A rule the file holds alike, and one it lacks, are in force as published.
	for _, quiet := range []string{"same_in_file", "incident_only"} {
		if strings.Contains(stderr, "user_sign_in/"+quiet+":") {
			t.Errorf("publish warns of %s, which the file does not outrank:\n%s", quiet, stderr)
		}
	}
	// The file's own mode published: nothing to warn of.
	if code, _, stderr := e.run(t, "publish", "--file", "enforce.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK || strings.Contains(stderr, "warning:") {
		t.Fatalf("publish enforce: exit %d\n%s", code, stderr)
	}
}

// TestRulesDeleteMode: the drill's stale shadow. A published mode outlives
// the published rules and `rules delete` took rule names only, so an
// operator could overwrite it but never remove it, and it took effect the
// day rate_limits.yaml dropped its own mode. `rules delete LIMITER --mode`
// removes it (the real binary against the real Redis, standalone and
// cluster): its dry run says which mode the limiter then runs in, the write
// is audited, and with no published mode left both exit 1, writing
// nothing.
func TestRulesDeleteMode(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := map[bool]string{false: "standalone", true: "cluster"}[cluster]
		t.Run(name, func(t *testing.T) {
			e := newRulesCLI(t, cluster)
			store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
			if err != nil {
				t.Fatal(err)
			}
			perIP := ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 5, Period: time.Minute}
			// rate_limits.yaml sets no mode (it dropped its own).
			if _, err := store.Seed(context.Background(), map[string]tiers.Set{"user_sign_in": {File: []ratelimit.Rule{perIP}}}); err != nil {
				t.Fatal(err)
			}
			e.dir = writeFiles(t, map[string]string{
				"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
				"shadow_rule.yaml":        "rate_limits:\n  user_sign_in:\n    mode: shadow\n    rules: [{name: incident, characteristics: [ip], limit: 1, period_s: 60, action: limit}]\n",
			})
			if code, _, stderr := e.run(t, "publish", "--file", "shadow_rule.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatalf("publish: exit %d\n%s", code, stderr)
			}
			before, _ := e.raw(t, "user_sign_in")
			if code, stdout, _ := e.run(t, "show", "user_sign_in"); code != exitOK || !strings.Contains(stdout, "mode: shadow, set by published_rules (the highest tier that sets one wins); ratekit rules delete --rules-prefix '"+e.prefix+"' user_sign_in --mode removes it\n") {
				t.Fatalf("show of a published mode: exit %d\n%s", code, stdout)
			}
			code, stdout, stderr := e.run(t, "delete", "user_sign_in", "--mode", "--dry-run")
			if code != exitOK || stderr != "" ||
				!strings.Contains(stdout, "  - mode shadow: the limiter then runs in the mode its services configure (enforce unless they configure shadow)\n") ||
				!strings.Contains(stdout, "dry run: 1 change, nothing written") || strings.Contains(stdout, "incident") {
				t.Fatalf("delete --mode --dry-run: exit %d\n%s%s", code, stdout, stderr)
			}
			if after, _ := e.raw(t, "user_sign_in"); after != before {
				t.Fatalf("the dry run wrote %s", after)
			}
			code, stdout, stderr = e.run(t, "delete", "user_sign_in", "--mode")
			if code != exitOK || !strings.HasPrefix(stdout, "deleted from user_sign_in: the published mode shadow (revision ") ||
				!strings.HasSuffix(stdout, "\nuser_sign_in now runs in the mode its services configure (enforce unless they configure shadow)\n") {
				t.Fatalf("delete --mode: exit %d\n%s%s", code, stdout, stderr)
			}
			oneAudit(t, stderr, map[string]any{"op": "delete", "limiter": "user_sign_in", "mode": "shadow", "rules": []string{}, "changed": true, "outcome": "ok"})
			// The published rule stays; no tier sets a mode now.
			code, stdout, _ = e.run(t, "show", "user_sign_in")
			if code != exitOK || strings.Contains(stdout, "mode") || !strings.Contains(stdout, "published_rules (publish API): 1 rule\n") {
				t.Fatalf("show after delete --mode: exit %d\n%s", code, stdout)
			}
			// Nothing left to delete: the delete and its dry run fail.
			code, stdout, stderr = e.run(t, "delete", "user_sign_in", "--mode", "--dry-run")
			if code != exitInvalid || stdout != "" || stderr != "ratekit rules: limiter user_sign_in: no published mode; the delete would remove nothing (all or nothing)\n" {
				t.Fatalf("delete --mode --dry-run of no mode: exit %d\n%s%s", code, stdout, stderr)
			}
			code, stdout, stderr = e.run(t, "delete", "user_sign_in", "--mode")
			if code != exitInvalid || stdout != "" || !strings.Contains(stderr, "ratekit rules: rulestore: mode not published: limiter user_sign_in: no published mode; nothing was written\n") {
				t.Fatalf("delete --mode of no mode: exit %d\n%s%s", code, stdout, stderr)
			}
			// The mode and the rules in one write, the file's mode named.
			enforce := ratelimit.Enforce
			if _, err := store.Seed(context.Background(), map[string]tiers.Set{"user_sign_in": {File: []ratelimit.Rule{perIP}, Mode: &enforce}}); err != nil {
				t.Fatal(err)
			}
			if code, _, stderr := e.run(t, "publish", "--file", "shadow_rule.yaml", "--available-limiters", "available_limiters.yaml"); code != exitOK {
				t.Fatalf("publish: exit %d\n%s", code, stderr)
			}
			code, stdout, stderr = e.run(t, "delete", "user_sign_in", "incident", "--mode")
			if code != exitOK || !strings.HasPrefix(stdout, "deleted from user_sign_in: the published mode shadow, incident (revision ") ||
				!strings.HasSuffix(stdout, "\nuser_sign_in now runs in mode enforce, set by file_rules (rate_limits.yaml)\n") {
				t.Fatalf("delete incident --mode: exit %d\n%s%s", code, stdout, stderr)
			}
			if raw, _ := e.raw(t, "user_sign_in"); strings.Contains(raw, "published_rules") {
				t.Fatalf("the published tier stayed: %s", raw)
			}
			// show names the tier of the mode, and offers no removal of a
			// mode the file sets.
			if code, stdout, _ := e.run(t, "show", "user_sign_in"); code != exitOK || !strings.Contains(stdout, "mode: enforce, set by file_rules (the highest tier that sets one wins)\n") {
				t.Fatalf("show of a file mode: exit %d\n%s", code, stdout)
			}
			// A document no service loads (a rule's action unknown) loses
			// its published mode too, as a delete shrinks it; the dry run
			// reads the mode from the stored JSON.
			bad := `{"published_rules":{"mode":"shadow","rules":[{"name":"r","limit":1,"period_s":60,"action":"bogus"}]}}`
			if err := e.client.Set(context.Background(), e.prefix+"pipelines_create", bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr = e.run(t, "delete", "pipelines_create", "--mode", "--dry-run")
			if code != exitOK || !strings.Contains(stdout, "  - mode shadow\n") || !strings.Contains(stdout, "dry run: 1 change, nothing written") {
				t.Fatalf("delete --mode --dry-run of an invalid document: exit %d\n%s%s", code, stdout, stderr)
			}
			if code, stdout, stderr := e.run(t, "delete", "pipelines_create", "--mode"); code != exitOK || !strings.HasPrefix(stdout, "deleted from pipelines_create: the published mode (revision ") {
				t.Fatalf("delete --mode of an invalid document: exit %d\n%s%s", code, stdout, stderr)
			}
			if raw, _ := e.raw(t, "pipelines_create"); raw != `{"published_rules":{"rules":[{"name":"r","limit":1,"period_s":60,"action":"bogus"}]}}` {
				t.Fatalf("the invalid document after delete --mode: %s", raw)
			}
			// --mode is delete's alone; delete needs a rule or --mode.
			if code, _, stderr := e.run(t, "publish", "--mode", "--file", "shadow_rule.yaml", "--available-limiters", "available_limiters.yaml"); code != exitUsage || !strings.Contains(stderr, "--mode is for delete") {
				t.Fatalf("publish --mode: exit %d\n%s", code, stderr)
			}
			if code, _, _ := e.run(t, "delete", "user_sign_in"); code != exitUsage {
				t.Fatalf("delete without a rule or --mode: exit %d", code)
			}
		})
	}
}
