package admin_test

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
	"google.golang.org/protobuf/proto"
)

// A limiter the rule store holds but available_limiters.yaml no longer
// declares (an orphan) keeps what a writer can always do: its page offers
// Delete for its published rules and Remove for an invalid document, and
// both work; it offers no editor, a save is refused saying why, and the
// page says all this instead of calling the limiter read-only. A delete
// that fails says why on the page, as it does for a declared limiter.
func TestOrphanRulesCanBeDeleted(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	// Published before the limiter left available_limiters.yaml: a store
	// without the list accepts any limiter.
	old, err := rulestore.New(f.client, rulestore.Options{Prefix: strings.TrimSuffix(f.store.Key("x"), "x"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(name string) *configv1.Rule {
		return &configv1.Rule{Name: name, Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(5), PeriodS: proto.Uint32(60), Characteristics: []string{"user"}}
	}
	if _, err := old.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{
		"legacy": {Rules: []*configv1.Rule{rule("old_a"), rule("old_b")}},
	}}); err != nil {
		t.Fatal(err)
	}

	code, body := b.get("?limiter=legacy")
	if code != http.StatusOK {
		t.Fatalf("orphan page: %d\n%s", code, body)
	}
	for _, want := range []string{`data-delete="old_a"`, `data-delete="old_b"`, "can be deleted"} {
		if !strings.Contains(body, want) {
			t.Errorf("orphan page lacks %s", want)
		}
	}
	for _, unwanted := range []string{"read-only", `id="rule-form"`, `data-edit=`} {
		if strings.Contains(body, unwanted) {
			t.Errorf("orphan page offers or says %s", unwanted)
		}
	}

	_, version, _ := f.store.VersionedDocument(ctx, "legacy")
	del := func(rule string) (*http.Response, string) {
		return b.post("?limiter=legacy", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"legacy"}, "version": {version}, "rule": {rule}}, f.srv.URL)
	}
	if resp, body := del("nope"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "rule nope is not published") {
		t.Fatalf("delete of an unpublished rule on an orphan: %d, want 404 saying why\n%s", resp.StatusCode, body)
	}
	if resp, body := del("old_a"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete on an orphan: %d\n%s", resp.StatusCode, body)
	}
	doc, err := f.store.Document(ctx, "legacy")
	if err != nil || len(doc.GetPublishedRules().GetRules()) != 1 || doc.GetPublishedRules().GetRules()[0].GetName() != "old_b" {
		t.Fatalf("after the delete: %v, %v", doc, err)
	}
	if !strings.Contains(f.audit.String(), `"op":"delete","limiter":"legacy"`) {
		t.Errorf("no audit line for the delete:\n%s", f.audit.String())
	}

	form := saveForm(token, "", "new_rule")
	form.Set("limiter", "legacy")
	before := f.storeState(t)
	if resp, body := b.post("?limiter=legacy", form, f.srv.URL); resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "is not declared in available_limiters.yaml: its published rules can be deleted, not published") {
		t.Fatalf("save on an orphan: %d, want 422 saying why\n%s", resp.StatusCode, body)
	}
	if after := f.storeState(t); len(after) != len(before) || after[f.store.Key("legacy")] != before[f.store.Key("legacy")] {
		t.Fatal("a refused save on an orphan wrote")
	}

	// An invalid orphan document is offered for removal, and removed.
	if err := f.client.Set(ctx, f.store.Key("legacy"), "not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := b.get("?limiter=legacy"); code != http.StatusOK || !strings.Contains(body, `id="remove-form"`) {
		t.Fatalf("page of an invalid orphan document offers no removal: %d\n%s", code, body)
	}
	_, version, _ = f.store.VersionedDocument(ctx, "legacy")
	remove := url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"legacy"}, "version": {version}, "confirm": {"yes"}}
	if resp, body := b.post("?limiter=legacy", remove, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove of an invalid orphan document: %d\n%s", resp.StatusCode, body)
	}
	if n, _ := f.client.Exists(ctx, f.store.Key("legacy")).Result(); n != 0 {
		t.Fatal("the invalid orphan document is still there")
	}
}
