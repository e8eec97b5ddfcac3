package rulestore

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// A document the index does not name and without an orphan mark (written
// by another SDK or by hand, or left by a replaced index) was never
// collected: GC walked the index and the marks only, so it stayed for ever
// and List never showed it. GC's scan finds it, indexes it and marks it; a
// run past the grace deletes it, and one of a declared limiter is indexed
// and kept. CheckGC reports the same and writes nothing.
func TestGCFindsUnindexedDocuments(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		const grace = time.Hour
		var logs testlog.Buffer
		s := newStore(t, c, Options{GCGrace: grace, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		now := time.UnixMilli(1_800_000_000_000)
		s.gcNow = func() time.Time { return now }
		seedAll(t, s, "search", "retired", "projects")
		// written without their index entries
		if err := c.SRem(ctx, s.indexKey(), "retired", "projects").Err(); err != nil {
			t.Fatal(err)
		}
		keys := []string{s.indexKey(), s.orphansKey(), s.revKey(), s.scanKey(), s.Key("search"), s.Key("retired"), s.Key("projects")}
		dry := checkGC(t, c, s, keys)
		rep, err := s.GC(ctx, available(t))
		if err != nil {
			t.Fatalf("GC: %v", err)
		}
		if !reflect.DeepEqual(dry, rep) {
			t.Fatalf("CheckGC reported\n%+v\nGC did\n%+v", dry, rep)
		}
		if !slices.Equal(rep.Found, []string{"projects", "retired"}) || !slices.Equal(rep.Marked, []string{"retired"}) ||
			len(rep.Deleted)+len(rep.Left)+len(rep.Reindexed) != 0 || rep.ScanCursor != 0 {
			t.Fatalf("GC: %+v; want projects and retired found, retired marked", rep)
		}
		entries, err := s.List(ctx)
		if err != nil || len(entries) != 3 || entries[1].Limiter != "retired" || !entries[1].OrphanSince.Equal(now) {
			t.Fatalf("List: %+v, %v; want projects, retired (an orphan since %v) and search", entries, err, now)
		}
		now = now.Add(grace)
		rep, err = s.GC(ctx, available(t))
		if err != nil || !slices.Equal(rep.Deleted, []string{"retired"}) || len(rep.Found)+len(rep.Marked) != 0 {
			t.Fatalf("GC after the grace: %+v, %v; want retired deleted, nothing found", rep, err)
		}
		if exists(t, c, s.Key("retired")) || !exists(t, c, s.Key("projects")) {
			t.Fatal("want the document of retired deleted, that of projects kept")
		}
	})
}

// scanCounter counts the scan script's runs a client sends.
type scanCounter struct{ n atomic.Int64 }

func (h *scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == scanScript.Hash() || args[1] == scanLua) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A GC run sends its bound of SCANs (Options.GCScanKeys 2048: 2 of COUNT
// 1024) unless its pass ends sooner, and the next run goes on from the
// cursor it kept, so that passes over a keyspace larger than one run scans
// end, and find what is there.
func TestGCScanBoundedAndResumed(t *testing.T) {
	c := redistest.Client(t)
	var scans scanCounter
	c.AddHook(&scans)
	s := newStore(t, c, Options{GCScanKeys: 2 * 1024})
	// more keys than one run scans (2 SCANs of COUNT 1024 return about
	// 2,048 keys)
	filler := redistest.Prefix(t) + "filler:"
	pairs := make([]any, 0, 2*5000)
	for i := range 5000 {
		pairs = append(pairs, fmt.Sprintf("%s%d", filler, i), "1")
	}
	if err := c.MSet(ctx, pairs...).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < len(pairs); i += 2 {
			c.Del(context.Background(), pairs[i].(string))
		}
	})
	seedAll(t, s, "search")
	if err := c.Set(ctx, s.Key("retired"), `{"default_rules":{"rules":[]}}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	found := false
	runs := 0
	for ; ; runs++ {
		if runs > 100_000 {
			t.Fatal("no pass ended in 100,000 runs")
		}
		scans.n.Store(0)
		rep, err := s.GC(ctx, available(t))
		if err != nil {
			t.Fatal(err)
		}
		n := scans.n.Load()
		if n > 2 {
			t.Fatalf("run %d sent %d SCANs, at most 2", runs, n)
		}
		found = found || slices.Contains(rep.Found, "retired")
		if rep.ScanCursor == 0 {
			break
		}
		if n != 2 {
			t.Fatalf("run %d sent %d SCANs and its pass goes on; want 2, its bound", runs, n)
		}
		if kept, err := c.Get(ctx, s.scanKey()).Uint64(); err != nil || kept != rep.ScanCursor {
			t.Fatalf("cursor kept %d, %v; want %d", kept, err, rep.ScanCursor)
		}
	}
	if runs == 0 || !found {
		t.Fatalf("a pass of %d runs found retired: %v; want a pass of several runs that finds it", runs+1, found)
	}
	if exists(t, c, s.scanKey()) {
		t.Fatal("the cursor is kept after its pass ended")
	}
}

// A rule store whose prefix starts with another's shares its documents'
// keys: prefix+"team_x" is the outer store's limiter team_x and the inner
// store's (prefix "...team_") limiter x. Neither store's scan indexes the
// other's documents, which its GC would delete after the grace.
func TestGCScanLeavesAnotherStoresDocuments(t *testing.T) {
	forEachTarget(t, func(t *testing.T, c redis.UniversalClient) {
		outer := newStore(t, c, Options{})
		inner := newStore(t, c, Options{Prefix: outer.prefix + "team_"})
		seedAll(t, outer, "search", "team_x")
		seedAll(t, inner, "autocomplete_users")
		rep, err := outer.GC(ctx, available(t))
		if err != nil || len(rep.Found) != 0 || !slices.Equal(rep.Left, []string{"team_autocomplete_users"}) {
			t.Fatalf("outer GC: %+v, %v; want inner's document left", rep, err)
		}
		rep, err = inner.GC(ctx, available(t))
		if err != nil || len(rep.Found) != 0 || !slices.Equal(rep.Left, []string{"x"}) {
			t.Fatalf("inner GC: %+v, %v; want outer's document left", rep, err)
		}
		for _, s := range []*Store{outer, inner} {
			entries, err := s.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Limiter)
			}
			if want := map[*Store][]string{outer: {"search", "team_x"}, inner: {"autocomplete_users"}}[s]; !slices.Equal(got, want) {
				t.Fatalf("%s lists %v; want %v", s.prefix, got, want)
			}
		}
	})
}

// Options.GCScanKeys: 0 is the default, and a value outside 1 to
// MaxGCScanKeys is refused by New (TestGCScanBoundedAndResumed runs with
// one).
func TestGCScanKeysOption(t *testing.T) {
	c := redistest.Client(t)
	for _, n := range []int{-1, MaxGCScanKeys + 1} {
		if _, err := New(c, Options{Prefix: testPrefix(t), GCScanKeys: n}); err == nil {
			t.Errorf("GCScanKeys %d accepted", n)
		}
	}
	s, err := New(c, Options{Prefix: testPrefix(t)})
	if err != nil || s.scanKeys != DefaultGCScanKeys {
		t.Fatalf("default GCScanKeys: %d, %v; want %d", s.scanKeys, err, DefaultGCScanKeys)
	}
}
