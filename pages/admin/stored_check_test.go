package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A stored document whose rule counts by a property the limiter's
// available_properties no longer list (another SDK wrote it, or the
// property was taken out of available_limiters.yaml) is one the services'
// replicas reject and the store publishes nothing onto: the page shows it
// as invalid, with the reason, and removes it on request, instead of
// listing it as valid and refusing its removal.
func TestStoredDocumentChecked(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	seeded, _, err := f.store.RawDocument(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.TrimSuffix(seeded, "}") +
		`,"published_rules":{"rules":[{"name":"per_tenant","limit":5,"period_s":60,"action":"limit","characteristics":["tenant"],"match":{}}]}}`
	if err := f.client.Set(ctx, f.store.Key("api"), doc, 0).Err(); err != nil {
		t.Fatal(err)
	}
	const why = `characteristic &#34;tenant&#34; is not one of the limiter&#39;s available_properties`
	code, body := b.get("?limiter=api")
	for _, want := range []string{`id="document-error"`, why, `id="remove-form"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("the limiter's page lacks %s (status %d)\n%s", want, code, body)
		}
	}
	if code, body := b.get(""); code != http.StatusOK || !strings.Contains(body, "document invalid: ") || !strings.Contains(body, why) {
		t.Fatalf("the index does not list the document as invalid (status %d)\n%s", code, body)
	}
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	remove := url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"api"}, "version": {version}, "confirm": {"yes"}}
	if resp, body := b.post("?limiter=api", remove, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %d\n%s", resp.StatusCode, body)
	}
	if n, _ := f.client.Exists(ctx, f.store.Key("api")).Result(); n != 0 {
		t.Fatal("the document is still there")
	}
}
