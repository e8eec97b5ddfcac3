package rulestore

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// manyRules returns n rules named prefix0, prefix1, ...
func manyRules(n int, prefix string) []ratelimit.Rule {
	out := make([]ratelimit.Rule, n)
	for i := range out {
		out[i] = rule(fmt.Sprintf("%s%d", prefix, i), 5)
	}
	return out
}

// publishedDoc is the stored JSON of a document whose published tier holds
// rules, written as another writer (a hand-made SET) would.
func publishedDoc(t testing.TB, rules []ratelimit.Rule) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"published_rules":{"rules":[`)
	for i, r := range rules {
		p, err := config.RuleToProto(r)
		if err != nil {
			t.Fatal(err)
		}
		j, err := config.MarshalRule(p)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(j)
	}
	b.WriteString(`]}}`)
	return b.String()
}

// The write path refuses what the read path would reject, before storing
// anything: a 20,000-rule publish, a publish that would take the published
// tier past ratelimit.MaxRulesPerTier, one that would take the document past
// ratelimit.MaxDocumentBytes. A normal publish works right after each.
func TestPublishOverBoundsIsRefusedBeforeStoring(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})

		_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": manyRules(20_000, "r")}))
		var ve *config.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "search/r256: 20000 rules in this list, at most 256 per tier") {
			t.Fatalf("20,000-rule publish: %v", err)
		}
		t.Logf("20,000-rule publish: %v", firstLine(err))
		if v, ok := raw(t, c, s.Key("search")); ok {
			t.Fatalf("stored by a refused publish: %d bytes", len(v))
		}
		mustPublish(t, s, "search", rule("normal", 3))

		// Rules accumulate over batches, each valid alone: the batch that
		// would take the tier over the bound is refused inside the write.
		for i := 0; i < ratelimit.MaxRulesPerTier-1; i += 85 {
			mustPublish(t, s, "search", manyRules(ratelimit.MaxRulesPerTier, "acc")[i:min(i+85, ratelimit.MaxRulesPerTier-1)]...)
		}
		before, _ := raw(t, c, s.Key("search"))
		rev, _ := s.Revision(ctx)
		_, err = s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("one_too_many", 1)}}))
		if !errors.Is(err, ErrOverBounds) || !strings.Contains(err.Error(), "published_rules would hold 257 rules, at most 256") {
			t.Fatalf("publish over the tier bound: %v", err)
		}
		if after, _ := raw(t, c, s.Key("search")); after != before {
			t.Fatal("a refused publish changed the document")
		}
		if r, _ := s.Revision(ctx); r != rev {
			t.Fatalf("revision moved from %d to %d", rev, r)
		}
		// Replacing a rule by name keeps the count: accepted.
		mustPublish(t, s, "search", rule("normal", 4))
		if _, err := s.Document(ctx, "search"); err != nil {
			t.Fatalf("the full document must read back: %v", err)
		}

		// Bytes: rules each of about 10 kB.
		big := func(i int) *configv1.Rule {
			r := protoRule(t, fmt.Sprintf("big%d", i), 5)
			vs := make([]string, 1000)
			for j := range vs {
				vs[j] = fmt.Sprintf("value_%04d", j)
			}
			r.Match = map[string]*configv1.MatchValue{"user": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: vs}}}}
			return r
		}
		var refused error
		for i := 0; i < 200 && refused == nil; i += 10 {
			batch := &configv1.RuleList{}
			for j := range 10 {
				batch.Rules = append(batch.Rules, big(i+j))
			}
			_, refused = s.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"projects": batch}})
		}
		if !errors.Is(refused, ErrOverBounds) || !strings.Contains(refused.Error(), "bytes, at most 1048576") {
			t.Fatalf("publish over the byte bound: %v", refused)
		}
		if _, err := s.Document(ctx, "projects"); err != nil {
			t.Fatalf("the document under the byte bound must read back: %v", err)
		}
		mustPublish(t, s, "search", rule("normal", 5))
		mustPublish(t, s, "projects", rule("after_refusal", 2))
	})
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

func mustPublish(t *testing.T, s *Store, limiter string, rules ...ratelimit.Rule) {
	t.Helper()
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{limiter: rules})); err != nil {
		t.Fatal(err)
	}
}

// A stored document that no process would load (written past the store:
// by hand, by another SDK) never wedges the store: Delete shrinks it, Remove
// takes it away whatever the key holds, and writing works again after.
func TestInvalidStoredDocumentCanBeShrunkOrRemoved(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		huge := manyRules(2_000, "r") // over the rules bound, within the bytes
		if err := c.Set(ctx, s.Key("search"), publishedDoc(t, huge), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SAdd(ctx, s.indexKey(), "search").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Document(ctx, "search"); !errors.Is(err, ErrInvalidDocument) {
			t.Fatalf("Document of a 2,000-rule document: %v", err)
		}
		_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}}))
		if !errors.Is(err, ErrInvalidDocument) || !strings.Contains(err.Error(), "Remove") {
			t.Fatalf("publish onto it: %v", err)
		}
		// Delete shrinks it back under the bound.
		var drop []string
		for _, r := range huge[ratelimit.MaxRulesPerTier:] {
			drop = append(drop, r.Name)
		}
		if _, err := s.Delete(ctx, "search", drop...); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if d, err := s.Document(ctx, "search"); err != nil || len(d.GetPublishedRules().GetRules()) != ratelimit.MaxRulesPerTier {
			t.Fatalf("after delete: %v", err)
		}

		// One over the byte bound is not read by a write either: parsing it
		// would hold Redis, and every check on it, for as long as that takes
		// (seconds for a few MB). Delete says to Remove it, and writes nothing.
		big := publishedDoc(t, manyRules(20_000, "r"))
		if len(big) <= ratelimit.MaxDocumentBytes {
			t.Fatalf("the document is %d bytes, within the bound", len(big))
		}
		if err := c.Set(ctx, s.Key("search"), big, 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err = s.Delete(ctx, "search", "r0")
		if !errors.Is(err, ErrInvalidDocument) || !strings.Contains(err.Error(), "bytes, at most") || !strings.Contains(err.Error(), "Remove") {
			t.Fatalf("delete from a document over the byte bound: %v", err)
		}
		if v, _ := c.Get(ctx, s.Key("search")).Result(); v != big {
			t.Fatal("a refused delete changed the document")
		}

		for what, set := range map[string]func(key string) error{
			"garbage": func(key string) error { return c.Set(ctx, key, "not json", 0).Err() },
			"a hash":  func(key string) error { return c.HSet(ctx, key, "published_rules", "{}").Err() },
			"too large": func(key string) error {
				return c.Set(ctx, key, strings.Repeat(" ", ratelimit.MaxDocumentBytes+1), 0).Err()
			},
		} {
			if err := c.Del(ctx, s.Key("search")).Err(); err != nil {
				t.Fatal(err)
			}
			if err := set(s.Key("search")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}})); !errors.Is(err, ErrInvalidDocument) {
				t.Fatalf("%s: publish onto it: %v", what, err)
			}
			res, err := s.Remove(ctx, "search")
			if err != nil || len(res.Changed) != 1 {
				t.Fatalf("%s: remove: %+v %v", what, res, err)
			}
			if n, _ := c.Exists(ctx, s.Key("search")).Result(); n != 0 {
				t.Fatalf("%s: still there after Remove", what)
			}
			if ok, _ := c.SIsMember(ctx, s.indexKey(), "search").Result(); ok {
				t.Fatalf("%s: still indexed after Remove", what)
			}
			mustPublish(t, s, "search", rule("x", 1))
		}
		if res, err := s.Remove(ctx, "nothing_here"); err != nil || len(res.Changed) != 0 {
			t.Fatalf("remove of nothing: %+v %v", res, err)
		}
	})
}

// A replica never receives a document over ratelimit.MaxDocumentBytes: with
// an 11.6 MB document in the store its heap stays small, refresh after
// refresh, and the limiter keeps its last good rules.
func TestReplicaHeapWithHugeDocument(t *testing.T) {
	c := redistest.Client(t)
	var logs testlog.Buffer
	metrics := &recordingMetrics{}
	s, lim := publishedSearch(t, c, Options{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	doc := publishedDoc(t, manyRules(1, "r"))
	doc = doc[:len(doc)-1] + `,"pad":"` + strings.Repeat("x", 11_600_000) + `"}`
	if err := c.Set(ctx, s.Key("search"), doc, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 10 {
		if err := s.Refresh(ctx); !errors.Is(err, ErrInvalidDocument) || !strings.Contains(err.Error(), "holds 11600") {
			t.Fatalf("refresh: %v", err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	alloc, heap := after.TotalAlloc-before.TotalAlloc, int64(after.HeapAlloc)-int64(before.HeapAlloc)
	t.Logf("10 refreshes with an 11.6 MB document: %d bytes allocated, heap %+d bytes (%d in use)", alloc, heap, after.HeapAlloc)
	if alloc > 4<<20 || heap > 4<<20 {
		t.Fatalf("10 refreshes allocated %d bytes, heap grew by %d: the document was read", alloc, heap)
	}
	if got := lim.Rules(); limitOf(t, got, "by_user") != 2 {
		t.Fatalf("rules changed: %v", names(got))
	}
	if n := strings.Count(logs.String(), "rate_limit_rule_document_rejected"); n != 1 || len(metrics.rejected) != 1 {
		t.Fatalf("%d rejection logs, %d metrics: want 1 each", n, len(metrics.rejected))
	}
}

// costlyRejection is valid JSON of the schema, near the byte bound, that
// every reader rejects for its rule count (257 rules in a tier): costly to
// parse.
func costlyRejection(t *testing.T) string {
	t.Helper()
	rules := manyRules(ratelimit.MaxRulesPerTier+1, "r")
	for i := range rules {
		vs := make([]any, 400)
		for j := range vs {
			vs[j] = fmt.Sprintf("v%d", j)
		}
		rules[i].Match = map[string]ratelimit.Matcher{"user": ratelimit.OneOf(vs...)}
	}
	doc := publishedDoc(t, rules)
	if len(doc) > ratelimit.MaxDocumentBytes {
		t.Fatalf("test document of %d bytes is over the byte bound", len(doc))
	}
	return doc
}

// A rejected document is parsed once: later refreshes that find it again
// cost its transfer, not another parse.
func TestReplicaRemembersRejectedDocument(t *testing.T) {
	c := redistest.Client(t)
	s, lim := publishedSearch(t, c, Options{})
	doc := costlyRejection(t)
	if err := c.Set(ctx, s.Key("search"), doc, 0).Err(); err != nil {
		t.Fatal(err)
	}
	refresh := func() uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := s.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "257 rules in this list") {
			t.Fatalf("refresh: %v", err)
		}
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	first := refresh()
	var again uint64
	for range 5 {
		again += refresh()
	}
	t.Logf("document of %d bytes: first refresh allocated %d bytes, the next five %d in all", len(doc), first, again)
	if again > first {
		t.Fatalf("five refreshes of a remembered rejection allocated %d bytes, more than the one parse (%d)", again, first)
	}
	if limitOf(t, lim.Rules(), "by_user") != 2 {
		t.Fatal("rules changed")
	}
}

// A document that flips between a valid and an invalid version (two
// writers at odds, a deploy loop) costs one parse of the invalid one, not
// one at every flip back to it; each flip back is still logged and counted,
// as the valid version was accepted in between, and the valid one stays.
func TestReplicaRemembersRejectionAcrossFlips(t *testing.T) {
	c := redistest.Client(t)
	var logs testlog.Buffer
	metrics := &recordingMetrics{}
	s, lim := publishedSearch(t, c, Options{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	good, err := c.Get(ctx, s.Key("search")).Result()
	if err != nil {
		t.Fatal(err)
	}
	bad := costlyRejection(t)
	refresh := func(doc string, valid bool) uint64 {
		t.Helper()
		if err := c.Set(ctx, s.Key("search"), doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := s.Refresh(ctx)
		runtime.ReadMemStats(&after)
		if valid != (err == nil) || (err != nil && !strings.Contains(err.Error(), "257 rules in this list")) {
			t.Fatalf("refresh: %v, want valid %v", err, valid)
		}
		if limitOf(t, lim.Rules(), "by_user") != 2 {
			t.Fatal("rules changed")
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	first := refresh(bad, false)
	var flips uint64
	for range 5 {
		flips += refresh(good, true)
		flips += refresh(bad, false)
	}
	t.Logf("document of %d bytes: first rejection allocated %d bytes, five flips back and forth %d in all", len(bad), first, flips)
	if flips > first {
		t.Fatalf("five flips to a remembered rejection allocated %d bytes, more than its one parse (%d)", flips, first)
	}
	if n := strings.Count(logs.String(), "rate_limit_rule_document_rejected"); n != 6 || len(metrics.rejected) != 6 {
		t.Fatalf("%d rejection logs, %d metrics: want 6 each, one per flip to the invalid version", n, len(metrics.rejected))
	}
}

// A rejected document stays remembered across SetLocal (the service
// reloaded its rate_limits.yaml): the refresh after it judges the document
// again under the new local tiers, but the same rejection is not logged or
// counted again, as if it were a new one.
func TestRejectionRememberedAcrossSetLocal(t *testing.T) {
	var logs testlog.Buffer
	metrics := &recordingMetrics{}
	c := redistest.Client(t)
	s, lim := publishedSearch(t, c, Options{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := c.Set(ctx, s.Key("search"), `{"published_rules":`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if i == 1 {
			if err := s.SetLocal(ctx, "search", tiers.Set{Defaults: []ratelimit.Rule{rule("by_user", 50)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Refresh(ctx); !errors.Is(err, ErrInvalidDocument) {
			t.Fatalf("refresh %d: %v, want ErrInvalidDocument", i, err)
		}
	}
	if got := limitOf(t, lim.Rules(), "by_user"); got != 2 {
		t.Fatalf("by_user is %d, want the last good document's 2", got)
	}
	if n := strings.Count(logs.String(), "msg=rate_limit_rule_document_rejected"); n != 1 || len(metrics.rejected) != 1 {
		t.Fatalf("one bad document, a SetLocal between refreshes: %d WARN lines, %d rejections counted, want 1 each\n%s",
			n, len(metrics.rejected), logs.String())
	}
}

// A document key of another Redis type is an unreadable document, not "no
// document": the limiter keeps its last good rules, and the rejection is
// logged and counted like a bad document's.
func TestWrongTypeKeyKeepsLastGood(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		var logs testlog.Buffer
		metrics := &recordingMetrics{}
		s, lim := publishedSearch(t, c, Options{Metrics: metrics, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err := c.Del(ctx, s.Key("search")).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, s.Key("search"), "published_rules", "x").Err(); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := s.Refresh(ctx); !errors.Is(err, ErrInvalidDocument) || !strings.Contains(err.Error(), "is a Redis hash, not a string") {
				t.Fatalf("refresh: %v", err)
			}
		}
		if got := lim.Rules(); limitOf(t, got, "by_user") != 2 {
			t.Fatalf("the published tier was dropped: by_user is %d", limitOf(t, got, "by_user"))
		}
		if n := strings.Count(logs.String(), "level=WARN msg=rate_limit_rule_document_rejected"); n != 1 || len(metrics.rejected) != 1 {
			t.Fatalf("%d WARN lines, %d rejections counted: want 1 each\n%s", n, len(metrics.rejected), logs.String())
		}
		if _, err := s.RefreshStatus("search"); !errors.Is(err, ErrInvalidDocument) {
			t.Fatalf("RefreshStatus: %v", err)
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != 1 || !errors.Is(entries[0].Err, ErrInvalidDocument) {
			t.Fatalf("List: %+v %v", entries, err)
		}
	})
}

// The index of limiters is bounded on both paths: a publish or seed that
// would add a limiter past MaxLimiters is refused whole, and an index over it
// (written past the store) is refused by List and GC before its members are
// read. Writes to indexed limiters, Delete and Remove always proceed, so the
// index can be brought back under the bound.
func TestIndexOfLimitersIsBounded(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		full := map[string][]ratelimit.Rule{}
		for i := range MaxLimiters {
			full[fmt.Sprintf("l%04d", i)] = []ratelimit.Rule{rule("r", 5)}
		}
		if _, err := s.Publish(ctx, request(t, full)); err != nil {
			t.Fatal(err)
		}
		rev, _ := s.Revision(ctx)

		_, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"one_too_many": {rule("r", 5)}}))
		if !errors.Is(err, ErrOverBounds) || !strings.Contains(err.Error(), "limiter one_too_many: the index of limiters would hold 1025 limiters, at most 1024") {
			t.Fatalf("publish of a new limiter into a full index: %v", err)
		}
		_, err = s.Seed(ctx, map[string]tiers.Set{"l0000": {Defaults: []ratelimit.Rule{rule("d", 1)}}, "one_too_many": {Defaults: []ratelimit.Rule{rule("d", 1)}}})
		if !errors.Is(err, ErrOverBounds) {
			t.Fatalf("seed of a new limiter into a full index: %v", err)
		}
		if exists(t, c, s.Key("one_too_many")) || c.SIsMember(ctx, s.indexKey(), "one_too_many").Val() {
			t.Fatal("a refused write stored the new limiter")
		}
		if _, ok := raw(t, c, s.Key("l0000")); !ok {
			t.Fatal("l0000 lost its document")
		}
		if r, _ := s.Revision(ctx); r != rev {
			t.Fatalf("refused writes moved the revision from %d to %d", rev, r)
		}
		mustPublish(t, s, "l0000", rule("r", 6)) // an indexed limiter: accepted
		if entries, err := s.List(ctx); err != nil || len(entries) != MaxLimiters {
			t.Fatalf("List of a full index: %d entries, %v", len(entries), err)
		}

		// Another writer takes the index past the bound.
		if err := c.SAdd(ctx, s.indexKey(), "hand_written").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx); !errors.Is(err, ErrOverBounds) || !strings.Contains(err.Error(), "holds 1025 limiters, at most 1024") {
			t.Fatalf("List of an index over the bound: %v", err)
		}
		if _, err := s.GC(ctx, available(t)); !errors.Is(err, ErrOverBounds) {
			t.Fatalf("GC of an index over the bound: %v", err)
		}
		// Every write that adds no limiter still works.
		mustPublish(t, s, "l0001", rule("more", 2))
		if _, err := s.Delete(ctx, "l0001", "more"); err != nil {
			t.Fatalf("Delete on an index over the bound: %v", err)
		}
		if _, err := s.Delete(ctx, "l0002", "r"); err != nil {
			t.Fatalf("Delete of a last rule on an index over the bound: %v", err)
		}
		if _, err := s.Remove(ctx, "l0003"); err != nil {
			t.Fatalf("Remove on an index over the bound: %v", err)
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != MaxLimiters-1 {
			t.Fatalf("List back under the bound: %d entries, %v", len(entries), err)
		}
		if _, err := s.GC(ctx, available(t)); err != nil {
			t.Fatalf("GC back under the bound: %v", err)
		}
	})
}

// A delete naming a rule that an invalid document does not publish says the
// document is invalid, never that the limiter has none; where the document
// still decodes (it only breaks Options.Available), it says which tier holds
// the rule.
func TestDeleteNotPublishedOnInvalidDocument(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		for _, tc := range []struct {
			name, doc, rule, want string
		}{
			{"over the tier bound", publishedDoc(t, manyRules(ratelimit.MaxRulesPerTier+1, "r")), "nope",
				"rule nope is not published (the limiter's document is invalid)"},
			// "search" does not offer the property "country".
			{"undeclared property", `{"file_rules":{"rules":[{"name":"f","limit":1,"period_s":60,"action":"limit","characteristics":["country"],"match":{}}]}}`, "f",
				"rule f is not published: it is in file_rules"},
		} {
			if err := c.Set(ctx, s.Key("search"), tc.doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Document(ctx, "search"); err != nil && !errors.Is(err, ErrInvalidDocument) {
				t.Fatalf("%s: Document: %v", tc.name, err)
			}
			_, err := s.Delete(ctx, "search", tc.rule)
			if !isNotFound(err) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "no document") {
				t.Errorf("%s: Delete(%s) = %v, want ErrRuleNotFound saying %q", tc.name, tc.rule, err, tc.want)
			}
		}
	})
}

// List receives at most MaxReadBytes of documents: with 20 valid documents of
// 1 MiB each (a gigabyte was possible: MaxLimiters of them) it read all 20
// at once. The first 16 are read, and each entry past the bound says it was
// not read rather than passing for a missing or an invalid document; a
// replica bound to all 20 still loads every one, by several reads.
func TestManyDocumentsAreReadWithinMaxReadBytes(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		// A call of 16 MiB under -race on a loaded machine can take more
		// than the default 2 s; what is tested here is the bytes, not time.
		s := newStore(t, c, Options{Timeout: time.Minute})
		const n = 20
		doc := publishedDoc(t, []ratelimit.Rule{rule("stored", 7)})
		doc += strings.Repeat(" ", ratelimit.MaxDocumentBytes-len(doc)) // valid JSON of 1 MiB
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("l%02d", i)
			if err := c.Set(ctx, s.Key(names[i]), doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, s.indexKey(), names[i]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		entries, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != n {
			t.Fatalf("%d entries, want %d", len(entries), n)
		}
		read := MaxReadBytes / ratelimit.MaxDocumentBytes
		for i, e := range entries {
			if i < read {
				if e.Err != nil || e.Document == nil || e.Version == "" {
					t.Fatalf("entry %s (%d): %v, want its document", e.Limiter, i, e.Err)
				}
				continue
			}
			if !errors.Is(e.Err, ErrNotRead) || errors.Is(e.Err, ErrInvalidDocument) || e.Document != nil || e.Version != "" ||
				!strings.Contains(e.Err.Error(), fmt.Sprintf("%s holds %d bytes", e.Key, ratelimit.MaxDocumentBytes)) {
				t.Fatalf("entry %s (%d): document %v, version %q, error %v: want it not read", e.Limiter, i, e.Document != nil, e.Version, e.Err)
			}
		}
		if _, err := s.Document(ctx, names[n-1]); err != nil {
			t.Fatalf("a document List left unread must read alone: %v", err)
		}

		for _, name := range names {
			if err := s.Bind(newLimiter(t, name, ratelimit.NewMemoryStore()), tiers.Set{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatalf("refresh: %v", err)
		}
		for _, name := range names {
			if ts, _ := s.Tiers(name); len(ts.Published) != 1 || ts.Published[0].Name != "stored" {
				t.Fatalf("limiter %s enforces %+v, want its document's rule", name, ts)
			}
		}
	})
}

// A reader judges a declared limiter's document as its replicas do
// (checkRead): one on a property available_limiters.yaml no longer offers
// is invalid to VersionedDocument and List, as it is to Publish, so an
// editor offers its removal rather than calling it valid. An orphan's
// document (its limiter no longer declared) is left to GC.
func TestReadersJudgeLikeReplicas(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		// "search" does not offer the property "country"; "retired" is not declared.
		doc := `{"published_rules":{"rules":[{"name":"f","limit":1,"period_s":60,"action":"limit","characteristics":["country"],"match":{}}]}}`
		for _, lim := range []string{"search", "retired"} {
			if err := c.Set(ctx, s.Key(lim), doc, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, s.indexKey(), lim).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got, version, err := s.VersionedDocument(ctx, "search")
		if !errors.Is(err, ErrInvalidDocument) || got != nil || version != Version([]byte(doc)) || !strings.Contains(err.Error(), "country") {
			t.Fatalf("VersionedDocument(search) = %v, %q, %v; want ErrInvalidDocument naming country, with the version", got, version, err)
		}
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}})); !errors.Is(err, ErrInvalidDocument) {
			t.Fatalf("Publish onto it: %v", err)
		}
		if got, _, err := s.VersionedDocument(ctx, "retired"); err != nil || got == nil {
			t.Fatalf("VersionedDocument(retired) = %v, %v; want the orphan's document", got, err)
		}
		entries, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			switch e.Limiter {
			case "search":
				if !errors.Is(e.Err, ErrInvalidDocument) || e.Document != nil {
					t.Errorf("List: search = %+v, want invalid", e)
				}
			case "retired":
				if e.Err != nil || e.Document == nil {
					t.Errorf("List: retired = %+v, want its document", e)
				}
			}
		}
		if _, err := s.RemoveIf(ctx, "search", version); err != nil {
			t.Fatalf("RemoveIf: %v", err)
		}
	})
}

// A revision counter that does not hold an integer (written by hand, or by
// another SDK) never fails a write: Redis does not undo a script's writes
// when it fails, so an INCR failing after them left the documents written
// and the write reported as failed (or, where the counter was only read,
// a reply that broke the client). The counter starts again from 0, as in a
// flushed store.
func TestBadRevisionCounterNeverFailsAWrite(t *testing.T) {
	c := redistest.Client(t)
	for _, tc := range []struct {
		name string
		set  func(key string) error
	}{
		{"not an integer", func(key string) error { return c.Set(ctx, key, "twelve", 0).Err() }},
		{"another type", func(key string) error { return c.HSet(ctx, key, "n", "1").Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, c, Options{})
			if err := tc.set(s.revKey()); err != nil {
				t.Fatal(err)
			}
			req := request(t, map[string][]ratelimit.Rule{"search": {rule("by_user", 2)}})
			res, err := s.Publish(ctx, req)
			if err != nil || !slices.Equal(res.Changed, []string{"search"}) || res.Revision != 1 {
				t.Fatalf("publish over a bad revision counter: %+v, %v; want search changed at revision 1", res, err)
			}
			if res, err := s.Publish(ctx, req); err != nil || len(res.Changed) != 0 || res.Revision != 1 {
				t.Fatalf("the same publish again: %+v, %v; want nothing changed at revision 1", res, err)
			}
			if rev, err := s.Revision(ctx); err != nil || rev != 1 {
				t.Fatalf("Revision = %d, %v; want 1", rev, err)
			}
		})
	}
}

// CheckPublish judges a publish as Publish does, bounds of the write script
// included (a document over MaxDocumentBytes, here), and writes nothing;
// its Changed are the limiters Publish then changes.
func TestCheckPublishWritesNothing(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		mustPublish(t, s, "search", rule("a", 1))
		before, _, _ := s.RawDocument(ctx, "search")
		rev, err := s.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req := request(t, map[string][]ratelimit.Rule{"search": {rule("a", 1), rule("b", 2)}, "projects": {rule("p", 3)}})
		res, err := s.CheckPublish(ctx, req)
		if err != nil || !slices.Equal(res.Changed, []string{"projects", "search"}) || res.Revision != rev {
			t.Fatalf("CheckPublish = %+v, %v; want projects and search changed at revision %d", res, err, rev)
		}
		if after, _, _ := s.RawDocument(ctx, "search"); after != before {
			t.Fatalf("CheckPublish wrote %s", after)
		}
		if _, present, _ := s.RawDocument(ctx, "projects"); present {
			t.Fatal("CheckPublish created a document")
		}
		if now, _ := s.Revision(ctx); now != rev {
			t.Fatalf("revision %d after CheckPublish, want %d", now, rev)
		}
		if got, err := s.Publish(ctx, req); err != nil || !slices.Equal(got.Changed, res.Changed) {
			t.Fatalf("Publish = %+v, %v; want the changes CheckPublish named", got, err)
		}
		// Rules whose document would pass MaxDocumentBytes: refused alike.
		var big []ratelimit.Rule
		for i := range 3 { // each about 400 KB: two fit, three do not
			values := make([]any, 100)
			for j := range values {
				values[j] = fmt.Sprintf("%04d%s", j, strings.Repeat("x", 4000))
			}
			r := rule(fmt.Sprintf("big%d", i), 1)
			r.Match = map[string]ratelimit.Matcher{"scope": ratelimit.OneOf(values...)}
			big = append(big, r)
		}
		mustPublish(t, s, "search", big[:2]...)
		bigReq := request(t, map[string][]ratelimit.Rule{"search": big[2:]})
		_, checkErr := s.CheckPublish(ctx, bigReq)
		_, pubErr := s.Publish(ctx, bigReq)
		if !errors.Is(checkErr, ErrOverBounds) || pubErr == nil || checkErr.Error() != pubErr.Error() {
			t.Fatalf("over MaxDocumentBytes: CheckPublish %v, Publish %v; want the same ErrOverBounds", checkErr, pubErr)
		}
	})
}

// Remove moves the revision, as every write that changes a document does
// (Revision's doc lists it), and a Remove of nothing leaves it.
func TestRemoveMovesRevision(t *testing.T) {
	s := newStore(t, redistest.Client(t), Options{Available: available(t)})
	mustPublish(t, s, "search", rule("x", 1))
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Remove(ctx, "search"); err != nil || res.Revision != rev+1 {
		t.Fatalf("Remove = %+v, %v; want revision %d", res, err, rev+1)
	}
	if res, err := s.Remove(ctx, "search"); err != nil || len(res.Changed) != 0 || res.Revision != rev+1 {
		t.Fatalf("Remove of nothing = %+v, %v; want nothing changed at revision %d", res, err, rev+1)
	}
	if now, err := s.Revision(ctx); err != nil || now != rev+1 {
		t.Fatalf("Revision = %d, %v; want %d", now, err, rev+1)
	}
}
