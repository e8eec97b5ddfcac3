package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// validate reports every breach of the rules model's bounds
// (docs/limits.md) with file, line and rule, and exits 1.
func TestValidateReportsBounds(t *testing.T) {
	var rules strings.Builder
	rules.WriteString("rate_limits:\n  user_sign_in:\n")
	for i := range ratelimit.MaxRulesPerTier + 1 {
		fmt.Fprintf(&rules, "    - {name: r%d, action: limit, limit: 1, period_s: 60, characteristics: [ip]}\n", i)
	}
	chars := make([]string, ratelimit.MaxCharacteristics+1)
	for i := range chars {
		chars[i] = "ip"
	}
	rules.WriteString("  rack_request:\n    - name: wide\n      action: limit\n      limit: 1\n      period_s: 60\n      characteristics: [" + strings.Join(chars, ", ") + "]\n")
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"rate_limits.yaml":        rules.String(),
		"huge.yaml":               "rate_limits: {}\n#" + strings.Repeat("x", ratelimit.MaxDocumentBytes),
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	for _, want := range []string{
		"rate_limits.yaml:265:24: rack_request/wide: 17 characteristics, at most 16 (docs/limits.md)\n",
		"rate_limits.yaml:259:7: user_sign_in/r256: 257 rules in this list, at most 256 per tier (docs/limits.md); this is the first rule over the limit\n",
	} {
		if code != 1 || stdout != "" || !strings.Contains(stderr, want) {
			t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and a line:\n%s", code, stdout, stderr, want)
		}
	}
	code, _, stderr = ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "huge.yaml")
	if want := "huge.yaml:1:1: the file is larger than 1048576 bytes, the bound of every rules document (docs/limits.md)\n"; code != 1 || stderr != want {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
	// A publish reports the file as validate does: it was exit 2 (an
	// unreadable file) and "ratekit rules: huge.yaml:1:1: ...", before Redis
	// was reached (the address is never dialled).
	unused := "redis://" + redistest.UnusedAddr(t)
	code, _, stderr = ratekit(t, dir, "rules", "publish", "--redis", unused, "--available-limiters", "available_limiters.yaml", "--file", "huge.yaml")
	if want := "huge.yaml:1:1: the file is larger than 1048576 bytes, the bound of every rules document (docs/limits.md)\n"; code != 1 || stderr != want {
		t.Fatalf("publish: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
	if code, _, stderr = ratekit(t, dir, "rules", "publish", "--redis", unused, "--available-limiters", "available_limiters.yaml", "--file", "missing.yaml"); code != 2 ||
		!strings.HasPrefix(stderr, "ratekit rules: open missing.yaml: ") {
		t.Fatalf("publish of a missing file: exit %d, stderr:\n%s", code, stderr)
	}
}

// `rules remove` takes away a document no service would load (here a key
// of another Redis type), after which publishing works again; it refuses a
// valid document and a missing one, so it never reports a removal it did
// not make.
func TestRulesRemoveInvalidDocument(t *testing.T) {
	e := newRulesCLI(t, false)
	ctx := context.Background()
	key := e.prefix + "user_sign_in"
	if err := e.client.HSet(ctx, key, "published_rules", "x").Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || !strings.Contains(stderr, "is a Redis hash, not a string") {
		t.Fatalf("publish onto a hash: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := e.run(t, "remove", "user_sign_in", "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would remove "+key) {
		t.Fatalf("dry run: exit %d\n%s%s", code, stdout, stderr)
	}
	if n, _ := e.client.Exists(ctx, key).Result(); n != 1 {
		t.Fatal("the dry run removed the key")
	}
	code, stdout, stderr = e.run(t, "remove", "user_sign_in")
	if code != 0 || !strings.Contains(stdout, "removed "+key) {
		t.Fatalf("remove: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := e.run(t, "remove", "user_sign_in"); code != 1 || !strings.Contains(stderr, "nothing removed: limiter user_sign_in has no document") {
		t.Fatalf("remove of nothing: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish after the removal: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := e.run(t, "remove", "user_sign_in"); code != 1 || !strings.Contains(stderr, "is valid") {
		t.Fatalf("remove of a valid document: exit %d\n%s", code, stderr)
	}
	if _, ok := e.raw(t, "user_sign_in"); !ok {
		t.Fatal("a valid document was removed")
	}
}

// A limiter's document that no service would load (a key of another Redis
// type, a string over ratelimit.MaxDocumentBytes) is read as the services'
// replica reads it: bounded, by its type or size, never received whole.
// explain and clear then work on the local tiers, as the services do, so a
// ban can still be lifted; rules show names what is wrong.
func TestCommandsBesideAnInvalidDocument(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, d deployment) { testCommandsBesideAnInvalidDocument(t, d) })
}

func testCommandsBesideAnInvalidDocument(t *testing.T, d deployment) {
	client := d.client
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store func(key string) error
		want  string // in explain's rule store error and in rules show's stderr
	}{
		{"hash", func(key string) error { return client.HSet(ctx, key, "published_rules", "x").Err() },
			"is a Redis hash, not a string"},
		{"over the bound", func(key string) error {
			return client.Set(ctx, key, `{"published_rules":{"rules":[]}}`+strings.Repeat(" ", ratelimit.MaxDocumentBytes), 0).Err()
		}, fmt.Sprintf("holds %d bytes, at most %d", ratelimit.MaxDocumentBytes+32, ratelimit.MaxDocumentBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExplainEnv(t, client, d.url, d.cluster)
			key := e.rulesPrefix + "api_request"
			if err := tc.store(key); err != nil {
				t.Fatal(err)
			}
			bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.2", "request_type": "web", "path": "/login"}
			e.check(t, 3, bob) // login_by_ip: limit 2, the third bans
			id := []string{"ip=10.0.0.2", "path=/login", "user=bob", "request_type=web"}

			ex := e.explainJSON(t, id...)
			if rs := ex.RuleStore; !rs.Document || !strings.Contains(rs.Error, tc.want) || ex.Verdict.Rule != "login_by_ip" {
				t.Fatalf("explain: rule store %+v, verdict %+v; want the local tiers and an error with %q", rs, ex.Verdict, tc.want)
			}
			stdout, stderr, code := e.run(t, append(append([]string{"clear"}, e.flags()[1:]...), id...)...)
			if code != 0 || !strings.HasSuffix(stdout, "cleared 3 keys\n") {
				t.Fatalf("clear: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			// Without the files there is nothing to explain: the document
			// is named as invalid, not as missing.
			args := []string{"explain", "--redis", e.redisURL, "--limiter", "api_request", "--rules-prefix", e.rulesPrefix, "ip=10.0.0.2"}
			if d.cluster {
				args = append(args, "--cluster")
			}
			if _, stderr, code := e.run(t, args...); code != 1 || !strings.Contains(stderr, "its document in the rule store is invalid") || !strings.Contains(stderr, tc.want) {
				t.Fatalf("explain without files: exit %d, stderr %s", code, stderr)
			}
			for _, asJSON := range []string{"--text", "--json"} {
				args := []string{"rules", "show", "--redis", e.redisURL, "--rules-prefix", e.rulesPrefix, "api_request"}
				if d.cluster {
					args = append(args, "--cluster")
				}
				if asJSON == "--json" {
					args = append(args, asJSON)
				}
				stdout, stderr, code = e.run(t, args...)
				if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) {
					t.Fatalf("rules show %s: exit %d\nstdout %.200s\nstderr %s\nwant exit 1 and %q", asJSON, code, stdout, stderr, tc.want)
				}
			}
		})
	}
}

// A write refused because the stored document is invalid names the
// document's key: its problems' lines and columns are in the document, not
// in the file given to publish.
func TestRulesWritesNameTheInvalidDocument(t *testing.T) {
	e := newRulesCLI(t, false)
	key := e.prefix + "user_sign_in"
	if err := e.client.Set(context.Background(), key, `{"published_rules":{"rules":[{"name":"Bad Name"}]}}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"},
		{"publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml", "--dry-run"},
	} {
		code, _, stderr := e.run(t, args[0], args[1:]...)
		if code != 1 || !strings.Contains(stderr, "stored document is invalid: "+key+": 1:30: Bad Name: ") || !strings.Contains(stderr, "\n1:38: Bad Name: rule name") {
			t.Errorf("rules %q: exit %d, stderr:\n%s\nwant exit 1 and the problem under the key %s", args, code, stderr, key)
		}
	}
}

// delete --dry-run says what delete would do on a document that no service
// loads: delete proceeds on it (it is how such a document is repaired), so
// the dry run lists the stored rules it would remove instead of failing.
func TestRulesDeleteDryRunInvalidDocument(t *testing.T) {
	e := newRulesCLI(t, false)
	ctx := context.Background()
	key := e.prefix + "user_sign_in"
	const good = `{"name":"per_ip","characteristics":["ip"],"limit":1,"period_s":60,"action":"limit"}`
	if err := e.client.Set(ctx, key, `{"published_rules":{"rules":[`+good+`,{"name":"bad","action":"bogus"}]}}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.run(t, "delete", "user_sign_in", "bad", "--dry-run")
	want := "limiter user_sign_in (key " + key + "), published_rules:\n" +
		"  (the document is invalid, so no service loads it: " + `rulestore: stored document is invalid: ` + key + `: 1:137: bad: action must be one of limit, log, skip, got the value "bogus"` + ")\n" +
		`  - bad: {"name":"bad","action":"bogus"}` + "\n" +
		"dry run: 1 change, nothing written\n"
	if code != 0 || stdout != want {
		t.Fatalf("delete --dry-run: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 0 and:\n%s", code, stdout, stderr, want)
	}
	if code, _, stderr := e.run(t, "delete", "user_sign_in", "bad", "typo", "--dry-run"); code != 1 || !strings.Contains(stderr, "rule typo is not published (the limiter's document is invalid); the delete would remove nothing") {
		t.Fatalf("delete --dry-run with a typo: exit %d, %s", code, stderr)
	}
	if raw, _ := e.raw(t, "user_sign_in"); !strings.Contains(raw, "bogus") {
		t.Fatalf("the dry run wrote: %s", raw)
	}
	// The delete the dry run announced.
	if code, stdout, stderr := e.run(t, "delete", "user_sign_in", "bad"); code != 0 {
		t.Fatalf("delete: exit %d\n%s%s", code, stdout, stderr)
	}
	if raw, _ := e.raw(t, "user_sign_in"); raw != `{"published_rules":{"rules":[`+good+`]}}` {
		t.Fatalf("after the delete: %s", raw)
	}
}

// A document that parses but that the services' replicas reject (a rule
// on a property available_limiters.yaml no longer declares) is invalid to
// `rules remove --available-limiters` too: every publish onto it is refused
// ("a remove takes it away"), so a remove that called it valid wedged it.
func TestRulesRemoveUndeclaredProperty(t *testing.T) {
	e := newRulesCLI(t, false)
	if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, stderr)
	}
	raw, _ := e.raw(t, "user_sign_in")
	stale := strings.Replace(raw, `"ip"`, `"retired_property"`, 1)
	if stale == raw {
		t.Fatalf("no ip characteristic in %s", raw)
	}
	if err := e.client.Set(context.Background(), e.prefix+"user_sign_in", stale, 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || !strings.Contains(stderr, "remove") {
		t.Fatalf("publish onto it: exit %d\n%s", code, stderr)
	}
	// show judges it as list and remove do (it called it valid, exit 0).
	for _, asJSON := range []bool{false, true} {
		args := []string{"user_sign_in", "--available-limiters", "available_limiters.yaml"}
		if asJSON {
			args = append(args, "--json")
		}
		code, stdout, stderr := e.run(t, "show", args...)
		if code != 1 || !strings.Contains(stderr, "retired_property") || !strings.Contains(stderr, "ratekit rules remove") {
			t.Fatalf("show --json=%v: exit %d\nstdout %s\nstderr %s", asJSON, code, stdout, stderr)
		}
	}
	code, stdout, stderr := e.run(t, "remove", "user_sign_in", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, "removed "+e.prefix+"user_sign_in") || !strings.Contains(stdout, "retired_property") {
		t.Fatalf("remove: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, ok := e.raw(t, "user_sign_in"); ok {
		t.Fatal("still there after the remove")
	}
}

// A publish whose rules would take a limiter's published tier past
// MaxRulesPerTier is refused (the write script's bound), so its dry run says
// so and exits 1 as the publish does; it announced "1 change".
func TestRulesPublishDryRunOverTierBound(t *testing.T) {
	e := newRulesCLI(t, false)
	var full strings.Builder
	full.WriteString("rate_limits:\n  user_sign_in:\n")
	for i := range ratelimit.MaxRulesPerTier {
		fmt.Fprintf(&full, "    - {name: r%d, action: limit, limit: 1, period_s: 60, characteristics: [ip]}\n", i)
	}
	e.dir = writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"full.yaml":               full.String(),
		"one_more.yaml":           "rate_limits:\n  user_sign_in:\n    - {name: extra, action: limit, limit: 1, period_s: 60, characteristics: [ip]}\n    - {name: r0, action: limit, limit: 2, period_s: 60, characteristics: [ip]}\n",
		"replace.yaml":            "rate_limits:\n  user_sign_in:\n    - {name: r0, action: limit, limit: 2, period_s: 60, characteristics: [ip]}\n",
	})
	publish := func(file string, extra ...string) (int, string, string) {
		return e.run(t, "publish", append([]string{"--file", file, "--available-limiters", "available_limiters.yaml"}, extra...)...)
	}
	if code, _, stderr := publish("full.yaml"); code != exitOK {
		t.Fatalf("publish of %d rules: exit %d\n%s", ratelimit.MaxRulesPerTier, code, stderr)
	}
	code, stdout, stderr := publish("one_more.yaml", "--dry-run")
	// The store's own judgement (CheckPublish), word for word the publish's.
	want := "published_rules would hold 257 rules, at most 256"
	if code != exitInvalid || !strings.Contains(stderr, want) || strings.Contains(stdout, "nothing written") {
		t.Fatalf("publish --dry-run past the bound: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and %q", code, stdout, stderr, want)
	}
	dryStderr := stderr
	code, _, stderr = publish("one_more.yaml")
	refusal := func(out string) string { // the line that says why, not the audit record
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, want) && !strings.HasPrefix(l, "{") {
				return l
			}
		}
		return ""
	}
	if code != exitInvalid || !strings.Contains(stderr, "over a bound") || refusal(stderr) == "" || refusal(stderr) != refusal(dryStderr) {
		t.Fatalf("publish past the bound: exit %d\nstderr:\n%s\nwant exit 1 and the dry run's refusal:\n%s", code, stderr, dryStderr)
	}
	// Replacing a rule keeps the count: within the bound.
	if code, stdout, stderr := publish("replace.yaml", "--dry-run"); code != exitOK || !strings.Contains(stdout, "dry run: 1 change, nothing written") {
		t.Fatalf("publish --dry-run of a replacement: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestRulesShowJSONOfAnInvalidDocument: show --json judges the document as
// show does: one no service would load exits 1 with its problems, its bytes
// still printed (to repair it), not 0 as if it were valid.
func TestRulesShowJSONOfAnInvalidDocument(t *testing.T) {
	e := newRulesCLI(t, false)
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"schema", `{"published_rules":{"rules":[{"name":"x","limit":0}]}}`, "x: limit must be at least 1, got 0"},
		{"not JSON", `{"published_rules":`, "is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := e.client.Set(context.Background(), e.prefix+"user_sign_in", tc.doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := e.run(t, "show", "user_sign_in")
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("show: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			code, stdout, stderr = e.run(t, "show", "--json", "user_sign_in")
			if code != 1 || stdout != tc.doc+"\n" || !strings.Contains(stderr, tc.want) {
				t.Fatalf("show --json: exit %d\nstdout %s\nstderr %s\nwant exit 1, the document and %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestRulesListIndexedWithoutDocument: a limiter the index names whose
// document is gone (deleted by hand) is listed as such, not as a document
// the services cannot read: list said "INVALID: rulestore: no document" and
// exited 1, though nothing is invalid and the services run on their tiers.
func TestRulesListIndexedWithoutDocument(t *testing.T) {
	e := newRulesCLI(t, false)
	if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, stderr)
	}
	if err := e.client.Del(context.Background(), e.prefix+"user_sign_in").Err(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.run(t, "list")
	if code != 0 || !regexp.MustCompile(`(?m)^user_sign_in\s+-\s+-\s+-\s+indexed, document missing: the services run on their own tiers$`).MatchString(stdout) ||
		strings.Contains(stdout, "INVALID") || stderr != "" {
		t.Fatalf("list: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = e.run(t, "list", "--json")
	var got struct {
		Limiters []struct {
			Limiter    string `json:"limiter"`
			Error      string `json:"error"`
			NoDocument bool   `json:"no_document"`
		} `json:"limiters"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != 0 || stderr != "" || len(got.Limiters) != 2 {
		t.Fatalf("list --json: exit %d, %v\nstdout %s\nstderr %s", code, err, stdout, stderr)
	}
	for _, le := range got.Limiters {
		if (le.Limiter == "user_sign_in") != le.NoDocument || le.Error != "" {
			t.Fatalf("list --json: %+v, want no_document for user_sign_in alone and no error", le)
		}
	}
}

// TestRulesListBesideAnUnreadableRevision: a revision counter written by
// hand (no integer, or longer than an int64) is told beside the list, which
// still shows every document, and the list exits 1: it refused the whole
// list for it (stdout empty), though the documents read well and the next
// write that changes one starts the counter again.
func TestRulesListBesideAnUnreadableRevision(t *testing.T) {
	e := newRulesCLI(t, false)
	if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, stderr)
	}
	for _, tt := range []struct{ name, counter, why string }{
		{"no integer", "abc", `holds "abc"`},
		{"too long", strings.Repeat("9", 64), "holds 64 bytes, at most"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.client.Set(context.Background(), e.prefix+"@rev", tt.counter, 0).Err(); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := e.run(t, "list")
			if code != exitInvalid || !regexp.MustCompile(`(?m)^user_sign_in\s+-\s+2\s+-\s*$`).MatchString(stdout) ||
				!strings.HasSuffix(stdout, "2 limiters, revision unreadable\n") || !strings.Contains(stderr, tt.why) {
				t.Fatalf("list: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			code, stdout, stderr = e.run(t, "list", "--json")
			var got struct {
				Revision *int64 `json:"revision"`
				Limiters []struct {
					Limiter string `json:"limiter"`
				} `json:"limiters"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil || code != exitInvalid || got.Revision != nil || len(got.Limiters) != 2 || !strings.Contains(stderr, tt.why) {
				t.Fatalf("list --json: exit %d, %v\nstdout %s\nstderr %s", code, err, stdout, stderr)
			}
		})
	}
	// The next write starts the counter again, and the list exits 0.
	if code, _, stderr := e.run(t, "delete", "user_sign_in", "per_ip"); code != 0 {
		t.Fatalf("delete: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := e.run(t, "list"); code != 0 || !strings.HasSuffix(stdout, "2 limiters, revision 1\n") {
		t.Fatalf("list after a write: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}
