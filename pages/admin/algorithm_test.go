package admin_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// A rule published with an algorithm and a burst is stored with them, listed
// with them, and comes back in the editor, so that a later edit keeps them.
func TestPublishAlgorithm(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	_, v0, _ := f.store.VersionedDocument(ctx, "api")
	form := saveForm(token, v0, "bucket")
	form.Set("algorithm", "token_bucket")
	form.Set("burst", "20")
	if resp, body := b.post("?limiter=api", form, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add: %d\n%s", resp.StatusCode, body)
	}
	doc, _ := f.store.Document(ctx, "api")
	rules := doc.GetPublishedRules().GetRules()
	if len(rules) != 1 || rules[0].GetAlgorithm() != configv1.Algorithm_ALGORITHM_TOKEN_BUCKET || rules[0].GetBurst() != 20 {
		t.Fatalf("stored: %v", rules)
	}
	code, body := b.get("?limiter=api")
	if code != http.StatusOK || !strings.Contains(body, `<small class="algorithm">token_bucket, burst 20</small>`) {
		t.Fatalf("the listing does not show the algorithm (status %d)\n%s", code, body)
	}
	code, body = b.get("?limiter=api&edit=bucket")
	for _, want := range []string{`<option value="token_bucket" selected>`, `id="f-burst" name="burst" value="20"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("edit form lacks %s (status %d)\n%s", want, code, body)
		}
	}
	// Back to the default: stored without an algorithm, as before the field existed.
	_, v1, _ := f.store.VersionedDocument(ctx, "api")
	form = saveForm(token, v1, "bucket")
	form.Set("mode", "edit")
	form.Set("algorithm", "fixed_window")
	if resp, body := b.post("?limiter=api", form, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("edit: %d\n%s", resp.StatusCode, body)
	}
	doc, _ = f.store.Document(ctx, "api")
	if r := doc.GetPublishedRules().GetRules()[0]; r.GetAlgorithm() != configv1.Algorithm_ALGORITHM_UNSPECIFIED || r.Burst != nil {
		t.Fatalf("after the edit: %v", r)
	}
}

// A rule that counts every identifier lacking its characteristic in one
// counter (count_missing) says so in the rules tables, as the debug page
// does: it was listed as one counter per value, and only its editor showed
// the shared bucket.
func TestCountMissingShown(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	lim, per := uint32(10), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{
		{Name: "shared", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"user"}, CountMissing: true},
		{Name: "per_user_only", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"user"}}}}}}); err != nil {
		t.Fatal(err)
	}
	code, body := b.get("?limiter=api")
	rows := regexp.MustCompile(`(?s)<tr data-rule="(shared|per_user_only)" data-tier="published".*?</tr>`).FindAllStringSubmatch(body, -1)
	if code != http.StatusOK || len(rows) != 4 { // the effective list and the published tier
		t.Fatalf("status %d, %d rows of the two rules; want 4\n%s", code, len(rows), body)
	}
	for _, row := range rows {
		if shared := strings.Contains(row[0], "share one counter"); shared != (row[1] == "shared") {
			t.Errorf("row of %s says a shared counter: %v\n%s", row[1], shared, row[0])
		}
	}
}
