package rulestore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/redistest"
)

// PublishIf and DeleteIf write only when the document is still at the
// version the caller read: a save based on a stale read fails with
// ErrConflict and writes nothing; a save at the current version goes through.
func TestCompareAndSet(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		doc, v0, err := s.VersionedDocument(ctx, "search")
		if err != nil || doc != nil || v0 != "" {
			t.Fatalf("no document yet: got %v %q %v", doc, v0, err)
		}
		// "" expects no document: the first editor creates it.
		res, err := s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 10)}}), map[string]string{"search": v0})
		if err != nil || !slices.Equal(res.Changed, []string{"search"}) {
			t.Fatalf("first save: %v %v", res, err)
		}
		stored, _ := raw(t, c, s.Key("search"))
		_, v1, err := s.VersionedDocument(ctx, "search")
		if err != nil || v1 != Version([]byte(stored)) || v1 == "" {
			t.Fatalf("version %q of %q: %v", v1, stored, err)
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != 1 || entries[0].Version != v1 {
			t.Fatalf("List: %+v %v", entries, err)
		}

		tests := []struct {
			name  string
			write func() (WriteResult, error)
		}{
			{"publish at no document", func() (WriteResult, error) {
				return s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("y", 1)}}), map[string]string{"search": ""})
			}},
			{"publish at an old version", func() (WriteResult, error) {
				return s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}}), map[string]string{"search": strings.Repeat("0", 40)})
			}},
			{"batch with one stale limiter", func() (WriteResult, error) {
				return s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}, "projects": {rule("p", 1)}}),
					map[string]string{"search": "", "projects": ""})
			}},
			{"delete at an old version", func() (WriteResult, error) { return s.DeleteIf(ctx, "search", "", "x") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				rev, _ := s.Revision(ctx)
				if _, err := tt.write(); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "limiter search") {
					t.Fatalf("want ErrConflict naming limiter search, got %v", err)
				}
				if now, _ := raw(t, c, s.Key("search")); now != stored {
					t.Fatalf("document changed by a failed save: %s", now)
				}
				if _, ok := raw(t, c, s.Key("projects")); ok {
					t.Fatal("a batch with a conflict wrote its other limiter")
				}
				if after, _ := s.Revision(ctx); after != rev {
					t.Fatalf("revision moved %d -> %d", rev, after)
				}
			})
		}

		// At the current version the save goes through, and moves the version.
		if _, err := s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("y", 5)}}), map[string]string{"search": v1}); err != nil {
			t.Fatal(err)
		}
		_, v2, _ := s.VersionedDocument(ctx, "search")
		if v2 == v1 {
			t.Fatal("version did not move with the document")
		}
		if _, err := s.DeleteIf(ctx, "search", v1, "y"); !errors.Is(err, ErrConflict) {
			t.Fatalf("delete at the replaced version: %v", err)
		}
		if _, err := s.DeleteIf(ctx, "search", v2, "x", "y"); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw(t, c, s.Key("search")); ok {
			t.Fatal("document with no tier left was kept")
		}
		if _, err := s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}}), map[string]string{"projects": ""}); err == nil {
			t.Fatal("a version for a limiter outside the request was accepted")
		}
	})
}

// RemoveIf takes the document only while the key still holds what the
// caller read: the invalid document it showed (by its Version), or, for
// "", a key whose bytes no reader receives (another Redis type, a string
// over ratelimit.MaxDocumentBytes). A document another writer put there
// since, valid or not, is left as it is, with ErrConflict.
func TestRemoveIf(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{Available: available(t)})
		key := s.Key("search")
		garbage := func() error { return c.Set(ctx, key, "not json", 0).Err() }
		otherGarbage := func() error { return c.Set(ctx, key, "not json either", 0).Err() }
		hash := func() error { return c.HSet(ctx, key, "published_rules", "{}").Err() }
		tooLarge := func() error { return c.Set(ctx, key, strings.Repeat(" ", ratelimit.MaxDocumentBytes+1), 0).Err() }
		valid := func() error { mustPublish(t, s, "search", rule("x", 1)); return nil }
		none := func() error { return nil }
		tests := []struct {
			name          string
			shown, now    func() error // what the caller read; what the key holds at the remove
			wantConflict  bool
			wantNoChanges bool
		}{
			{"invalid document, unchanged", garbage, garbage, false, false},
			{"invalid document replaced by a valid one", garbage, valid, true, false},
			{"invalid document replaced by another invalid one", garbage, otherGarbage, true, false},
			{"invalid document removed meanwhile", garbage, none, true, false},
			{"hash, unchanged", hash, hash, false, false},
			{"hash replaced by a valid document", hash, valid, true, false},
			{"oversized string, unchanged", tooLarge, tooLarge, false, false},
			{"oversized string replaced by a valid document", tooLarge, valid, true, false},
			{"valid document, unchanged", valid, valid, false, false},
			{"no document", none, none, false, true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				set := func(f func() error) {
					t.Helper()
					if err := c.Del(ctx, key).Err(); err != nil {
						t.Fatal(err)
					}
					if err := f(); err != nil {
						t.Fatal(err)
					}
				}
				set(tt.shown)
				_, version, _ := s.VersionedDocument(ctx, "search")
				set(tt.now)
				before, _ := raw(t, c, key)
				kind := c.Type(ctx, key).Val()
				rev, _ := s.Revision(ctx)
				res, err := s.RemoveIf(ctx, "search", version)
				if tt.wantConflict {
					if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "limiter search") {
						t.Fatalf("want ErrConflict naming limiter search, got %v", err)
					}
					if after, _ := raw(t, c, key); after != before || c.Type(ctx, key).Val() != kind {
						t.Fatalf("a refused remove changed the key: %s %q -> %s %q", kind, before, c.Type(ctx, key).Val(), after)
					}
					if after, _ := s.Revision(ctx); after != rev {
						t.Fatalf("revision moved %d -> %d", rev, after)
					}
					return
				}
				if err != nil {
					t.Fatalf("remove at the version read: %v", err)
				}
				if want := !tt.wantNoChanges; (len(res.Changed) == 1) != want {
					t.Fatalf("changed %v, want a change: %v", res.Changed, want)
				}
				if n, _ := c.Exists(ctx, key).Result(); n != 0 {
					t.Fatal("still there after RemoveIf")
				}
				if ok, _ := c.SIsMember(ctx, s.indexKey(), "search").Result(); ok {
					t.Fatal("still indexed after RemoveIf")
				}
			})
		}
		if _, err := s.RemoveIf(ctx, "Not A Name", ""); err == nil {
			t.Fatal("an invalid limiter name was accepted")
		}
	})
}

// A version that Version cannot give (not 40 lowercase hex digits, nor "")
// is refused before anything is read or written, and the error quotes at
// most 80 characters of it: a conflict error repeated it whole (an editor
// that sent 64 KiB got 64 KiB in its error and its audit line).
func TestMalformedVersionRefused(t *testing.T) {
	s := newStore(t, redistest.Client(t), Options{Available: available(t)})
	long := strings.Repeat("z", 64<<10)
	for _, tt := range []struct {
		name  string
		write func() (WriteResult, error)
	}{
		{"publish", func() (WriteResult, error) {
			return s.PublishIf(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("x", 1)}}), map[string]string{"search": long})
		}},
		{"delete", func() (WriteResult, error) { return s.DeleteIf(ctx, "search", long, "x") }},
		{"remove", func() (WriteResult, error) { return s.RemoveIf(ctx, "search", long) }},
		{"upper-case hex", func() (WriteResult, error) { return s.RemoveIf(ctx, "search", strings.Repeat("A", 40)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rev, _ := s.Revision(ctx)
			_, err := tt.write()
			if err == nil || errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "is not a document version") || len(err.Error()) > 300 {
				t.Fatalf("error %.300q (%d bytes), want a short refusal of the version", err, len(fmt.Sprint(err)))
			}
			if after, _ := s.Revision(ctx); after != rev {
				t.Fatalf("revision %d -> %d: something was written", rev, after)
			}
		})
	}
	for _, v := range []string{"", Version([]byte("{}"))} {
		if !ValidVersion(v) {
			t.Errorf("ValidVersion(%q) = false", v)
		}
	}
}
