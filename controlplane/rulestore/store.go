package rulestore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// Defaults for Options.
const (
	// DefaultPrefix starts every key of the store. The {rules} hash tag puts
	// all documents and the index in one Redis Cluster slot (see the package
	// documentation for the trade-off).
	DefaultPrefix = "ratekit:rules:{rules}:"
	// DefaultInterval is how often the replica rereads the documents.
	DefaultInterval = 5 * time.Second
	// DefaultTimeout bounds each Redis call of a refresh.
	DefaultTimeout = 2 * time.Second
	// DefaultGCGrace is how long an orphaned document is kept after GC first
	// sees it: longer than a deploy plus a rollback.
	DefaultGCGrace = 7 * 24 * time.Hour
)

// MaxLimiters bounds the index of limiters with a document
// (docs/limits.md), since List and GC read every indexed limiter at once. A
// Publish or Seed that would add a limiter past it is refused whole
// (ErrOverBounds); writes to limiters already indexed, Delete and Remove
// always proceed, so an index over the bound (written by hand or by another
// SDK) can be brought back under it. List and GC refuse such an index before
// reading its members.
const MaxLimiters = config.MaxLimiters

// Names of the store's own keys, after the prefix. A limiter name never
// contains '@', so they cannot collide with a document.
const (
	indexSuffix   = "@index"   // set of limiters with a document
	orphansSuffix = "@orphans" // hash limiter -> first seen orphaned (Unix ms, Redis clock)
	revSuffix     = "@rev"     // counter bumped by every write that changes something
)

// Client is what the store needs from a go-redis client: its scripts, as
// redis.Script runs them (EVALSHA, then EVAL when Redis has not the script
// cached); every read and write of the store is one of its scripts.
// *redis.Client (also from NewFailoverClient), *redis.ClusterClient,
// *redis.Ring and every redis.UniversalClient satisfy it.
type Client interface {
	redis.Scripter
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// Options configures New. The zero value is usable.
type Options struct {
	// Prefix starts every key (default DefaultPrefix). A limiter's document
	// is Prefix+limiter; the index, orphan marks, revision counter and GC's
	// scan cursor are Prefix+"@index", "@orphans", "@rev" and "@scan". On Redis Cluster (and a Ring)
	// the prefix must contain a {hash tag}. "labkit:ratelimit:rules:" gives
	// the key layout of the design ratekit follows (docs/design.md), on a
	// standalone Redis. At most ratelimit.MaxKeyPrefixLen bytes.
	Prefix string
	// Available is the service's available_limiters.yaml. When set, Publish
	// and Seed check every rule against it (limiter declared, properties in
	// its available_properties, skip rules allowed) before writing anything.
	Available *config.AvailableLimiters
	// Interval is the replica's refresh period (default DefaultInterval). Each
	// refresh waits Interval plus up to 10% at random, so a fleet started at
	// once spreads its reads.
	Interval time.Duration
	// Timeout bounds each Redis call of a refresh (default DefaultTimeout).
	// While a seed is owed (ErrSeedOwed), the seed and the refresh's first
	// read share one: a hung Redis holds a refresh for one Timeout.
	Timeout time.Duration
	// GCGrace is how long GC keeps an orphaned document after it first saw it
	// (default DefaultGCGrace).
	GCGrace time.Duration
	// GCScanKeys bounds the keys of the Redis server one GC run's scan for
	// documents the index does not name examines (default
	// DefaultGCScanKeys, at most MaxGCScanKeys): the next run goes on from
	// where it stopped. A larger value ends a pass over a big keyspace in
	// fewer runs, each SCAN of it still its own short script call.
	GCScanKeys int
	// Logger receives refresh failures, recoveries and rejected documents
	// (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when set, is told about every refresh of every bound limiter
	// and every rejected document (*observe.Metrics is one), and, when it
	// is a ConfigWatcher, about every bound limiter's document key.
	Metrics Metrics
	// ClusterMode forces the Redis Cluster checks on a client whose type does
	// not tell (a wrapper around *redis.ClusterClient). *redis.ClusterClient
	// and *redis.Ring are detected.
	ClusterMode bool
}

// Store is the Redis rule store of one service: it writes the per-limiter
// documents (Seed, Publish, Delete, Remove, GC) and keeps the bound
// limiters' rules in step with them (Bind, Refresh, Run). It is safe for
// concurrent use.
type Store struct {
	client   Client
	prefix   string
	avail    *config.AvailableLimiters
	interval time.Duration
	timeout  time.Duration
	grace    time.Duration
	logger   *slog.Logger
	metrics  Metrics
	now      func() time.Time

	// gcNow, when set, replaces Redis TIME in GC (tests move time with it).
	gcNow    func() time.Time
	scanKeys int // GC's scan bound, Options.GCScanKeys

	refreshMu sync.Mutex // one refresh at a time
	mu        sync.RWMutex
	bound     map[string]*binding
	// seedOwed: the last SeedBound failed, so the bound tiers win over the
	// documents' file and default tiers; seedRetry: it failed for want of
	// Redis, and Refresh seeds again (see SeedBound).
	seedOwed, seedRetry bool
	// seeded: a SeedBound succeeded, so the service writes its documents and
	// Refresh seeds again those that go (seedGone).
	seeded bool
}

// Metrics is what the store reports about its health. *observe.Metrics
// implements it; the store declares it so that it does not depend on the
// telemetry packages.
type Metrics interface {
	// RuleStoreRefresh records one refresh of a limiter's document: err nil
	// on success (a missing document is a success).
	RuleStoreRefresh(limiter string, err error)
	// ConfigRejected records a rejected document, by its key.
	ConfigRejected(key string)
}

// ConfigWatcher is an optional interface of a Metrics: Bind calls
// ConfigWatched with the key of the limiter's document, before any refresh
// reads it, so that the key's rejection counter is exported at 0 and a
// rejection is an increase of it (to Prometheus a counter born at 1 by its
// first rejection has not increased). *observe.Metrics implements it. It is
// apart from Metrics so that a Metrics written without it still is one.
type ConfigWatcher interface {
	ConfigWatched(key string)
}

// ConfigAcceptor is an optional interface of a Metrics: after each refresh
// that loads a bound limiter's document, or finds it unchanged or missing,
// the store calls ConfigAccepted with its key, so that what ConfigRejected
// marked rejected is cleared once the key holds an accepted document (a
// rejection counter cannot say that a process still runs on its last good
// rules). *observe.Metrics implements it: RatekitConfigRejected alerts on
// its config_rejected gauge.
type ConfigAcceptor interface {
	ConfigAccepted(key string)
}

// New returns a Store on client. The store does not own client: closing it is
// the caller's business.
func New(client Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("rulestore: client is nil")
	}
	if n := len(opts.Prefix); n > ratelimit.MaxKeyPrefixLen {
		return nil, fmt.Errorf("rulestore: prefix of %d bytes, at most %d", n, ratelimit.MaxKeyPrefixLen)
	}
	s := &Store{
		client:   client,
		prefix:   opts.Prefix,
		avail:    opts.Available,
		interval: opts.Interval,
		timeout:  opts.Timeout,
		grace:    opts.GCGrace,
		scanKeys: opts.GCScanKeys,
		logger:   opts.Logger,
		metrics:  opts.Metrics,
		now:      time.Now,
		bound:    map[string]*binding{},
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.grace <= 0 {
		s.grace = DefaultGCGrace
	}
	switch {
	case s.scanKeys < 0 || s.scanKeys > MaxGCScanKeys:
		return nil, fmt.Errorf("rulestore: GCScanKeys %d, want 1 to %d (0: the default, %d)", s.scanKeys, MaxGCScanKeys, DefaultGCScanKeys)
	case s.scanKeys == 0:
		s.scanKeys = DefaultGCScanKeys
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	sharded := opts.ClusterMode
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		sharded = true
	}
	if sharded && hashTag(s.prefix) == "" {
		return nil, fmt.Errorf("rulestore: prefix %q has no {hash tag}: on Redis Cluster the documents and the index must share a slot (use, e.g., %q)", s.prefix, DefaultPrefix)
	}
	return s, nil
}

// hashTag returns the hash tag Redis Cluster uses for key, "" when none.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return key[i+1 : i+1+j]
}

// Key returns the Redis key of a limiter's document.
func (s *Store) Key(limiter string) string { return s.prefix + limiter }

func (s *Store) indexKey() string   { return s.prefix + indexSuffix }
func (s *Store) orphansKey() string { return s.prefix + orphansSuffix }
func (s *Store) revKey() string     { return s.prefix + revSuffix }

// What follows from replacing the index or the orphan marks (replacedKey).
const (
	indexReplaced = "the limiters written from now on are indexed (each service's next seed indexes its own, GC the orphans it had marked and the documents its scan finds)"
	marksReplaced = "orphans are marked again, their grace period starting over"
)

// replacedKey logs that a write replaced one of the store's own keys, found
// to be of another Redis type (written by hand or by a foreign tool) or
// over a bound (attrs say which), and what follows from it.
func (s *Store) replacedKey(key, typ, then string, attrs ...slog.Attr) {
	all := append([]slog.Attr{slog.String("key", key), slog.String("type", typ)}, attrs...)
	all = append(all, slog.String("then", then))
	s.logger.LogAttrs(context.Background(), slog.LevelWarn, "rate_limit_rule_store_key_replaced", all...)
}

// ErrNoDocument is wrapped by the error of Document for a limiter without a
// document, and is the Err of a List Entry whose indexed limiter has none.
var ErrNoDocument = errors.New("rulestore: no document")

// Document reads a limiter's stored document. The error wraps ErrNoDocument
// when there is none, and ErrInvalidDocument when no process would load it.
func (s *Store) Document(ctx context.Context, limiter string) (*configv1.LimiterRules, error) {
	doc, _, err := s.VersionedDocument(ctx, limiter)
	if err == nil && doc == nil {
		return nil, fmt.Errorf("%w for limiter %s (key %s)", ErrNoDocument, limiter, s.Key(limiter))
	}
	return doc, err
}

// VersionedDocument reads a limiter's stored document and its Version: a
// nil document and "" when the limiter has none. An editor passes the
// version back to PublishIf, DeleteIf or RemoveIf. A document no process would load
// gives an error wrapping ErrInvalidDocument, with its version when it is a
// string within ratelimit.MaxDocumentBytes.
func (s *Store) VersionedDocument(ctx context.Context, limiter string) (*configv1.LimiterRules, string, error) {
	key := s.Key(limiter)
	sts, err := s.readStored(ctx, []string{key})
	if err != nil {
		return nil, "", fmt.Errorf("rulestore: read %s: %w", key, err)
	}
	version := ""
	if st := sts[0]; st.present && st.bad == nil {
		version = Version([]byte(st.raw)) // also of an invalid document: DeleteIf shrinks it, RemoveIf takes it
	}
	doc, err := s.decodeDeclared(limiter, key, sts[0])
	if err != nil {
		return nil, version, err
	}
	return doc, version, nil
}

// decodeDeclared decodes a document read for a reader (VersionedDocument,
// List) and, when Options.Available declares its limiter, runs checkRead on
// it as the limiter's replicas do: a document they reject is reported
// invalid, so that a remove is offered for it. An orphan's document (its
// limiter no longer declared) is left to GC.
func (s *Store) decodeDeclared(limiter, key string, st stored) (*configv1.LimiterRules, error) {
	doc, err := st.decode(key)
	if err != nil || doc == nil || s.avail == nil || s.avail.Spec(limiter) == nil {
		return doc, err
	}
	if err := s.checkRead(limiter, doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidDocument, key, err)
	}
	return doc, nil
}

// RawDocument reads a limiter's stored document as the bytes stored, bounded
// as every reader reads it: a key of another Redis type, or a string over
// ratelimit.MaxDocumentBytes, is an error wrapping ErrInvalidDocument, its
// value never received. present is false when the limiter has none. The
// bytes are not validated (Document does that).
func (s *Store) RawDocument(ctx context.Context, limiter string) (raw string, present bool, err error) {
	key := s.Key(limiter)
	sts, err := s.readStored(ctx, []string{key})
	if err != nil {
		return "", false, fmt.Errorf("rulestore: read %s: %w", key, err)
	}
	return sts[0].raw, sts[0].present, sts[0].bad
}

//go:embed index.lua
var indexLua string

var indexScript = redis.NewScript(indexLua)

// errForeignIndex is wrapped by readIndex's error for an index key of
// another Redis type than a set, which GC replaces.
var errForeignIndex = errors.New("not a set")

// readIndex returns the members of the index, unsorted, and how many
// members longer than a limiter name (rulecheck.MaxNameLen) it holds, which
// are not received; an index of more than MaxLimiters members is refused by
// its size, its members never received, and a key of another Redis type by
// its type (errForeignIndex).
func (s *Store) readIndex(ctx context.Context) (names []string, longer int64, err error) {
	key := s.indexKey()
	res, err := indexScript.Run(ctx, s.client, []string{key}, MaxLimiters, rulecheck.MaxNameLen).Slice()
	if err != nil {
		return nil, 0, fmt.Errorf("read index %s: %w", key, err)
	}
	n, _ := res[0].(int64)
	if n < 0 && len(res) == 2 {
		return nil, 0, fmt.Errorf("the index %s is a Redis %v, %w (written past the store): GC (ratekit rules gc) or the next write replaces it, and each service's next seed indexes its limiters again",
			key, res[1], errForeignIndex)
	}
	if n > MaxLimiters {
		return nil, 0, fmt.Errorf("%w: the index %s holds %d limiters, at most %d (rulestore.MaxLimiters, docs/limits.md): Remove the documents of limiters no service declares (redis-cli SSCAN %s lists them)",
			ErrOverBounds, key, n, MaxLimiters, key)
	}
	if len(res) < 2 {
		return nil, 0, fmt.Errorf("read index %s: unexpected reply %v", key, res)
	}
	longer, _ = res[1].(int64)
	names = make([]string, 0, len(res)-2)
	for _, v := range res[2:] {
		m, ok := v.(string)
		if !ok {
			return nil, 0, fmt.Errorf("read index %s: unexpected member %v", key, v)
		}
		names = append(names, m)
	}
	return names, longer, nil
}

//go:embed marks.lua
var marksLua string

var marksScript = redis.NewScript(marksLua)

// maxMarkLen bounds an orphan mark a read receives: a time in Unix ms has 13
// digits until the year 2286, and GC (gc.lua) counts a mark longer than 15
// bytes as none and marks the limiter again.
const maxMarkLen = 15

// readMarks returns the orphan marks of limiters, one per limiter (nil for
// none), bounded: a mark longer than maxMarkLen, and every mark of a key of
// another Redis type than a hash, reads as none and is never received.
func (s *Store) readMarks(ctx context.Context, limiters []string) ([]any, error) {
	args := make([]any, 0, 1+len(limiters))
	args = append(args, maxMarkLen)
	for _, l := range limiters {
		args = append(args, l)
	}
	marks, err := marksScript.Run(ctx, s.client, []string{s.orphansKey()}, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(marks) != len(limiters) {
		return nil, fmt.Errorf("unexpected reply of %d marks for %d limiters", len(marks), len(limiters))
	}
	return marks, nil
}

// Entry is one limiter of the index, as List reads it.
type Entry struct {
	Limiter string
	Key     string
	// Document is the decoded document; nil when it is missing or invalid.
	Document *configv1.LimiterRules
	// Err says why Document is nil: ErrNoDocument (indexed but gone), an
	// error wrapping ErrInvalidDocument (and the validation error, if any) for
	// a document no process would load, or one wrapping ErrNotRead for a
	// document List left unread (past MaxReadBytes).
	Err error
	// Version is the document's Version ("" when it is missing, is not a
	// string within ratelimit.MaxDocumentBytes, or was not read), for
	// PublishIf, DeleteIf and RemoveIf.
	Version string
	// OrphanSince is when GC first found the limiter missing from
	// available_limiters.yaml (zero: not an orphan, or a mark that is no
	// time in ms, which GC makes again).
	OrphanSince time.Time
}

// List reads the index and every indexed document, sorted by limiter. An
// index of more than MaxLimiters limiters is refused (ErrOverBounds) before
// its members are read, and an index of another Redis type by its type
// (GC or the next write replaces it). It receives at most MaxReadBytes of
// documents: an entry past that bound, and every one after it, is not read
// (its Err wraps ErrNotRead and says so; Document reads it).
func (s *Store) List(ctx context.Context) ([]Entry, error) {
	names, longer, err := s.readIndex(ctx)
	if err != nil {
		return nil, fmt.Errorf("rulestore: %w", err)
	}
	if longer > 0 {
		return nil, fmt.Errorf("%w: the index %s holds %d member(s) longer than %d bytes, which no limiter name is (written by hand): GC (ratekit rules gc) removes them",
			ErrOverBounds, s.indexKey(), longer, rulecheck.MaxNameLen)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, nil
	}
	// The marks of the listed limiters only: the hash may hold more (by
	// hand), and a list reads no more than its names bound.
	marks, err := s.readMarks(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("rulestore: read orphan marks %s: %w", s.orphansKey(), err)
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.Key(n)
	}
	sts, err := s.readStored(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("rulestore: read documents: %w", err)
	}
	out := make([]Entry, len(names))
	for i, n := range names {
		e := Entry{Limiter: n, Key: keys[i]}
		switch st := sts[i]; {
		case !st.present:
			e.Err = ErrNoDocument
		default:
			if st.bad == nil && !st.later {
				e.Version = Version([]byte(st.raw))
			}
			e.Document, e.Err = s.decodeDeclared(n, keys[i], st)
		}
		if ms, ok := marks[i].(string); ok {
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				e.OrphanSince = time.UnixMilli(v)
			}
		}
		out[i] = e
	}
	return out, nil
}
