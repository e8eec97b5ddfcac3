package rulestore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

//go:embed gc.lua
var gcLua string

var gcScript = redis.NewScript(revcheckLua + gcLua)

//go:embed scan.lua
var scanLua string

var scanScript = redis.NewScript(scanLua)

// The scan for documents the index does not name (docs/limits.md): a GC
// run examines at most Options.GCScanKeys keys of the server that holds the
// store's keys, as SCANs of COUNT scanCount, each its own script call so
// that none holds Redis long, and the next run goes on where it stopped (the
// cursor is kept in Prefix+"@scan"), so that a keyspace of any size is
// covered by as many runs as it needs.
const (
	scanCount  = 1024
	scanSuffix = "@scan"
)

// Bounds of Options.GCScanKeys.
const (
	// DefaultGCScanKeys is the keys one GC run's scan examines by default:
	// 64 SCANs of COUNT 1024.
	DefaultGCScanKeys = 64 * scanCount
	// MaxGCScanKeys is the most one run may be given: the scan ends with
	// the keyspace anyway, this keeps the count of SCANs an int. It is
	// 2^40, and 2^30 − 1 where an int has 32 bits.
	MaxGCScanKeys = min(1<<40, math.MaxInt/2)
)

// maxMarks bounds the orphan marks GC walks (docs/limits.md): it keeps one
// per indexed limiter, and those of limiters that left the index (a Remove
// leaves its mark) until its next run. Marks of more fields (written by
// hand) are replaced, never walked, as marks of another Redis type are.
const maxMarks = 2 * MaxLimiters

// ErrNoLimiterList is returned by GC without a list of available limiters:
// comparing the index with a missing list would orphan every document.
var ErrNoLimiterList = errors.New("rulestore: gc: no available limiters list; refusing to collect")

// GCReport tells what a GC run found and did.
type GCReport struct {
	// Now is the time the run used (the Redis server's clock).
	Now time.Time
	// Marked are orphans seen for the first time: they are kept for the
	// grace period from Now.
	Marked []string
	// Pending are orphans within their grace period, with when they were
	// first seen.
	Pending map[string]time.Time
	// Deleted are orphans whose grace period was over: their documents and
	// index entries are gone.
	Deleted []string
	// Cleared are limiters declared again: their orphan mark was removed.
	Cleared []string
	// Longer counts index members longer than any limiter name (written by
	// hand, never read, and refused by List), removed with the documents
	// they named.
	Longer int64
	// StaleMarks counts the orphan marks removed of limiters that the index
	// does not name and that have no document (Remove leaves the mark), or
	// whose name no limiter has (written by hand).
	StaleMarks int64
	// Reindexed are limiters with an orphan mark and a document that the
	// index did not name (it was replaced, or their member removed by
	// hand): they are indexed again, so that a later run collects them after
	// their grace. The index is filled up to MaxLimiters only: a limiter
	// past it keeps its mark and waits for room.
	Reindexed []string
	// IndexReplaced and MarksReplaced are the Redis types of an index or
	// orphan marks of another type (written by hand or by a foreign tool)
	// that the run replaced: "" when it replaced none. MarksReplaced is
	// "hash" for marks replaced for their number: MarksOver, above
	// 2*MaxLimiters, more than GC keeps.
	IndexReplaced, MarksReplaced string
	MarksOver                    int64
	// Found are limiters whose document the scan found and the index did
	// not name (written by another SDK or by hand, or left by an index that
	// was replaced): they are indexed, and appear in Marked (no longer
	// declared), Pending (an orphan mark they had is kept) or Cleared as
	// an indexed limiter does, but are never deleted by the run that
	// finds them. Left are those it found and did not index: the index
	// holds MaxLimiters, or they may be another rule store's documents (a
	// store whose prefix starts with this one's, or with which this one's
	// starts, has its @index or @rev there). Each run scans up to
	// Options.GCScanKeys keys of the Redis server (docs/limits.md);
	// ScanCursor is where the next run
	// goes on, 0 when this one ended a pass over the whole keyspace.
	Found, Left []string
	ScanCursor  uint64
}

// GC compares the index of limiters with documents against available (the
// service's parsed available_limiters.yaml, the only authority on which
// limiters exist) and collects the documents of limiters it no longer
// declares, cautiously, since a document may hold the only copy of published
// rules (values published at run time exist nowhere else):
//
//   - with no list (nil, or one declaring no limiter) GC does not run and
//     returns ErrNoLimiterList: pass what config.LoadAvailableLimiters
//     returned, and do not call GC when it failed;
//   - an orphan is first marked with the Redis server's time, so that every
//     process agrees on it, and deleted only by a run at least Options.GCGrace
//     later (default 7 days: longer than a deploy plus a rollback);
//   - a limiter declared again has its mark cleared;
//   - an index of more than MaxLimiters limiters is refused (ErrOverBounds)
//     before its members are read: Remove limiters to bring it under.
//   - an index or orphan marks of another Redis type (written by hand or
//     by a foreign tool) are replaced, with a WARN
//     rate_limit_rule_store_key_replaced: the index by the limiters written
//     from then on (each service's next seed indexes its own), the marks by
//     this run's (each orphan's grace starts over); so are marks of more
//     than 2*MaxLimiters fields, never walked (GCReport.MarksOver);
//   - a limiter with an orphan mark and a document that the index does not
//     name (the index was replaced) is indexed again (GCReport.Reindexed),
//     up to MaxLimiters, and collected after its grace; the mark of one
//     without a document is removed;
//   - a document without a mark that the index does not name (written by
//     another SDK or by hand, or left by a replaced index) is found by a
//     bounded scan of the store's prefix and indexed (GCReport.Found), up to
//     MaxLimiters, then marked as an orphan when its limiter is not
//     declared and collected after its grace, never by the run that found
//     it. The scan examines at most Options.GCScanKeys keys per run
//     (64 SCANs of COUNT 1024 by default), on the
//     Redis server that holds the store's keys (the prefix's hash tag puts
//     them on one node of a Cluster), and the next run goes on from where it
//     stopped (GCReport.ScanCursor). A document that may be another rule
//     store's (one whose prefix starts with this one's, or with which this
//     one's starts, has its @index or @rev key) is left unindexed
//     (GCReport.Left).
//
// Run it at start-up; the whole sweep is one atomic script, and an error
// wrapping ErrUnconfirmed (its reply lost) means it may have run. Every service
// sharing a prefix must ship the same list: a service would orphan another's
// limiters, so give services with different lists different prefixes.
func (s *Store) GC(ctx context.Context, available *config.AvailableLimiters) (GCReport, error) {
	return s.gc(ctx, available, false)
}

// CheckGC runs all that GC runs (its checks and bounds, and its script on
// the Redis server's clock) and writes nothing: its report and error are
// those GC would give now, every orphan it would mark, clear or delete,
// every member and mark it would remove and every key it would replace
// included. A dry run says with it what a GC does.
func (s *Store) CheckGC(ctx context.Context, available *config.AvailableLimiters) (GCReport, error) {
	return s.gc(ctx, available, true)
}

func (s *Store) gc(ctx context.Context, available *config.AvailableLimiters, dry bool) (GCReport, error) {
	if available == nil || available.Proto == nil || len(available.Names()) == 0 {
		return GCReport{}, ErrNoLimiterList
	}
	members, _, err := s.readIndex(ctx)
	if err != nil && !errors.Is(err, errForeignIndex) { // the script replaces a foreign index
		return GCReport{}, fmt.Errorf("rulestore: gc: %w", err)
	}
	sort.Strings(members)
	found, cursor, err := s.scanUnindexed(ctx, members)
	if err != nil {
		return GCReport{}, fmt.Errorf("rulestore: gc: %w", err)
	}
	names := available.Names()
	keys := make([]string, 0, 4+len(members)+len(found))
	keys = append(keys, s.indexKey(), s.orphansKey(), s.revKey(), s.scanKey())
	args := make([]any, 0, 9+len(names)+len(members)+len(found))
	now := ""
	if s.gcNow != nil {
		now = strconv.FormatInt(s.gcNow().UnixMilli(), 10)
	}
	args = append(args, s.grace.Milliseconds(), now, len(names))
	for _, n := range names {
		args = append(args, n)
	}
	for _, m := range append(members, found...) {
		keys = append(keys, s.Key(m))
		args = append(args, m)
	}
	dryArg := "0"
	if dry {
		dryArg = "1"
	}
	args = append(args, rulecheck.MaxNameLen, dryArg, MaxLimiters, maxMarks, len(members), cursor)
	res, err := gcScript.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		if !dry && unanswered(err) { // a dry run writes nothing
			return GCReport{}, fmt.Errorf("rulestore: gc: %w: %w", ErrUnconfirmed, err)
		}
		return GCReport{}, fmt.Errorf("rulestore: gc: %w", err)
	}
	if len(res) != 12 {
		return GCReport{}, fmt.Errorf("rulestore: gc: unexpected reply %v", res)
	}
	strs := func(v any) []string {
		var out []string
		for _, x := range v.([]any) {
			out = append(out, x.(string))
		}
		return out
	}
	ms, err := strconv.ParseInt(res[0].(string), 10, 64)
	if err != nil {
		return GCReport{}, fmt.Errorf("rulestore: gc: bad time %q: %w", res[0], err)
	}
	rep := GCReport{Now: time.UnixMilli(ms), Marked: strs(res[1]), Deleted: strs(res[3]), Cleared: strs(res[4])}
	rep.Longer, _ = res[5].(int64)
	if replaced, _ := res[6].([]any); len(replaced) == 2 {
		rep.IndexReplaced, _ = replaced[0].(string)
		rep.MarksReplaced, _ = replaced[1].(string)
	}
	rep.StaleMarks, _ = res[7].(int64)
	rep.Reindexed = strs(res[8])
	rep.MarksOver, _ = res[9].(int64)
	rep.Found, rep.Left = strs(res[10]), strs(res[11])
	if rep.ScanCursor, err = strconv.ParseUint(cursor, 10, 64); err != nil {
		return GCReport{}, fmt.Errorf("rulestore: gc: bad scan cursor %q: %w", cursor, err)
	}
	if !dry && rep.IndexReplaced != "" {
		s.replacedKey(s.indexKey(), rep.IndexReplaced, indexReplaced)
	}
	if !dry && rep.MarksReplaced != "" {
		var over []slog.Attr
		if rep.MarksOver > 0 {
			over = append(over, slog.Int64("fields", rep.MarksOver), slog.Int("max_fields", maxMarks))
		}
		s.replacedKey(s.orphansKey(), rep.MarksReplaced, marksReplaced, over...)
	}
	pending := strs(res[2])
	for i := 0; i+1 < len(pending); i += 2 {
		v, err := strconv.ParseInt(pending[i+1], 10, 64)
		if err != nil {
			return GCReport{}, fmt.Errorf("rulestore: gc: bad orphan mark %q for %s: %w", pending[i+1], pending[i], err)
		}
		if rep.Pending == nil {
			rep.Pending = map[string]time.Time{}
		}
		rep.Pending[pending[i]] = time.UnixMilli(v)
	}
	return rep, nil
}

func (s *Store) scanKey() string { return s.prefix + scanSuffix }

// scanUnindexed runs the scan for documents the index does not name, up to
// Options.GCScanKeys keys from the cursor the last GC kept, and returns the limiters
// found that are not among members, sorted (at most MaxLimiters: the index
// holds no more; the others are found again by a later pass), and the
// cursor the next run goes on from ("0" when this one ended a pass).
func (s *Store) scanUnindexed(ctx context.Context, members []string) ([]string, string, error) {
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		seen[m] = true
	}
	var found []string
	pattern := keys.GlobEscape(s.prefix) + "*"
	steps := (s.scanKeys + scanCount - 1) / scanCount
	cursor := "" // the one kept in the store
	for range steps {
		res, err := scanScript.Run(ctx, s.client, []string{s.indexKey(), s.scanKey()},
			cursor, pattern, scanCount, len(s.prefix), rulecheck.MaxNameLen).StringSlice()
		if err != nil {
			return nil, "", fmt.Errorf("scan %s: %w", pattern, err)
		}
		if len(res) == 0 {
			return nil, "", fmt.Errorf("scan %s: empty reply", pattern)
		}
		cursor = res[0]
		for _, name := range res[1:] {
			if !seen[name] && len(found) < MaxLimiters {
				seen[name] = true
				found = append(found, name)
			}
		}
		if cursor == "0" {
			break
		}
	}
	sort.Strings(found)
	return found, cursor, nil
}
