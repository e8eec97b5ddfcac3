package rulestore

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

// FuzzStoredDocument writes arbitrary bytes where a limiter's document
// lives, as another SDK or a hand-made SET may, over a good document that a
// bound limiter enforces. A refresh applies them exactly when they pass the
// checks a write runs (the document decodes, checkRead, the merge with the
// local tiers); otherwise the limiter keeps its rules and its status says
// why. Document reads them as valid or as ErrInvalidDocument, and Remove
// takes them away whatever they are.
func FuzzStoredDocument(f *testing.F) {
	for _, s := range []string{
		`{"published_rules":{"rules":[{"name":"by_ip","limit":5,"period_s":60,"action":"limit","characteristics":["ip"]}]}}`,
		`{"published_rules":{"rules":[{"name":"by_ip","limit":5,"period_s":60,"action":"limit","characteristics":["nope"]}]}}`,
		`{"published_rules":{"rules":[{"name":"s","action":"skip"}],"mode":"shadow"}}`,
		`{"file_rules":{"rules":[{"name":"a","action":"skip"},{"name":"a","action":"skip"}]}}`,
		`{"default_rules":{"rules":[]},"published_rules":null}`,
		`{}`, ``, `null`, `[]`, `{"x":1}`,
	} {
		f.Add([]byte(s))
	}
	c := redistest.Client(f)
	s, err := New(c, Options{Prefix: redistest.Prefix(f) + "{rules}:", Available: available(f), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	lim, err := ratelimit.New(ratelimit.Config{Name: "search", Store: redisstore.New(c), KeyPrefix: redistest.Prefix(f), Timeout: checkTimeout})
	if err != nil {
		f.Fatal(err)
	}
	local := tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}
	if err := s.Bind(lim, local); err != nil {
		f.Fatal(err)
	}
	if _, err := s.Publish(ctx, request(f, map[string][]ratelimit.Rule{"search": {rule("good", 5)}})); err != nil {
		f.Fatal(err)
	}
	key := s.Key("search")
	good, err := c.Get(ctx, key).Result()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := c.Set(ctx, key, good, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatalf("the good document: %v", err)
		}
		held := names(lim.Rules())
		if err := c.Set(ctx, key, data, 0).Err(); err != nil {
			t.Fatal(err)
		}
		refreshErr := s.Refresh(ctx)
		doc, docErr := s.Document(ctx, "search")
		if docErr != nil && !errors.Is(docErr, ErrInvalidDocument) {
			t.Fatalf("Document: %v, not ErrInvalidDocument", docErr)
		}
		writable := docErr == nil && s.checkRead("search", doc) == nil
		var merged []ratelimit.Rule
		if writable {
			_, merged, err = effective(doc, local)
			writable = err == nil
		}
		switch {
		case refreshErr == nil && !writable:
			t.Fatalf("a refresh applied a document no write would store: %q (Document: %v)", data, docErr)
		case refreshErr != nil && writable:
			t.Fatalf("a refresh rejected a document a write would store: %v\n%q", refreshErr, data)
		case refreshErr == nil:
			if got := names(lim.Rules()); !slices.Equal(got, names(merged)) {
				t.Fatalf("the limiter enforces %v, the document says %v", got, names(merged))
			}
		default:
			if got := names(lim.Rules()); !slices.Equal(got, held) {
				t.Fatalf("a rejected document changed the limiter's rules from %v to %v", held, got)
			}
			if _, err := s.RefreshStatus("search"); err == nil {
				t.Fatal("a rejected document leaves no error in the refresh status")
			}
		}
		if _, err := s.Remove(ctx, "search"); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if doc, err := s.Document(ctx, "search"); doc != nil || !errors.Is(err, ErrNoDocument) {
			t.Fatalf("after Remove the document reads %v, %v", doc, err)
		}
	})
}
