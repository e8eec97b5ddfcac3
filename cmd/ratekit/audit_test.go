package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// auditRecords splits a command's stderr into its audit records
// (auditRecord) and the rest.
func auditRecords(t *testing.T, stderr string) (records []map[string]any, rest string) {
	t.Helper()
	var other []string
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if !strings.Contains(line, `"msg":"`+auditRecord+`"`) {
			other = append(other, line)
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit record %q: %v", line, err)
		}
		records = append(records, rec)
	}
	return records, strings.Join(other, "")
}

// oneAudit returns the one audit record in stderr, failing unless stderr
// holds exactly that record and want's entries are in it.
func oneAudit(t *testing.T, stderr string, want map[string]any) map[string]any {
	t.Helper()
	recs, rest := auditRecords(t, stderr)
	if len(recs) != 1 || rest != "" {
		t.Fatalf("want one audit record and nothing else on stderr, got %d records and %q", len(recs), rest)
	}
	for k, v := range want {
		got, _ := json.Marshal(recs[0][k])
		w, _ := json.Marshal(v)
		if string(got) != string(w) {
			t.Errorf("audit record %s = %s, want %s (record %v)", k, got, w, recs[0])
		}
	}
	return recs[0]
}

// Every write of the rules subcommands is audited once, failed ones too, and
// a dry run writes nothing and logs nothing.
func TestRulesWritesAudited(t *testing.T) {
	e := newRulesCLI(t, false)
	run := func(sub string, args ...string) (int, string, string) {
		t.Helper()
		return ratekitEnv(t, e.dir, []string{"RATEKIT_WRITER=deploy-bot"}, append(append([]string{"rules", sub}, e.flags...), args...)...)
	}
	code, stdout, stderr := run("publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 {
		t.Fatalf("publish: exit %d\n%s%s", code, stdout, stderr)
	}
	oneAudit(t, cutUnseededNote(t, stderr, e.prefix, "pipelines_create, user_sign_in"), map[string]any{"level": "INFO", "who": "deploy-bot", "op": "publish", "outcome": "ok",
		"rules_prefix": e.prefix, "limiters": []string{"pipelines_create", "user_sign_in"},
		"changed": []string{"pipelines_create", "user_sign_in"}, "file": "publish.yaml",
		"rules": map[string][]string{"pipelines_create": {"per_user"}, "user_sign_in": {"limit_user_sign_ins_by_username", "per_ip"}},
		"modes": map[string]string{}})

	code, stdout, stderr = run("delete", "--dry-run", "user_sign_in", "per_ip")
	if recs, _ := auditRecords(t, stderr); code != 0 || len(recs) != 0 {
		t.Fatalf("delete --dry-run: exit %d, %d audit records\n%s%s", code, len(recs), stdout, stderr)
	}

	code, _, stderr = run("delete", "user_sign_in", "nope")
	if code != 1 {
		t.Fatalf("delete of a rule not published: exit %d\n%s", code, stderr)
	}
	recs, _ := auditRecords(t, stderr)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["op"] != "delete" || !strings.Contains(recs[0]["outcome"].(string), "nope") {
		t.Fatalf("a refused delete's audit: %v", recs)
	}

	code, _, stderr = run("delete", "user_sign_in", "per_ip")
	if code != 0 {
		t.Fatalf("delete: exit %d\n%s", code, stderr)
	}
	oneAudit(t, stderr, map[string]any{"op": "delete", "limiter": "user_sign_in", "rules": []string{"per_ip"}, "changed": true, "outcome": "ok"})

	code, _, stderr = run("gc", "--available-limiters", "available_limiters.yaml")
	if code != 0 {
		t.Fatalf("gc: exit %d\n%s", code, stderr)
	}
	rec := oneAudit(t, stderr, map[string]any{"op": "gc", "outcome": "ok", "available_limiters": "available_limiters.yaml"})
	if _, ok := rec["deleted"]; !ok {
		t.Errorf("gc audit record without deleted: %v", rec)
	}

	// Without RATEKIT_WRITER, the OS user names the writer.
	_, _, stderr = ratekit(t, e.dir, append(append([]string{"rules", "delete"}, e.flags...), "user_sign_in", "limit_user_sign_ins_by_username")...)
	if recs, _ := auditRecords(t, stderr); len(recs) != 1 || recs[0]["who"] == "" || recs[0]["who"] == "deploy-bot" || !slices.Contains([]string{"INFO", "WARN"}, recs[0]["level"].(string)) {
		t.Errorf("audit without RATEKIT_WRITER: %v", recs)
	}
}

// A writer's name over maxWriterBytes is cut on a character's boundary: a
// cut through "é" was logged as U+FFFD.
func TestWriterCutOnACharacter(t *testing.T) {
	name := strings.Repeat("a", maxWriterBytes-1) + "é"
	t.Setenv("RATEKIT_WRITER", name)
	if got := writer(); got != name[:maxWriterBytes-1] {
		t.Fatalf("writer() = %q (%d bytes), want the %d bytes before the cut character", got, len(got), maxWriterBytes-1)
	}
}
