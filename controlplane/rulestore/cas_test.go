package rulestore

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
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
