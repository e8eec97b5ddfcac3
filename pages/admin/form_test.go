package admin_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/controlplane/rulestore"
)

// errorsFor returns the inline errors the page shows under a form field.
func errorsFor(body, field string) string {
	m := regexp.MustCompile(`(?s)<div data-error-for="` + regexp.QuoteMeta(field) + `">(.*?)</div>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// Every check a file gets runs on a save, each violation is shown next to
// its field, and nothing is written.
func TestInvalidRuleShowsFieldErrors(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	before := f.storeState(t)
	tests := []struct {
		name  string
		edit  func(url.Values)
		field string
		want  string
	}{
		{"bad name", func(v url.Values) { v.Set("name", "Bad Name") }, "name", "must be 1 to 64 characters"},
		{"limit zero", func(v url.Values) { v.Set("limit", "0") }, "limit", "at least 1"},
		{"limit not a number", func(v url.Values) { v.Set("limit", "ten") }, "limit", "not a whole number"},
		{"no period", func(v url.Values) { v.Del("period_s") }, "limit", "require limit and period_s"},
		{"bad regex", func(v url.Values) { v.Set("match_kind.path", "regex"); v.Set("match_value.path", "(") }, "match.path", "invalid RE2 regex"},
		{"empty one_of", func(v url.Values) { v.Set("match_kind.ip", "one_of"); v.Set("match_value.ip", " \n ") }, "match.ip", "one_of needs at least 1 value"},
		{"one_of line not a quoted value", func(v url.Values) { v.Set("match_kind.ip", "one_of"); v.Set("match_value.ip", "10.0.0.1\n\"10.0.0.2") }, "match.ip", "line 2: &#34;10.0.0.2 is not a quoted value"},
		{"value without a kind", func(v url.Values) { v.Set("match_value.ip", "1.2.3.4") }, "match.ip", "choose how ip matches"},
		{"unknown characteristic", func(v url.Values) { v.Set("characteristics", "tenant") }, "characteristics", "not one of the limiter"},
		{"ban with count_distinct", func(v url.Values) { v.Set("ban_for_s", "60"); v.Set("count_distinct", "path") }, "ban_for_s", "cannot be combined with count_distinct"},
		{"count_missing without characteristics", func(v url.Values) { v.Del("characteristics"); v.Set("count_missing", "on") }, "count_missing", "count_missing needs characteristics"},
		{"skip not allowed", func(v url.Values) { v.Set("action", "skip") }, "action", "allowed_skip_rules (trusted_ip)"},
		{"unknown action", func(v url.Values) { v.Set("action", "drop") }, "action", "choose limit, log or skip"},
		{"unknown algorithm", func(v url.Values) { v.Set("algorithm", "leaky") }, "algorithm", "choose fixed_window, sliding_window or token_bucket"},
		{"count_distinct off a fixed window", func(v url.Values) { v.Set("algorithm", "sliding_window"); v.Set("count_distinct", "path") }, "count_distinct", "counts in fixed windows only"},
		{"burst off a token bucket", func(v url.Values) { v.Set("burst", "5") }, "burst", "valid with algorithm token_bucket only"},
		{"long description", func(v url.Values) { v.Set("description", strings.Repeat("x", 1025)) }, "description", "1024"},
		{"name of a published rule", func(v url.Values) {}, "name", ""}, // set up below: a second add of the same name
	}
	for _, tt := range tests[:len(tests)-1] {
		t.Run(tt.name, func(t *testing.T) {
			form := saveForm(token, version, "new_rule")
			tt.edit(form)
			resp, body := b.post("?limiter=api", form, f.srv.URL)
			if resp.StatusCode != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422\n%s", resp.StatusCode, body)
			}
			if got := errorsFor(body, tt.field); !strings.Contains(got, tt.want) {
				t.Fatalf("errors under %s: %q, want %q\n%s", tt.field, got, tt.want, body)
			}
			if !strings.Contains(body, `id="rule-form"`) || !strings.Contains(body, `value="new_rule"`) && tt.field != "name" {
				t.Fatal("the form did not come back with what was typed")
			}
			if after := f.storeState(t); !maps.Equal(before, after) {
				t.Fatalf("an invalid save wrote:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// Adding a rule whose name is already published is refused: editing is
	// the way to change it.
	if resp, body := b.post("?limiter=api", saveForm(token, version, "dup"), f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("first add: %d\n%s", resp.StatusCode, body)
	}
	_, v2, _ := f.store.VersionedDocument(ctx, "api")
	resp, body := b.post("?limiter=api", saveForm(token, v2, "dup"), f.srv.URL)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(errorsFor(body, "name"), "already exists") {
		t.Fatalf("second add of dup: %d\n%s", resp.StatusCode, body)
	}
}

// A save or delete based on a version another writer has replaced fails
// with the conflict message and the current rules, and writes nothing; each
// write, failed or not, is one audit line with who, what and the outcome.
func TestConflict(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	_, stale, _ := f.store.VersionedDocument(ctx, "api")
	// Another writer publishes meanwhile.
	if resp, body := b.post("?limiter=api", saveForm(token, stale, "theirs"), f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("other writer: %d\n%s", resp.StatusCode, body)
	}
	_, current, _ := f.store.VersionedDocument(ctx, "api")
	before := f.storeState(t)
	for _, form := range []url.Values{
		saveForm(token, stale, "mine"),
		{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {stale}, "rule": {"theirs"}},
	} {
		resp, body := b.post("?limiter=api", form, f.srv.URL)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `id="conflict"`) || !strings.Contains(body, "Someone else changed the rules") {
			t.Fatalf("%s at a stale version: %d\n%s", form.Get("op"), resp.StatusCode, body)
		}
		if !strings.Contains(body, `data-rule="theirs" data-tier="published"`) {
			t.Fatalf("the conflict page does not show the current rules:\n%s", body)
		}
		if !strings.Contains(body, `name="version" value="`+current+`"`) {
			t.Fatal("the form is not based on the current version after the conflict")
		}
		if after := f.storeState(t); !maps.Equal(before, after) {
			t.Fatalf("a stale %s wrote", form.Get("op"))
		}
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(f.audit.String()), "\n") {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		lines = append(lines, line)
	}
	want := []struct{ level, op, rule, outcome string }{
		{"INFO", "publish", "theirs", "ok"},
		{"WARN", "publish", "mine", rulestore.ErrConflict.Error()},
		{"WARN", "delete", "theirs", rulestore.ErrConflict.Error()},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d audit lines, want %d (one per write, failed or not):\n%s", len(lines), len(want), f.audit)
	}
	for i, w := range want {
		l := lines[i]
		outcome, _ := l["outcome"].(string)
		if l["msg"] != "rate_limit_admin_write" || l["level"] != w.level || l["who"] != "alice" || l["op"] != w.op ||
			l["limiter"] != "api" || l["rule"] != w.rule || !strings.Contains(outcome, w.outcome) || l["key"] != f.store.Key("api") {
			t.Errorf("audit line %d: %v, want %s %s of rule %s by alice, outcome %q, key %s", i, l, w.level, w.op, w.rule, w.outcome, f.store.Key("api"))
		}
	}
}

// A form larger than MaxBodyBytes is refused before it is read (413); a
// form that is not one (a malformed escape) is a bad request (400), not a
// size problem. Both are POSTs turned away before the CSRF check: each gets
// its WARN rate_limit_admin_refused, and nothing is written.
func TestBodyBounded(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	big := saveForm(b.csrf(), "", "big")
	big.Set("description", strings.Repeat("x", 70<<10))
	for _, tc := range []struct {
		name, body string
		status     int
		says       string
	}{
		{"oversized", big.Encode(), http.StatusRequestEntityTooLarge, "at most 65536 bytes"},
		{"malformed", saveForm(b.csrf(), "", "bad").Encode() + "&description=%zz", http.StatusBadRequest, "invalid URL escape"},
	} {
		req, _ := http.NewRequest(http.MethodPost, f.url()+"?limiter=api", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", f.srv.URL)
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := readBody(t, resp); code != tc.status || !strings.Contains(body, tc.says) {
			t.Errorf("%s form: status %d, want %d saying %q:\n%s", tc.name, code, tc.status, tc.says, body)
		}
	}
	if a := f.audit.String(); strings.Contains(a, "rate_limit_admin_write") || strings.Count(a, "rate_limit_admin_refused") != 2 {
		t.Errorf("audit after two unreadable forms, want two refused lines:\n%s", a)
	}
}
