package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
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
