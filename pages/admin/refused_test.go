package admin_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Every write the page turns away leaves one audit line saying who tried
// what, where and the answer, as the CLI and the rules service do: a save
// refused as invalid (422), a bad rule name, an unknown limiter or
// operation, a missing confirmation and a POST naming another Host left
// none, or one without its operation and limiter. Nothing is written.
func TestEveryRefusedWriteAudited(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	invalid := saveForm(token, version, "bad_limit")
	invalid.Set("limit", "many")
	unknownLimiter := saveForm(token, version, "elsewhere")
	unknownLimiter.Set("limiter", "nope")
	before := f.storeState(t)
	for _, tc := range []struct {
		name         string
		form         url.Values
		host         string // default the page's own
		status       int
		who, op, lim string
		reasonSays   string
	}{
		{"invalid save", invalid, "", http.StatusUnprocessableEntity, "alice", "save", "api", `limit: "many" is not a whole number`},
		{"bad rule name", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "rule": {"Per-IP"}, "version": {version}},
			"", http.StatusBadRequest, "alice", "delete", "api", "is not a rule name"},
		{"unknown limiter", unknownLimiter, "", http.StatusNotFound, "alice", "save", "nope", "nope"},
		{"unknown operation", url.Values{"csrf": {token}, "op": {"publish_all"}, "limiter": {"api"}, "version": {version}},
			"", http.StatusBadRequest, "alice", "publish_all", "api", "Unknown operation"},
		{"unconfirmed clear", url.Values{"csrf": {token}, "op": {"clear"}, "limiter": {"api"}, "version": {version}, "id.user": {"u1"}},
			"", http.StatusBadRequest, "alice", "clear", "api", "confirmation"},
		{"another Host", saveForm(token, version, "rebound"), "evil.example", http.StatusForbidden, "", "save", "api", "does not answer to the name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.audit.Reset()
			req, _ := http.NewRequest(http.MethodPost, f.url()+"?limiter=api", strings.NewReader(tc.form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", f.srv.URL)
			if tc.host != "" {
				req.Host = tc.host
				req.Header.Set("Origin", "http://"+tc.host)
			}
			resp, err := b.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if code, body := readBody(t, resp); code != tc.status {
				t.Fatalf("status %d, want %d:\n%.2000s", code, tc.status, body)
			}
			lines := strings.Split(strings.TrimSpace(f.audit.String()), "\n")
			if len(lines) != 1 {
				t.Fatalf("%d audit lines, want one refusal:\n%s", len(lines), f.audit)
			}
			var l map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
				t.Fatalf("audit line %q: %v", lines[0], err)
			}
			reason, _ := l["reason"].(string)
			if l["msg"] != "rate_limit_admin_refused" || l["level"] != "WARN" || l["who"] != tc.who || l["op"] != tc.op ||
				l["limiter"] != tc.lim || l["key"] != f.store.Key(tc.lim) || l["status"] != float64(tc.status) ||
				!strings.Contains(reason, tc.reasonSays) {
				t.Fatalf("audit line %v, want a refusal of %s on %s by %q, key %s, status %d, reason saying %q",
					l, tc.op, tc.lim, tc.who, f.store.Key(tc.lim), tc.status, tc.reasonSays)
			}
		})
	}
	if after := f.storeState(t); !maps.Equal(before, after) {
		t.Fatalf("a refused write changed Redis:\nbefore %v\nafter  %v", before, after)
	}
}
