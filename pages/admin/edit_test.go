package admin_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/redistest"
)

// Edit a published rule (the form comes back filled, the name fixed), then
// delete it; each write is one audit line. Run on the standalone server and
// on the 3-master cluster (the store's keys share one slot there).
func TestEditAndDelete(t *testing.T) {
	for _, target := range []struct {
		name   string
		client func(*testing.T) redisClient
	}{
		{"standalone", func(t *testing.T) redisClient { return redistest.Client(t) }},
		{"cluster", func(t *testing.T) redisClient { return redistest.ClusterClient(t) }},
	} {
		t.Run(target.name, func(t *testing.T) {
			f := newFixtureOn(t, target.client(t), allowAll)
			b := newBrowser(t, f)
			token := b.csrf()
			_, v0, _ := f.store.VersionedDocument(ctx, "api")
			if resp, body := b.post("?limiter=api", saveForm(token, v0, "per_user_strict"), f.srv.URL); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("add: %d\n%s", resp.StatusCode, body)
			}
			code, body := b.get("?limiter=api&edit=per_user_strict")
			for _, want := range []string{`name="mode" value="edit"`, `id="f-name" name="name" value="per_user_strict" readonly`, `id="f-limit" name="limit" value="2"`,
				`<input type="checkbox" name="characteristics" value="user" checked>`} {
				if code != http.StatusOK || !strings.Contains(body, want) {
					t.Fatalf("edit form lacks %s (status %d)\n%s", want, code, body)
				}
			}
			_, v1, _ := f.store.VersionedDocument(ctx, "api")
			form := saveForm(token, v1, "per_user_strict")
			form.Set("mode", "edit")
			form.Set("limit", "7")
			form.Set("match_kind.path", "one_of")
			form.Set("match_value.path", "/login\n/signup\n")
			form.Set("count_missing", "on")
			if resp, body := b.post("?limiter=api", form, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("edit: %d\n%s", resp.StatusCode, body)
			}
			doc, _ := f.store.Document(ctx, "api")
			rules := doc.GetPublishedRules().GetRules()
			if len(rules) != 1 || rules[0].GetLimit() != 7 || strings.Join(rules[0].GetMatch()["path"].GetOneOf().GetValues(), ",") != "/login,/signup" {
				t.Fatalf("after the edit: %v", rules)
			}
			if !rules[0].GetCountMissing() {
				t.Fatalf("count_missing was not saved: %v", rules)
			}
			// The editor shows it again, so a later edit does not drop it.
			if code, body := b.get("?limiter=api&edit=per_user_strict"); code != http.StatusOK || !strings.Contains(body, `id="f-missing" name="count_missing" checked`) {
				t.Fatalf("edit form does not show count_missing (status %d)\n%s", code, body)
			}
			_, v2, _ := f.store.VersionedDocument(ctx, "api")
			resp, body := b.post("?limiter=api", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {v2}, "rule": {"per_user_strict"}}, f.srv.URL)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("delete: %d\n%s", resp.StatusCode, body)
			}
			doc, _ = f.store.Document(ctx, "api")
			if n := len(doc.GetPublishedRules().GetRules()); n != 0 {
				t.Fatalf("%d published rules after the delete", n)
			}
			audit := f.audit.String()
			for _, op := range []string{`"op":"publish","limiter":"api"`, `"op":"delete","limiter":"api"`} {
				if !strings.Contains(audit, op) {
					t.Errorf("no audit line with %s:\n%s", op, audit)
				}
			}
			if n := strings.Count(audit, "rate_limit_admin_write"); n != 3 {
				t.Errorf("%d audit lines, want 3 (add, edit, delete)", n)
			}
			// A rule without match or characteristics (one counter for all) is accepted.
			_, jv, _ := f.store.VersionedDocument(ctx, "jobs")
			global := url.Values{"csrf": {token}, "op": {"save"}, "limiter": {"jobs"}, "version": {jv}, "mode": {"add"},
				"name": {"all_jobs"}, "action": {"limit"}, "limit": {"100"}, "period_s": {"1"}}
			if resp, body := b.post("?limiter=jobs", global, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("global rule on jobs: %d\n%s", resp.StatusCode, body)
			}
			// Deleting a rule that is not published, or not a rule name, is refused.
			_, v3, _ := f.store.VersionedDocument(ctx, "api")
			for rule, want := range map[string]int{"per_ip": http.StatusNotFound, "Not A Name": http.StatusBadRequest} {
				resp, body := b.post("?limiter=api", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {v3}, "rule": {rule}}, f.srv.URL)
				if resp.StatusCode != want {
					t.Fatalf("delete %q: %d, want %d\n%s", rule, resp.StatusCode, want, body)
				}
			}
			if resp, body := b.post("?limiter=api", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {v3}, "rule": {"per_ip"}}, f.srv.URL); !strings.Contains(body, "it is in default_rules") {
				t.Fatalf("delete of a default rule does not say why: %d\n%s", resp.StatusCode, body)
			}
			// A clear without the confirmation step is refused.
			resp, body = b.post("?limiter=api", url.Values{"csrf": {token}, "op": {"clear"}, "limiter": {"api"}, "id.ip": {"192.0.2.1"}}, f.srv.URL)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "confirmation") {
				t.Fatalf("clear without confirm: %d\n%s", resp.StatusCode, body)
			}
		})
	}
}

// A published rule named as a rule of rate_limits.yaml is replaced by it
// (file is the higher tier): the page said the services apply it, and the
// editor's hint said that a file rule's name replaces that rule. The save
// is made, and the page warns that the file's rule replaces it.
func TestSavedRuleReplacedByHigherTier(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	if _, body := b.get("?limiter=api"); strings.Contains(body, "file rule's name replaces that rule") {
		t.Error("the editor's hint says a file rule's name replaces that rule")
	}
	_, v0, _ := f.store.VersionedDocument(ctx, "api")
	resp, body := b.post("?limiter=api", saveForm(token, v0, "per_user"), f.srv.URL)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	code, body := b.get(resp.Header.Get("Location"))
	msg := regexp.MustCompile(`(?s)<p class="notice (\w+)" id="message"[^>]*>(.*?)</p>`).FindStringSubmatch(body)
	if code != http.StatusOK || msg == nil || msg[1] != "warn" || strings.Contains(msg[2], "the services apply it") ||
		!strings.Contains(msg[2], "file") || !strings.Contains(msg[2], "replaces it") {
		t.Fatalf("page after publishing a rule the file tier replaces: %d, message %q; want a warning that the file's rule replaces it", code, msg)
	}
}
