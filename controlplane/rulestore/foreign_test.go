package rulestore

import (
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// The store's own keys (Prefix+"@index", "@orphans", "@rev") written by hand
// or by a foreign tool as another Redis type, or as values no reader should
// receive.

// foreignTypes write key as a Redis type the store gives none of its keys
// but a document.
var foreignTypes = []struct {
	name string
	set  func(c redis.UniversalClient, key string) error
}{
	{"string", func(c redis.UniversalClient, key string) error { return c.Set(ctx, key, "hand written", 0).Err() }},
	{"list", func(c redis.UniversalClient, key string) error { return c.RPush(ctx, key, "search").Err() }},
}

// A write over an index of another Redis type neither fails nor stops half
// done: Redis keeps what a script wrote before it fails, so a delete or a
// remove deleted the document and then failed on SREM, reporting a failure
// for a write it had made, and a publish or seed could never write again.
// The write replaces the index by a set of what it writes, and logs it.
func TestWriteOverAForeignIndex(t *testing.T) {
	c := redistest.Client(t)
	for _, ft := range foreignTypes {
		for _, tc := range []struct {
			op        string
			write     func(s *Store) (WriteResult, error)
			published []string // the published rules of search after it; nil: no document
		}{
			{"publish", func(s *Store) (WriteResult, error) {
				return s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("c", 3)}}))
			}, []string{"a", "b", "c"}},
			{"seed", func(s *Store) (WriteResult, error) {
				return s.Seed(ctx, map[string]tiers.Set{"search": {Defaults: []ratelimit.Rule{rule("d", 4)}}})
			}, []string{"a", "b"}},
			{"delete", func(s *Store) (WriteResult, error) { return s.Delete(ctx, "search", "a") }, []string{"b"}},
			{"remove", func(s *Store) (WriteResult, error) { return s.Remove(ctx, "search") }, nil},
		} {
			t.Run(ft.name+"/"+tc.op, func(t *testing.T) {
				var logs testlog.Buffer
				s := newStore(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("a", 1), rule("b", 2)}})); err != nil {
					t.Fatal(err)
				}
				if err := c.Del(ctx, s.indexKey()).Err(); err != nil {
					t.Fatal(err)
				}
				if err := ft.set(c, s.indexKey()); err != nil {
					t.Fatal(err)
				}
				res, err := tc.write(s)
				if err != nil || !slices.Equal(res.Changed, []string{"search"}) {
					stored, _ := raw(t, c, s.Key("search"))
					t.Fatalf("%s over a foreign index: %+v, %v (the document now holds %q); want search changed", tc.op, res, err, stored)
				}
				doc, err := s.Document(ctx, "search")
				switch {
				case tc.published == nil && !errors.Is(err, ErrNoDocument):
					t.Fatalf("Document after remove: %v, %v; want none", doc, err)
				case tc.published != nil && (err != nil || !slices.Equal(protoNames(doc.GetPublishedRules()), tc.published)):
					t.Fatalf("Document: %v, %v; want published %v", doc, err, tc.published)
				}
				if typ := c.Type(ctx, s.indexKey()).Val(); typ != "set" && typ != "none" {
					t.Fatalf("the index is still a Redis %s", typ)
				}
				listed := 1
				if tc.published == nil {
					listed = 0
				}
				entries, err := s.List(ctx)
				if err != nil || len(entries) != listed {
					t.Fatalf("List after the write: %+v, %v", entries, err)
				}
				if !strings.Contains(logs.String(), "rate_limit_rule_store_key_replaced") || !strings.Contains(logs.String(), s.indexKey()) {
					t.Fatalf("no WARN naming the replaced index; log:\n%s", logs.String())
				}
			})
		}
	}
}

// List refuses an index of another Redis type with an error that names it
// and the way out; GC (ratekit rules gc) replaces it, and its scan indexes
// the documents it finds again, marking the orphan among them, after which
// List reads them.
func TestListAndGCOverAForeignIndex(t *testing.T) {
	c := redistest.Client(t)
	for _, ft := range foreignTypes {
		t.Run(ft.name, func(t *testing.T) {
			var logs testlog.Buffer
			s := newStore(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			seedAll(t, s, "search", "gone")
			if err := c.Del(ctx, s.indexKey()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := ft.set(c, s.indexKey()); err != nil {
				t.Fatal(err)
			}
			_, err := s.List(ctx)
			if err == nil || !strings.Contains(err.Error(), s.indexKey()) || !strings.Contains(err.Error(), "ratekit rules gc") {
				t.Fatalf("List over a foreign index: %v; want an error naming the index and GC", err)
			}
			rep, err := s.GC(ctx, available(t))
			if err != nil || rep.IndexReplaced != ft.name || !slices.Equal(rep.Found, []string{"gone", "search"}) ||
				!slices.Equal(rep.Marked, []string{"gone"}) || len(rep.Deleted)+len(rep.Cleared)+len(rep.Pending) != 0 {
				t.Fatalf("GC over a foreign index: %+v, %v; want it replaced, both documents found, gone marked", rep, err)
			}
			if !strings.Contains(logs.String(), "rate_limit_rule_store_key_replaced") || !strings.Contains(logs.String(), s.indexKey()) {
				t.Fatalf("no WARN naming the replaced index; log:\n%s", logs.String())
			}
			if entries, err := s.List(ctx); err != nil || len(entries) != 2 || entries[0].Limiter != "gone" || entries[0].OrphanSince.IsZero() {
				t.Fatalf("List after GC: %+v, %v; want gone, an orphan, and search", entries, err)
			}
		})
	}
}

// Orphan marks of another Redis type never fail List or GC: List reads no
// mark from them, GC replaces them and marks its orphans again (their grace
// starts over, the cautious way).
func TestForeignOrphanMarks(t *testing.T) {
	c := redistest.Client(t)
	for _, ft := range foreignTypes {
		t.Run(ft.name, func(t *testing.T) {
			var logs testlog.Buffer
			s := newStore(t, c, Options{GCGrace: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			seedAll(t, s, "search", "gone")
			if err := ft.set(c, s.orphansKey()); err != nil {
				t.Fatal(err)
			}
			entries, err := s.List(ctx)
			if err != nil || len(entries) != 2 || !entries[0].OrphanSince.IsZero() || !entries[1].OrphanSince.IsZero() {
				t.Fatalf("List over foreign orphan marks: %+v, %v; want both entries unmarked", entries, err)
			}
			rep, err := s.GC(ctx, available(t))
			if err != nil || !slices.Equal(rep.Marked, []string{"gone"}) {
				t.Fatalf("GC over foreign orphan marks: %+v, %v; want gone marked", rep, err)
			}
			if !strings.Contains(logs.String(), "rate_limit_rule_store_key_replaced") || !strings.Contains(logs.String(), s.orphansKey()) {
				t.Fatalf("no WARN naming the replaced marks; log:\n%s", logs.String())
			}
			entries, err = s.List(ctx)
			if err != nil || len(entries) != 2 || entries[0].Limiter != "gone" || !entries[0].OrphanSince.Equal(rep.Now) {
				t.Fatalf("List after GC: %+v, %v; want gone marked at %v", entries, err, rep.Now)
			}
		})
	}
}

// Revision never receives a counter longer than an int64's digits: one of a
// megabyte (hand-written; a valid integer, with its leading zeros) was
// received whole and read as 7, where every write counts it as no integer
// and starts again from 0. It is refused by its size, naming the key.
func TestRevisionIsReadBounded(t *testing.T) {
	received := new(atomic.Int64)
	c := redistest.CountingClient(t, received)
	s := newStore(t, c, Options{})
	if err := c.Set(ctx, s.revKey(), strings.Repeat("0", 1<<20)+"7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	received.Store(0)
	rev, err := s.Revision(ctx)
	if n := received.Load(); n > 4096 {
		t.Fatalf("Revision received %d bytes", n)
	}
	if err == nil || !strings.Contains(err.Error(), s.revKey()) || !strings.Contains(err.Error(), "1048577 bytes") || len(err.Error()) > 1024 {
		t.Fatalf("Revision = %d, %.300v; want an error naming the key and its size", rev, err)
	}
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("a", 1)}})); err != nil {
		t.Fatal(err)
	}
	if rev, err := s.Revision(ctx); err != nil || rev != 1 {
		t.Fatalf("Revision after a write = %d, %v; want 1 (the write starts it again)", rev, err)
	}
}

// List never receives an orphan mark longer than a time in ms: one of a
// megabyte (hand-written, digits) was received whole and read as a time,
// where GC counts it as no mark and marks the orphan again. List reads it
// as no mark, as GC does.
func TestOrphanMarksAreReadBounded(t *testing.T) {
	received := new(atomic.Int64)
	c := redistest.CountingClient(t, received)
	s := newStore(t, c, Options{GCGrace: time.Hour})
	seedAll(t, s, "gone")
	if err := c.HSet(ctx, s.orphansKey(), "gone", strings.Repeat("0", 1<<20)+"1700000000000").Err(); err != nil {
		t.Fatal(err)
	}
	received.Store(0)
	entries, err := s.List(ctx)
	if n := received.Load(); n > 64<<10 {
		t.Fatalf("List received %d bytes", n)
	}
	if err != nil || len(entries) != 1 || !entries[0].OrphanSince.IsZero() {
		t.Fatalf("List: %+v, %v; want gone listed without a mark", entries, err)
	}
	rep, err := s.GC(ctx, available(t))
	if err != nil || !slices.Equal(rep.Marked, []string{"gone"}) {
		t.Fatalf("GC: %+v, %v; want gone marked again", rep, err)
	}
}

// A foreign key of any size is replaced with UNLINK, which frees its value
// in the background: DEL freed a hand-written list of millions of members
// inside the script, blocking Redis for every client meanwhile.
func TestForeignKeyUnlinked(t *testing.T) {
	c := redistest.Client(t)
	unlinks := func() int64 {
		t.Helper()
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_unlink:calls="); ok {
				n, _, _ := strings.Cut(rest, ",")
				calls, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					t.Fatalf("commandstats %q: %v", line, err)
				}
				return calls
			}
		}
		return 0 // none yet
	}
	s := newStore(t, c, Options{Logger: slog.New(slog.DiscardHandler)})
	members := make([]any, 1000)
	for i := range members {
		members[i] = i
	}
	if err := c.RPush(ctx, s.indexKey(), members...).Err(); err != nil {
		t.Fatal(err)
	}
	before := unlinks()
	if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("a", 1)}})); err != nil {
		t.Fatal(err)
	}
	if after := unlinks(); after <= before {
		t.Fatalf("UNLINK calls %d before the publish over a foreign index, %d after: it was not unlinked", before, after)
	}
	if kind, err := c.Type(ctx, s.indexKey()).Result(); err != nil || kind != "set" {
		t.Fatalf("index is a %q (%v) after the publish, want a set", kind, err)
	}
}
