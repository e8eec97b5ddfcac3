package rulestore

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// seedAll gives each limiter a document.
func seedAll(t *testing.T, s *Store, limiters ...string) {
	t.Helper()
	sets := map[string]tiers.Set{}
	for _, l := range limiters {
		sets[l] = tiers.Set{Defaults: []ratelimit.Rule{rule("r", 1)}}
	}
	if _, err := s.Seed(ctx, sets); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, c redis.Cmdable, key string) bool {
	_, ok := raw(t, c, key)
	return ok
}

// GC marks an orphan, keeps it through the grace period, deletes it after,
// and unmarks a limiter that comes back. Time is moved with the gcNow hook.
func TestGCGracePeriod(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		const grace = time.Hour
		s := newStore(t, c, Options{GCGrace: grace})
		now := time.UnixMilli(1_800_000_000_000)
		s.gcNow = func() time.Time { return now }
		// "gone" and "back" are not in the list; "search" is.
		seedAll(t, s, "search", "gone", "back")
		avail := available(t) // autocomplete_users, projects, search

		rep, err := s.GC(ctx, avail)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Marked, []string{"back", "gone"}) || len(rep.Deleted) != 0 || !rep.Now.Equal(now) {
			t.Fatalf("first run: %+v", rep)
		}
		first := now
		entries, _ := s.List(ctx)
		for _, e := range entries {
			if orphan := e.Limiter != "search"; orphan != e.OrphanSince.Equal(first) {
				t.Fatalf("List: %s orphan since %v", e.Limiter, e.OrphanSince)
			}
		}

		now = first.Add(grace - time.Millisecond)
		if rep, err = s.GC(ctx, avail); err != nil {
			t.Fatal(err)
		}
		if len(rep.Marked)+len(rep.Deleted) != 0 || !rep.Pending["gone"].Equal(first) || len(rep.Pending) != 2 {
			t.Fatalf("within the grace period: %+v", rep)
		}
		if !exists(t, c, s.Key("gone")) {
			t.Fatal("deleted before the grace period ended")
		}

		// "back" is declared again before the grace period ends.
		withBack := availableWith(t, "back")
		if rep, err = s.GC(ctx, withBack); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Cleared, []string{"back"}) {
			t.Fatalf("comeback: %+v", rep)
		}

		revBefore, _ := s.Revision(ctx)
		now = first.Add(grace)
		if rep, err = s.GC(ctx, withBack); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Deleted, []string{"gone"}) || len(rep.Pending) != 0 {
			t.Fatalf("after the grace period: %+v", rep)
		}
		if exists(t, c, s.Key("gone")) || !exists(t, c, s.Key("back")) || !exists(t, c, s.Key("search")) {
			t.Fatal("wrong documents deleted")
		}
		if rev, _ := s.Revision(ctx); rev != revBefore+1 {
			t.Fatalf("revision %d after a deletion, want %d", rev, revBefore+1)
		}
		entries, _ = s.List(ctx)
		var listed []string
		for _, e := range entries {
			listed = append(listed, e.Limiter)
			if !e.OrphanSince.IsZero() {
				t.Fatalf("%s still marked", e.Limiter)
			}
		}
		if !slices.Equal(listed, []string{"back", "search"}) {
			t.Fatalf("index = %v", listed)
		}
		// "back" dropped again starts a fresh grace period.
		if rep, err = s.GC(ctx, avail); err != nil || !slices.Equal(rep.Marked, []string{"back"}) {
			t.Fatalf("re-orphaned: %+v, %v", rep, err)
		}
	})
}

func availableWith(t *testing.T, extra string) *config.AvailableLimiters {
	t.Helper()
	a, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(availableYAML+"  "+extra+":\n    description: x\n    available_properties: [user]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Without the limiter list GC does nothing at all.
func TestGCRefusesWithoutList(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, Options{GCGrace: time.Millisecond})
	seedAll(t, s, "gone")
	for _, a := range []*config.AvailableLimiters{nil, {}} {
		if _, err := s.GC(ctx, a); !errors.Is(err, ErrNoLimiterList) {
			t.Fatalf("GC(%v) = %v, want ErrNoLimiterList", a, err)
		}
	}
	entries, _ := s.List(ctx)
	if len(entries) != 1 || !entries[0].OrphanSince.IsZero() || !exists(t, c, s.Key("gone")) {
		t.Fatalf("GC without a list touched the store: %+v", entries)
	}
}

// On the Redis clock: a short grace period, measured by the server.
func TestGCOnRedisClock(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		const grace = 300 * time.Millisecond
		s := newStore(t, c, Options{GCGrace: grace})
		seedAll(t, s, "gone")
		rep, err := s.GC(ctx, available(t))
		if err != nil || !slices.Equal(rep.Marked, []string{"gone"}) {
			t.Fatalf("mark: %+v, %v", rep, err)
		}
		if d := time.Since(rep.Now); d < -time.Minute || d > time.Minute {
			t.Fatalf("Redis time %v is far from the local clock", rep.Now)
		}
		marked := rep.Now
		eventually(t, 10*time.Second, "deletion after the grace period", func() bool {
			r, err := s.GC(ctx, available(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Deleted) == 0 {
				return false
			}
			if r.Now.Sub(marked) < grace {
				t.Fatalf("deleted after %v, before the grace period of %v", r.Now.Sub(marked), grace)
			}
			return true
		})
		if exists(t, c, s.Key("gone")) {
			t.Fatal("document still there")
		}
	})
}

// An index member longer than any limiter name (written by hand) is never
// received by a reader: List refuses the index and names GC, and GC removes
// the member with the key it names, after which List reads the index again.
func TestIndexMemberLongerThanAName(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{})
		if _, err := s.Publish(ctx, request(t, map[string][]ratelimit.Rule{"search": {rule("stored", 7)}})); err != nil {
			t.Fatal(err)
		}
		long := strings.Repeat("x", 1<<20)
		if err := c.SAdd(ctx, s.indexKey(), long).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, s.Key(long), "{}", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.HSet(ctx, s.orphansKey(), long, "1").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.List(ctx)
		if !errors.Is(err, ErrOverBounds) || !strings.Contains(err.Error(), "1 member(s) longer than 64 bytes") || len(err.Error()) > 1024 {
			t.Fatalf("List: %.300v, want ErrOverBounds naming the long member's count", err)
		}
		rep, err := s.GC(ctx, available(t))
		if err != nil || rep.Longer != 1 || len(rep.Deleted)+len(rep.Marked) != 0 {
			t.Fatalf("GC: %+v, %v: want the long member removed and nothing else", rep, err)
		}
		for _, k := range []string{s.Key(long)} {
			if n := c.Exists(ctx, k).Val(); n != 0 {
				t.Fatal("the long member's document is still there")
			}
		}
		if c.SIsMember(ctx, s.indexKey(), long).Val() || c.HExists(ctx, s.orphansKey(), long).Val() {
			t.Fatal("the long member is still in the index or the orphan marks")
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != 1 || entries[0].Limiter != "search" || entries[0].Document == nil {
			t.Fatalf("List after GC: %+v, %v", entries, err)
		}
	})
}

// GC never fails half done on its own keys written by hand: an orphan mark
// that is no time is made again (the grace starts over), and a revision
// counter that holds no integer starts again from 0. Before, Redis kept what
// the script had deleted before its arithmetic failed, and GC reported an
// error.
func TestGCOverBadMarksAndRevision(t *testing.T) {
	c := redistest.Client(t)
	s := newStore(t, c, Options{GCGrace: time.Hour})
	now := time.UnixMilli(1_800_000_000_000)
	s.gcNow = func() time.Time { return now }
	seedAll(t, s, "search", "gone", "odd")
	if err := c.HSet(ctx, s.orphansKey(), "gone", now.Add(-2*time.Hour).UnixMilli(), "odd", "yesterday").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, s.revKey(), "twelve", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := s.GC(ctx, available(t))
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if !slices.Equal(rep.Deleted, []string{"gone"}) || !slices.Equal(rep.Marked, []string{"odd"}) {
		t.Fatalf("GC report %+v: want gone deleted, odd marked again", rep)
	}
	if rev, err := s.Revision(ctx); err != nil || rev != 1 {
		t.Fatalf("Revision = %d, %v; want 1", rev, err)
	}
	now = now.Add(time.Minute)
	if rep, err := s.GC(ctx, available(t)); err != nil || !rep.Pending["odd"].Equal(now.Add(-time.Minute)) {
		t.Fatalf("second GC: %+v, %v; want odd pending since the first run", rep, err)
	}
}

// A run that deletes orphans removes the index members longer than a name
// all the same. gc.lua looked for them only when the index, counted after
// the deletions, held more members than the client had read: with as many
// orphans deleted as long members, it skipped them.
func TestLongMemberRemovedBesideDeletedOrphans(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{GCGrace: time.Hour})
		now := time.UnixMilli(1_800_000_000_000)
		s.gcNow = func() time.Time { return now }
		seedAll(t, s, "search", "gone")
		long := strings.Repeat("x", 65)
		if err := c.HSet(ctx, s.orphansKey(), "gone", now.Add(-2*time.Hour).UnixMilli()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SAdd(ctx, s.indexKey(), long).Err(); err != nil {
			t.Fatal(err)
		}
		rep, err := s.GC(ctx, available(t))
		if err != nil || !slices.Equal(rep.Deleted, []string{"gone"}) || rep.Longer != 1 {
			t.Fatalf("GC: %+v, %v; want gone deleted and the long member removed", rep, err)
		}
		if c.SIsMember(ctx, s.indexKey(), long).Val() {
			t.Fatal("the long member is still in the index")
		}
	})
}

// CheckGC reports what GC then does, to the letter, and writes nothing: each
// case sets up the store, CheckGC must leave every key byte for byte as it
// was (DUMP), and GC's report must be CheckGC's.
func TestCheckGCIsGCWithoutWrites(t *testing.T) {
	const grace = time.Hour
	now := time.UnixMilli(1_800_000_000_000)
	long := strings.Repeat("x", 65)
	ms := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, c redis.UniversalClient, s *Store)
		want  func(rep GCReport) bool // what the run must find, so the case tests something
	}{
		{"orphans to mark, keep, delete and clear", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "new", "kept", "gone")
			hset(t, c, s.orphansKey(), "kept", ms(-time.Minute), "gone", ms(-2*grace), "search", ms(-time.Minute))
		}, func(rep GCReport) bool {
			return slices.Equal(rep.Marked, []string{"new"}) && len(rep.Pending) == 1 && slices.Equal(rep.Deleted, []string{"gone"}) &&
				slices.Equal(rep.Cleared, []string{"search"})
		}},
		{"marks that are no time", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "plus", "odd", "huge")
			// strconv.ParseInt reads "+1" as a time long past; gc.lua reads no
			// time in it and marks the limiter again
			hset(t, c, s.orphansKey(), "plus", "+1", "odd", "yesterday", "huge", strings.Repeat("9", 16), "search", "x")
		}, func(rep GCReport) bool {
			return slices.Equal(rep.Marked, []string{"huge", "odd", "plus"}) && slices.Equal(rep.Cleared, []string{"search"}) && len(rep.Deleted) == 0
		}},
		{"members longer than a name beside a deletion", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "gone")
			hset(t, c, s.orphansKey(), "gone", ms(-2*grace), long, "1")
			if err := c.SAdd(ctx, s.indexKey(), long).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, s.Key(long), "{}", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool { return rep.Longer == 1 && slices.Equal(rep.Deleted, []string{"gone"}) }},
		{"marks of limiters no longer indexed", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search")
			hset(t, c, s.orphansKey(), "removed", ms(-time.Minute), "also_removed", ms(-2*grace))
		}, func(rep GCReport) bool { return rep.StaleMarks == 2 && len(rep.Pending)+len(rep.Deleted) == 0 }},
		{"a foreign index", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "gone")
			hset(t, c, s.orphansKey(), "gone", ms(-2*grace))
			if err := c.Del(ctx, s.indexKey()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.RPush(ctx, s.indexKey(), "search").Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool {
			return rep.IndexReplaced == "list" && slices.Equal(rep.Reindexed, []string{"gone"}) && len(rep.Deleted) == 0
		}},
		{"marked documents unindexed, past the index's room", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search")
			fill := make([]any, 0, MaxLimiters-2)
			for i := range MaxLimiters - 2 {
				fill = append(fill, fmt.Sprintf("f%04d", i))
			}
			if err := c.SAdd(ctx, s.indexKey(), fill...).Err(); err != nil {
				t.Fatal(err)
			}
			// the index holds MaxLimiters-1: room for one of the two
			for _, l := range []string{"kept", "new"} {
				if err := c.Set(ctx, s.Key(l), "{}", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			hset(t, c, s.orphansKey(), "kept", ms(-time.Minute), "new", ms(-2*grace), "gone", ms(-time.Minute))
		}, func(rep GCReport) bool {
			return slices.Equal(rep.Reindexed, []string{"kept"}) && rep.StaleMarks == 1 && len(rep.Marked) == MaxLimiters-2
		}},
		{"orphan marks over their bound", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "gone")
			pairs := []string{"gone", ms(-2 * grace)}
			for i := range maxMarks {
				pairs = append(pairs, fmt.Sprintf("h%04d", i), "1")
			}
			hset(t, c, s.orphansKey(), pairs...)
		}, func(rep GCReport) bool {
			// never walked: gone's mark is lost with the rest, its grace starts over
			return rep.MarksReplaced == "hash" && rep.MarksOver == maxMarks+1 && slices.Equal(rep.Marked, []string{"gone"}) &&
				len(rep.Deleted)+int(rep.StaleMarks) == 0
		}},
		{"documents without their index entry", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "new", "kept")
			if err := c.SRem(ctx, s.indexKey(), "new", "kept").Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool {
			return slices.Equal(rep.Found, []string{"kept", "new"}) && slices.Equal(rep.Marked, []string{"kept", "new"})
		}},
		{"a scan cursor of another type", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "new")
			if err := c.SRem(ctx, s.indexKey(), "new").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.RPush(ctx, s.scanKey(), "17").Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool { return slices.Equal(rep.Found, []string{"new"}) && rep.ScanCursor == 0 }},
		{"a scan cursor past SCAN's", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "new")
			if err := c.SRem(ctx, s.indexKey(), "new").Err(); err != nil {
				t.Fatal(err)
			}
			// 20 digits, as a cursor may have, over 2^64-1: SCAN refuses it
			if err := c.Set(ctx, s.scanKey(), "18446744073709551616", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool { return slices.Equal(rep.Found, []string{"new"}) && rep.ScanCursor == 0 }},
		{"foreign marks and a revision that is no integer", func(t *testing.T, c redis.UniversalClient, s *Store) {
			seedAll(t, s, "search", "gone")
			if err := c.Set(ctx, s.orphansKey(), "hand written", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, s.revKey(), "twelve", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, func(rep GCReport) bool {
			return rep.MarksReplaced == "string" && slices.Equal(rep.Marked, []string{"gone"})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
				var logs testlog.Buffer
				s := newStore(t, c, Options{GCGrace: grace, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				s.gcNow = func() time.Time { return now }
				tt.setup(t, c, s)
				keys := []string{s.indexKey(), s.orphansKey(), s.revKey(), s.scanKey(), s.Key(long)}
				for _, l := range []string{"search", "new", "kept", "gone", "plus", "odd", "huge"} {
					keys = append(keys, s.Key(l))
				}
				dry := checkGC(t, c, s, keys)
				if logs.String() != "" {
					t.Fatalf("CheckGC logged:\n%s", logs.String())
				}
				rep, err := s.GC(ctx, available(t))
				if err != nil {
					t.Fatalf("GC: %v", err)
				}
				if !reflect.DeepEqual(dry, rep) {
					t.Fatalf("CheckGC reported\n%+v\nGC did\n%+v", dry, rep)
				}
				if !tt.want(rep) {
					t.Fatalf("GC: %+v, not what the case sets up", rep)
				}
			})
		})
	}
}

func hset(t *testing.T, c redis.UniversalClient, key string, pairs ...string) {
	t.Helper()
	args := make([]any, len(pairs))
	for i, p := range pairs {
		args[i] = p
	}
	if err := c.HSet(ctx, key, args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// dump returns each key's serialized value ("" for none).
// checkGC returns s.CheckGC's report, after checking that it wrote none of
// keys (a DUMP of each before and after).
func checkGC(t *testing.T, c redis.UniversalClient, s *Store, keys []string) GCReport {
	t.Helper()
	before := dump(t, c, keys)
	dry, err := s.CheckGC(ctx, available(t))
	if err != nil {
		t.Fatalf("CheckGC: %v", err)
	}
	if after := dump(t, c, keys); !maps.Equal(before, after) {
		t.Fatalf("CheckGC wrote: keys before %q, after %q", before, after)
	}
	return dry
}

func dump(t *testing.T, c redis.UniversalClient, keys []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range keys {
		v, err := c.Dump(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// A document whose limiter GC marked as an orphan, and that the index no
// longer names (a write replaced an index of another Redis type, and no
// service seeds it any more), is indexed again by the next GC, its mark
// kept, and collected after its grace. GC removed its mark as one of a
// limiter gone from the index, and the document stayed, unindexed, for
// ever: List never showed it, GC never collected it.
func TestGCIndexesMarkedDocumentsAgain(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		s := newStore(t, c, Options{GCGrace: time.Hour})
		now := time.UnixMilli(1_800_000_000_000)
		s.gcNow = func() time.Time { return now }
		seedAll(t, s, "search", "retired")
		if rep, err := s.GC(ctx, available(t)); err != nil || !slices.Equal(rep.Marked, []string{"retired"}) {
			t.Fatalf("GC: %+v, %v; want retired marked", rep, err)
		}
		marked := now
		if err := c.Del(ctx, s.indexKey()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, s.indexKey(), "hand written", 0).Err(); err != nil {
			t.Fatal(err)
		}
		seedAll(t, s, "search") // replaces the index: {search}
		now = now.Add(time.Minute)
		rep, err := s.GC(ctx, available(t))
		if err != nil || !slices.Equal(rep.Reindexed, []string{"retired"}) || rep.StaleMarks != 0 {
			t.Fatalf("GC: %+v, %v; want retired indexed again", rep, err)
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != 2 || entries[0].Limiter != "retired" || !entries[0].OrphanSince.Equal(marked) {
			t.Fatalf("List: %+v, %v; want retired listed, orphan since %v", entries, err, marked)
		}
		now = marked.Add(time.Hour)
		if rep, err = s.GC(ctx, available(t)); err != nil || !slices.Equal(rep.Deleted, []string{"retired"}) {
			t.Fatalf("GC after the grace: %+v, %v; want retired deleted", rep, err)
		}
		if exists(t, c, s.Key("retired")) {
			t.Fatal("the document of retired is still there")
		}
	})
}
