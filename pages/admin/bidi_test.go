package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// A bidi override or an invisible character in a hand-written document is
// written as an escape, never raw: raw, U+202E turned the rest of the line
// around (a rule's description in the rules table; the limiter/rule label of
// an error about an invalid document), so the page showed other words than
// the document holds.
func TestBidiCharactersEscaped(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	seeded, _, err := f.store.RawDocument(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	write := func(rule string) {
		t.Helper()
		doc := strings.TrimSuffix(seeded, "}") + `,"published_rules":{"rules":[` + rule + `]}}`
		if err := f.client.Set(ctx, f.store.Key("api"), doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, rule, want string
	}{
		{"description", `{"name":"per_tenant","description":"allow\u202e\u200bdeny\nline two","limit":5,"period_s":60,"action":"limit","characteristics":["user"]}`,
			`&#34;allow\u202e\u200bdeny\nline two&#34;`},
		{"invalid rule name", `{"name":"evil\u202epmet","limit":5,"period_s":60,"action":"limit","characteristics":["user"]}`,
			`: &#34;evil\u202epmet&#34;: rule name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.rule)
			code, body := b.get("?limiter=api")
			if code != http.StatusOK || strings.ContainsAny(body, "\u202e\u200b") || !strings.Contains(body, tc.want) {
				t.Fatalf("status %d, raw U+202E or U+200B: %v, want %s\n%s", code, strings.ContainsAny(body, "\u202e\u200b"), tc.want, body)
			}
		})
	}
}
