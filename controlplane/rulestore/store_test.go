package rulestore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// designDocument is the design's example of a stored document
// (docs/design.md#the-rule-store), byte for byte.
const designDocument = `{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]},"published_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":25,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]}}`

// A document that another SDK wrote with a plain SET reads back, re-encodes
// to the same bytes, is enforced by a bound limiter, and survives an
// identical publish untouched.
func TestDesignDocumentRoundTrip(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		key := s.Key("autocomplete_users")
		if err := c.Set(ctx, key, designDocument, 0).Err(); err != nil {
			t.Fatal(err)
		}
		doc, err := s.Document(ctx, "autocomplete_users")
		if err != nil {
			t.Fatal(err)
		}
		out, err := config.MarshalLimiterRules(doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != designDocument {
			t.Fatalf("re-encoded document differs:\n got %s\nwant %s", out, designDocument)
		}

		lim := newLimiter(t, "autocomplete_users", ratelimit.NewMemoryStore())
		if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("limit_user_autocompletes_by_user", 300)}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if got := lim.Rules(); len(got) != 1 || limitOf(t, got, "limit_user_autocompletes_by_user") != 25 {
			t.Fatalf("limiter rules = %v, want the published limit 25 replacing the default 300", names(got))
		}

		// The same values published again: nothing written, bytes intact.
		req := request(t, map[string][]ratelimit.Rule{"autocomplete_users": {rule("limit_user_autocompletes_by_user", 25)}})
		res, err := s.Publish(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Changed) != 0 || res.Revision != 0 {
			t.Fatalf("identical publish wrote %v (revision %d)", res.Changed, res.Revision)
		}
		if got, _ := raw(t, c, key); got != designDocument {
			t.Fatalf("document changed by an identical publish: %s", got)
		}
		// A new value changes only the published limit.
		req.RateLimits["autocomplete_users"].Rules[0].Limit = ptr(uint32(30))
		if res, err = s.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Changed, []string{"autocomplete_users"}) || res.Revision != 1 {
			t.Fatalf("publish result %+v", res)
		}
		want := strings.Replace(designDocument, `"limit":25`, `"limit":30`, 1)
		if got, _ := raw(t, c, key); got != want {
			t.Fatalf("stored\n got %s\nwant %s", got, want)
		}
		// The publish indexed the document that the plain SET had not.
		entries, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Limiter != "autocomplete_users" || entries[0].Err != nil {
			t.Fatalf("List = %+v", entries)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func newLimiter(t testing.TB, name string, store ratelimit.Store) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Name: name, Store: store, Timeout: checkTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRejectsClusterPrefixWithoutHashTag(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.UnusedAddr(t)}})
	defer cc.Close()
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"labkit:ratelimit:rules:", false},
		{"rules:{}:", false},
		{"rules:{x", false},
		{"", true}, // DefaultPrefix
		{"labkit:{ratelimit}:rules:", true},
	} {
		_, err := New(cc, Options{Prefix: tc.prefix})
		if (err == nil) != tc.ok {
			t.Errorf("prefix %q on a cluster: err = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
	// A standalone client takes the labkit layout, and a forced cluster mode
	// applies the check.
	sc := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t)})
	defer sc.Close()
	if s, err := New(sc, Options{Prefix: "labkit:ratelimit:rules:"}); err != nil || s.Key("autocomplete_users") != "labkit:ratelimit:rules:autocomplete_users" {
		t.Fatalf("labkit layout: %v", err)
	}
	if _, err := New(sc, Options{Prefix: "labkit:ratelimit:rules:", ClusterMode: true}); err == nil {
		t.Fatal("ClusterMode without a hash tag accepted")
	}
	// A prefix starts every key: it is bounded as a limiter's is.
	long := "{rules}:" + strings.Repeat("p", ratelimit.MaxKeyPrefixLen-len("{rules}:"))
	if _, err := New(sc, Options{Prefix: long}); err != nil {
		t.Fatalf("prefix of MaxKeyPrefixLen bytes: %v", err)
	}
	if _, err := New(sc, Options{Prefix: long + "p"}); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Fatalf("prefix one byte over MaxKeyPrefixLen: err = %v, want a refusal", err)
	}
}

// Seed writes the file and default tiers and leaves the published tier.
func TestSeedKeepsPublishedTier(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		pub := request(t, map[string][]ratelimit.Rule{"search": {rule("published_one", 7)}})
		if _, err := s.Publish(ctx, pub); err != nil {
			t.Fatal(err)
		}
		res, err := s.Seed(ctx, map[string]tiers.Set{
			"search":   {File: []ratelimit.Rule{rule("from_file", 10)}, Defaults: []ratelimit.Rule{rule("app_default", 20)}},
			"projects": {}, // nothing to seed and no document: stays without one
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Changed, []string{"search"}) {
			t.Fatalf("seed changed %v", res.Changed)
		}
		doc, err := s.Document(ctx, "search")
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(protoNames(doc.FileRules), protoNames(doc.PublishedRules), protoNames(doc.DefaultRules)); got != "[from_file] [published_one] [app_default]" {
			t.Fatalf("tiers = %v", got)
		}
		if _, err := s.Document(ctx, "projects"); !errors.Is(err, ErrNoDocument) {
			t.Fatalf("projects: %v, want ErrNoDocument", err)
		}
		// A re-seed without the file rule empties the file tier; it stays
		// present (the service said: no file rules).
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {Defaults: []ratelimit.Rule{rule("app_default", 20)}}}); err != nil {
			t.Fatal(err)
		}
		got, _ := raw(t, c, s.Key("search"))
		if !strings.Contains(got, `"file_rules":{"rules":[]}`) || !strings.Contains(got, `"published_one"`) {
			t.Fatalf("after re-seed: %s", got)
		}
		// Seeding the same again writes nothing.
		before, _ := s.Revision(ctx)
		res, err = s.Seed(ctx, map[string]tiers.Set{"search": {Defaults: []ratelimit.Rule{rule("app_default", 20)}}})
		if err != nil || len(res.Changed) != 0 || res.Revision != before {
			t.Fatalf("identical seed: %+v, %v (revision before %d)", res, err, before)
		}
	})
}

// Publish upserts by name within the published tier, keeps the order of the
// rules it replaces, and leaves other limiters and tiers untouched.
func TestPublishUpsertsByName(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		if _, err := s.Seed(ctx, map[string]tiers.Set{
			"search":   {File: []ratelimit.Rule{rule("a", 1)}, Defaults: []ratelimit.Rule{rule("b", 2)}},
			"projects": {Defaults: []ratelimit.Rule{rule("p", 3)}},
		}); err != nil {
			t.Fatal(err)
		}
		projectsBefore, _ := raw(t, c, s.Key("projects"))
		for _, batch := range []map[string][]ratelimit.Rule{
			{"search": {rule("x", 10), rule("y", 11)}},
			{"search": {rule("z", 12), rule("x", 13)}}, // x replaced in place, z appended
		} {
			if _, err := s.Publish(ctx, request(t, batch)); err != nil {
				t.Fatal(err)
			}
		}
		doc, err := s.Document(ctx, "search")
		if err != nil {
			t.Fatal(err)
		}
		if got := protoNames(doc.PublishedRules); !slices.Equal(got, []string{"x", "y", "z"}) {
			t.Fatalf("published = %v", got)
		}
		if doc.PublishedRules.Rules[0].GetLimit() != 13 {
			t.Fatalf("x limit = %d, want 13", doc.PublishedRules.Rules[0].GetLimit())
		}
		if !slices.Equal(protoNames(doc.FileRules), []string{"a"}) || !slices.Equal(protoNames(doc.DefaultRules), []string{"b"}) {
			t.Fatal("publish touched the file or default tier")
		}
		if after, _ := raw(t, c, s.Key("projects")); after != projectsBefore {
			t.Fatalf("limiter outside the batch changed: %s", after)
		}
	})
}

// One invalid rule anywhere in a batch, or an unreadable stored document,
// writes nothing at all.
func TestBatchAtomicity(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		good := protoRule(t, "good", 5)
		for name, req := range map[string]*configv1.PublishRulesRequest{
			"limit 0": {RateLimits: map[string]*configv1.RuleList{
				"search":   {Rules: []*configv1.Rule{good}},
				"projects": {Rules: []*configv1.Rule{{Name: "bad", Action: configv1.Action_ACTION_LIMIT, Limit: ptr(uint32(0)), PeriodS: ptr(uint32(60))}}},
			}},
			"undeclared property": {RateLimits: map[string]*configv1.RuleList{
				"search":   {Rules: []*configv1.Rule{good}},
				"projects": {Rules: []*configv1.Rule{protoRuleWith(t, "bad", "scope")}},
			}},
			"undeclared limiter": {RateLimits: map[string]*configv1.RuleList{
				"search":  {Rules: []*configv1.Rule{good}},
				"nowhere": {Rules: []*configv1.Rule{good}},
			}},
			"duplicate names": {RateLimits: map[string]*configv1.RuleList{
				"search": {Rules: []*configv1.Rule{good, good}},
			}},
			"bad regex": {RateLimits: map[string]*configv1.RuleList{
				"search": {Rules: []*configv1.Rule{good, {Name: "re", Action: configv1.Action_ACTION_SKIP,
					Match: map[string]*configv1.MatchValue{"scope": {Kind: &configv1.MatchValue_Regex{Regex: "(("}}}}}},
			}},
		} {
			var ve *config.ValidationError
			if _, err := s.Publish(ctx, req); !errors.As(err, &ve) {
				t.Errorf("%s: err = %v, want a *config.ValidationError", name, err)
			}
		}
		for _, lim := range []string{"search", "projects", "nowhere"} {
			if v, ok := raw(t, c, s.Key(lim)); ok {
				t.Fatalf("%s written by a rejected batch: %s", lim, v)
			}
		}
		if rev, _ := s.Revision(ctx); rev != 0 {
			t.Fatalf("revision %d after rejected batches", rev)
		}
		// A corrupt document in the batch stops the whole batch too.
		if err := c.Set(ctx, s.Key("projects"), `{"published_rules":{"rules":[{"name":"x"}]}}`, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("good", 5)}, "projects": {rule("p", 1)}}))
		if err == nil || !strings.Contains(err.Error(), s.Key("projects")) {
			t.Fatalf("err = %v, want one naming the corrupt document", err)
		}
		if _, ok := raw(t, c, s.Key("search")); ok {
			t.Fatal("search written although the batch failed")
		}
	})
}

func protoRuleWith(t testing.TB, name, characteristic string) *configv1.Rule {
	r := protoRule(t, name, 5)
	r.Characteristics = []string{characteristic}
	return r
}

// Deletion is explicit, by name, all or nothing.
func TestDelete(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		if _, err := s.Seed(ctx, map[string]tiers.Set{"search": {File: []ratelimit.Rule{rule("f", 1)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{
			"search":   {rule("x", 1), rule("y", 2)},
			"projects": {rule("only", 3)},
		})); err != nil {
			t.Fatal(err)
		}
		// Omitting a rule in a later publish does not delete it.
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 4)}})); err != nil {
			t.Fatal(err)
		}
		doc, _ := s.Document(ctx, "search")
		if got := protoNames(doc.PublishedRules); !slices.Equal(got, []string{"x", "y"}) {
			t.Fatalf("published after a partial publish = %v", got)
		}

		before, _ := raw(t, c, s.Key("search"))
		for _, tc := range []struct {
			rules []string
			msg   string
		}{
			{[]string{"x", "typo"}, "rule typo is not published"},
			{[]string{"f"}, "it is in file_rules"},
			// a typo of a published rule names it: the rule meant stays in force
			{[]string{"yy"}, "rule yy is not published; did you mean y?"},
		} {
			_, err := s.Delete(ctx, "search", tc.rules...)
			if !isNotFound(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Delete(%v) = %v, want ErrRuleNotFound saying %q", tc.rules, err, tc.msg)
			}
		}
		if after, _ := raw(t, c, s.Key("search")); after != before {
			t.Fatal("a failed delete changed the document")
		}

		res, err := s.Delete(ctx, "search", "x")
		if err != nil || !slices.Equal(res.Changed, []string{"search"}) {
			t.Fatalf("Delete x: %+v, %v", res, err)
		}
		doc, _ = s.Document(ctx, "search")
		if got := protoNames(doc.PublishedRules); !slices.Equal(got, []string{"y"}) || !slices.Equal(protoNames(doc.FileRules), []string{"f"}) {
			t.Fatalf("after delete: published %v file %v", got, protoNames(doc.FileRules))
		}
		// The last rule of a published-only document takes the document and
		// its index entry with it.
		if _, err := s.Delete(ctx, "projects", "only"); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw(t, c, s.Key("projects")); ok {
			t.Fatal("empty document kept")
		}
		entries, _ := s.List(ctx)
		if len(entries) != 1 || entries[0].Limiter != "search" {
			t.Fatalf("index = %+v", entries)
		}
		for _, bad := range [][]string{{"Search", "x"}, {"search"}, {"search", "bad-name"}} {
			if _, err := s.Delete(ctx, bad[0], bad[1:]...); err == nil {
				t.Errorf("Delete(%q) accepted", bad)
			}
		}
	})
}

// Many publishers at once, on the same and on different limiters, lose no
// rule: each write is applied exactly once.
func TestConcurrentPublishersLoseNothing(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		prefix := testPrefix(t)
		const writers, perWriter = 12, 6
		var wg sync.WaitGroup
		errs := make(chan error, writers*perWriter)
		for w := range writers {
			// Each writer its own Store, as separate processes would have.
			s := newStore(t, c, Options{Prefix: prefix})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					batch := map[string][]ratelimit.Rule{
						"shared":                    {rule(fmt.Sprintf("w%d_r%d", w, i), int64(i+1))},
						fmt.Sprintf("own_%d", w):    {rule(fmt.Sprintf("r%d", i), int64(i+1))},
						fmt.Sprintf("pair_%d", w%4): {rule(fmt.Sprintf("w%d_r%d", w, i), 1)},
					}
					if _, err := s.Publish(ctx, request(t, batch)); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		s := newStore(t, c, Options{Prefix: prefix})
		check := func(lim string, want []string) {
			t.Helper()
			doc, err := s.Document(ctx, lim)
			if err != nil {
				t.Fatal(err)
			}
			got := protoNames(doc.PublishedRules)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: %d rules, want %d; missing %v", lim, len(got), len(want), missing(want, got))
			}
		}
		var shared []string
		pairs := map[int][]string{}
		for w := range writers {
			var own []string
			for i := range perWriter {
				shared = append(shared, fmt.Sprintf("w%d_r%d", w, i))
				pairs[w%4] = append(pairs[w%4], fmt.Sprintf("w%d_r%d", w, i))
				own = append(own, fmt.Sprintf("r%d", i))
			}
			check(fmt.Sprintf("own_%d", w), own)
		}
		check("shared", shared)
		for p, want := range pairs {
			check(fmt.Sprintf("pair_%d", p), want)
		}
		// Every publish changed something, and each bumped the revision once.
		if rev, _ := s.Revision(ctx); rev != writers*perWriter {
			t.Fatalf("revision %d, want %d", rev, writers*perWriter)
		}
		entries, _ := s.List(ctx)
		if len(entries) != 1+writers+4 {
			t.Fatalf("index holds %d limiters, want %d", len(entries), 1+writers+4)
		}
	})
}

func missing(want, got []string) []string {
	var out []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			out = append(out, w)
		}
	}
	return out
}

// An invalid name is refused before Redis is asked, and the error quotes it
// short: a name is as long as the form or request that sent it, and the
// error reaches the admin page and the audit line.
func TestInvalidNameQuotedShort(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.UnusedAddr(t)})
	defer c.Close()
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("X", 100_000)
	calls := map[string]func() error{
		"Delete's rule":    func() error { _, err := s.Delete(ctx, "search", huge); return err },
		"Delete's limiter": func() error { _, err := s.Delete(ctx, huge, "x"); return err },
		"Remove":           func() error { _, err := s.Remove(ctx, huge); return err },
		"Seed":             func() error { _, err := s.Seed(ctx, map[string]tiers.Set{huge: {}}); return err },
	}
	for name, call := range calls {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "must match ^[a-z0-9_]{1,64}$") || len(err.Error()) > 200 {
			t.Errorf("%s of a %d-byte name: error of %d bytes: %.300v", name, len(huge), len(fmt.Sprint(err)), err)
		}
	}
}

// scriptsOnly is a client that offers the store nothing but scripts.
type scriptsOnly struct{ redis.Scripter }

// The store needs nothing of a client but its scripts: every read and write
// runs on one that offers only redis.Scripter. Client required MGet,
// SMembers and HMGet too, which the store no longer called, so a client
// (or a wrapper) without them could not be given to New.
func TestClientNeedsOnlyScripts(t *testing.T) {
	s := newStore(t, scriptsOnly{redistest.Client(t)}, Options{Available: available(t)})
	lim := newLimiter(t, "search", ratelimit.NewMemoryStore())
	if err := s.Bind(lim, tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 100)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SeedBound(ctx); err != nil {
		t.Fatalf("SeedBound: %v", err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 2)}})); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 2 {
		t.Fatalf("the bound limiter runs by_user at %d, want the published 2", got)
	}
	if entries, err := s.List(ctx); err != nil || len(entries) != 1 || entries[0].Document == nil {
		t.Fatalf("List: %+v, %v", entries, err)
	}
	if rev, err := s.Revision(ctx); err != nil || rev != 2 {
		t.Fatalf("Revision = %d, %v; want 2", rev, err)
	}
	if _, err := s.GC(ctx, available(t)); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := s.Delete(ctx, "search", "by_user"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}
