package remoterules

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/remoteid"
	"github.com/ratekit/ratekit/observability/observe"
)

// Defaults of Config.
const (
	DefaultTimeout    = 50 * time.Millisecond
	DefaultMaxEntries = 10_000
	DefaultMaxBytes   = 64 << 20
	DefaultCacheFor   = 30 * time.Second
	DefaultStaleFor   = 10 * time.Minute
	DefaultFailures   = 3
	DefaultCooldown   = 5 * time.Second
)

// maxAnswerBytes bounds an answer as received: its rules, a rules document
// (ratelimit.MaxDocumentBytes, docs/limits.md), and room for the other
// fields (a revision, the vary list: about 1.2 KiB at their bounds). gRPC
// would otherwise decode answers up to its default 4 MiB, unknown fields
// included, before the rules' bound is checked.
const maxAnswerBytes = ratelimit.MaxDocumentBytes + 16<<10

// Bounds of the cache.
const (
	// maxKeyBytes bounds a cache key; a longer one is stored as its SHA-256.
	maxKeyBytes = 512
	// compiledBytesPerByte estimates a compiled rule set's heap from its
	// rules' encoded size: measured at about 24 for plain rules and 52 for
	// rules carrying long regexes, so 64 overestimates both.
	compiledBytesPerByte = 64
)

// Config configures a Client.
type Config struct {
	// Service is the calling service's name: the server scopes rules by
	// service and limiter. Required; it must match ^[a-z0-9][a-z0-9_.-]{0,63}$.
	Service string
	// RulesService is the gRPC client of the rules service, for example
	// rulesv1.NewRulesServiceClient(conn). Required.
	RulesService rulesv1.RulesServiceClient
	// Available is the application's available_limiters.yaml. Every answer's
	// rules must pass the checks a rate_limits.yaml entry passes against it:
	// the limiter and the properties must exist and a skip rule must be in the
	// limiter's allowed_skip_rules. Nil skips those cross-document checks (the
	// schema's own checks still run).
	Available *config.AvailableLimiters
	// Timeout bounds each call to the service and each check waiting for one
	// (default DefaultTimeout). A check never waits longer: on a timeout it
	// runs on the local tiers alone.
	Timeout time.Duration
	// MaxEntries bounds the number of cached answers (default
	// DefaultMaxEntries); the least recently used answer is evicted first.
	MaxEntries int
	// MaxBytes bounds the cache's estimated heap (default DefaultMaxBytes):
	// each cached answer's key and bookkeeping, plus once each compiled rule
	// set the answers share, estimated at 64 bytes per byte of its encoded
	// rules. The least recently used answers are evicted until both bounds
	// hold; the newest answer is kept even when it alone exceeds MaxBytes.
	MaxBytes int64
	// CacheFor and StaleFor are the lifetimes of an answer that leaves
	// cache_for_s or stale_for_s at 0 (defaults DefaultCacheFor,
	// DefaultStaleFor). A negative StaleFor means no stale serving.
	CacheFor time.Duration
	StaleFor time.Duration
	// Breaker bounds an outage: after Failures consecutive failed calls (errors,
	// timeouts, invalid answers) no call is made for Cooldown, then one probe
	// goes; its success closes the breaker. Defaults DefaultFailures and
	// DefaultCooldown; Failures < 0 disables the breaker.
	Breaker BreakerConfig
	// Logger receives a WARN record for each failed call (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when set, is told about every lookup and call (see
	// NewPrometheusMetrics). Stats counts the same regardless.
	Metrics Metrics
	// Now is the clock of the cache lifetimes and the breaker (default time.Now).
	Now func() time.Time
}

// BreakerConfig configures a Client's circuit breaker.
type BreakerConfig struct {
	Failures int
	Cooldown time.Duration
}

// Client is the rules service's client; its RulesFor is a ratelimit.Config.RuleSource: it answers
// each check from a cache keyed by limiter and by the values of the answer's
// vary properties, asks the service only for shapes it has not seen (one call
// per shape however many checks wait), serves stale answers while it
// revalidates them, and fails open to the local tiers. It is safe for
// concurrent use.
type Client struct {
	service  string
	rpc      rulesv1.RulesServiceClient
	avail    *config.AvailableLimiters
	timeout  time.Duration
	cacheFor time.Duration
	staleFor time.Duration
	logger   *slog.Logger
	metrics  Metrics
	now      func() time.Time

	shapes atomic.Pointer[map[string]*shape] // limiter -> vary of its last answer

	mu       sync.Mutex
	lru      lru
	inflight map[string]*call
	br       breaker

	stats struct {
		hits, misses, stale, calls, failures, invalid, skipped, compiled atomic.Int64
	}
}

var (
	_ func(context.Context, string, ratelimit.Identifier) *ratelimit.RuleSet = (*Client)(nil).RulesFor // a Config.RuleSource
	_ observe.RemoteSource                                                   = (*Client)(nil)
)

// shape is what a limiter's answers depend on: the vary properties of its
// last answer, and the key prefix that names them.
type shape struct {
	vary   []string
	prefix string
}

type entry struct {
	key        string
	set        *compiled          // shared with every answer of the same rules
	rules      *ratelimit.RuleSet // set.rules; nil: an empty answer, cached too
	revision   string
	freshUntil time.Time
	staleUntil time.Time
	prev, next *entry
}

// call is one request to the service that checks may wait for.
type call struct {
	done  chan struct{}
	rules *ratelimit.RuleSet
}

// New returns a Client. It makes no call until the first check.
func New(cfg Config) (*Client, error) {
	if cfg.RulesService == nil {
		return nil, errors.New("remoterules: Config.RulesService is nil")
	}
	if !validService(cfg.Service) {
		return nil, fmt.Errorf("remoterules: service name %q must match ^[a-z0-9][a-z0-9_.-]{0,63}$", cfg.Service)
	}
	c := &Client{
		service:  cfg.Service,
		rpc:      cfg.RulesService,
		avail:    cfg.Available,
		timeout:  orDefault(cfg.Timeout, DefaultTimeout),
		cacheFor: orDefault(cfg.CacheFor, DefaultCacheFor),
		staleFor: orDefault(cfg.StaleFor, DefaultStaleFor),
		logger:   cfg.Logger,
		metrics:  cfg.Metrics,
		now:      cfg.Now,
		inflight: map[string]*call{},
	}
	if cfg.StaleFor < 0 {
		c.staleFor = 0
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.lru.max = cfg.MaxEntries
	if c.lru.max <= 0 {
		c.lru.max = DefaultMaxEntries
	}
	c.lru.maxBytes = cfg.MaxBytes
	if c.lru.maxBytes <= 0 {
		c.lru.maxBytes = DefaultMaxBytes
	}
	c.lru.items = map[string]*entry{}
	c.lru.sets = map[string]*compiled{}
	c.br = breaker{threshold: cfg.Breaker.Failures, cooldown: orDefault(cfg.Breaker.Cooldown, DefaultCooldown)}
	if c.br.threshold == 0 {
		c.br.threshold = DefaultFailures
	}
	empty := map[string]*shape{}
	c.shapes.Store(&empty)
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func validService(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9':
		case i > 0 && (ch == '_' || ch == '.' || ch == '-'):
		default:
			return false
		}
	}
	return true
}

// RulesFor returns the service's rules for one check, or nil (no rules, or
// no usable answer within the timeout: the local tiers then serve alone). A
// cached answer costs no call; an answer past its fresh lifetime but within
// its stale lifetime is served while one background call revalidates it.
func (c *Client) RulesFor(ctx context.Context, limiter string, id ratelimit.Identifier) *ratelimit.RuleSet {
	var buf [256]byte
	sh := (*c.shapes.Load())[limiter]
	var key []byte
	if sh != nil {
		key = sh.key(buf[:0], id)
	} else {
		key = coldKey(buf[:0], limiter, id)
	}
	now := c.now()
	c.mu.Lock()
	if e := c.lru.get(key); e != nil {
		switch {
		case now.Before(e.freshUntil):
			c.lru.touch(e)
			rules := e.rules
			c.mu.Unlock()
			c.stats.hits.Add(1)
			c.lookup(limiter, LookupHit)
			return rules
		case now.Before(e.staleUntil):
			c.lru.touch(e)
			rules := e.rules
			if c.inflight[e.key] == nil && c.br.allow(now) {
				cl := &call{done: make(chan struct{})}
				c.inflight[e.key] = cl
				go c.fetch(context.WithoutCancel(ctx), cl, e.key, limiter, id, e.revision)
			}
			c.mu.Unlock()
			c.stats.stale.Add(1)
			c.lookup(limiter, LookupStale)
			return rules
		}
		c.lru.remove(e) // past its stale lifetime: the local tiers serve until a new answer
	}
	skey := string(key)
	cl := c.inflight[skey]
	if cl == nil {
		if !c.br.allow(now) {
			c.mu.Unlock()
			c.stats.skipped.Add(1)
			c.lookup(limiter, LookupBreakerOpen)
			return nil
		}
		cl = &call{done: make(chan struct{})}
		c.inflight[skey] = cl
		go c.fetch(context.WithoutCancel(ctx), cl, skey, limiter, id, "")
	}
	c.mu.Unlock()
	c.stats.misses.Add(1)
	c.lookup(limiter, LookupMiss)
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case <-cl.done:
		return cl.rules
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// fetch makes one call for key and publishes its result to the waiters.
func (c *Client) fetch(ctx context.Context, cl *call, key, limiter string, id ratelimit.Identifier, known string) {
	defer func() {
		c.mu.Lock()
		delete(c.inflight, key)
		c.mu.Unlock()
		close(cl.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var first []string // the properties the limiter's answers vary by go first
	if sh := (*c.shapes.Load())[limiter]; sh != nil {
		first = sh.vary
	}
	req := &rulesv1.GetRulesRequest{Service: c.service, Limiter: limiter, Identifier: remoteid.Sendable(id, first), KnownRevision: known}
	c.stats.calls.Add(1)
	start := c.now()
	resp, err := c.rpc.GetRules(ctx, req, grpc.MaxCallRecvMsgSize(maxAnswerBytes))
	if err == nil && remoteid.Unsent(resp.GetVary(), id, req.GetIdentifier()) {
		// The answer was computed without a property it varies by, which a
		// large identifier left out: cached under that property's value,
		// it would serve every identifier of that value. Ask again with
		// those properties first.
		req.Identifier = remoteid.Sendable(id, resp.GetVary())
		c.stats.calls.Add(1)
		resp, err = c.rpc.GetRules(ctx, req, grpc.MaxCallRecvMsgSize(maxAnswerBytes))
	}
	var rules *ratelimit.RuleSet
	answered := err == nil // err is then accept's: the answer is invalid
	if answered {
		rules, err = c.accept(limiter, id, resp, key)
	}
	if answered && errors.Is(err, errNotHeld) && known != "" {
		// The answer revalidated was evicted meanwhile (a full cache
		// churns): no fault of the service. Ask for the rules whole.
		req.KnownRevision = ""
		c.stats.calls.Add(1)
		resp, err = c.rpc.GetRules(ctx, req, grpc.MaxCallRecvMsgSize(maxAnswerBytes))
		if answered = err == nil; answered {
			rules, err = c.accept(limiter, id, resp, key)
		}
	}
	latency := c.now().Sub(start)
	outcome := CallOK
	switch {
	case !answered:
		outcome = CallError
	case err != nil:
		outcome = CallInvalid
		c.stats.invalid.Add(1)
	case resp.GetNotModified():
		outcome = CallNotModified
	}
	if c.metrics != nil {
		c.metrics.Call(limiter, outcome, latency)
	}
	c.mu.Lock()
	if err != nil {
		c.br.failure(c.now())
		c.mu.Unlock()
		c.stats.failures.Add(1)
		c.logger.LogAttrs(ctx, slog.LevelWarn, "remoterules: rules service failed; the local tiers serve",
			slog.String("service", c.service), slog.String("limiter", limiter), slog.String("outcome", string(outcome)), slog.Any("error", err))
		if e := c.staleEntry(key); e != nil {
			cl.rules = e // an answer within its stale lifetime keeps serving
		}
		return
	}
	c.br.success()
	c.mu.Unlock()
	cl.rules = rules
}

// staleEntry returns the rules still servable under key after a failed call.
func (c *Client) staleEntry(key string) *ratelimit.RuleSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.lru.items[key]; e != nil && c.now().Before(e.staleUntil) {
		return e.rules
	}
	return nil
}

// errNotHeld is a not_modified answer for an answer the client does not
// hold: invalid, unless the client sent its revision and evicted it since.
var errNotHeld = errors.New("not_modified, but the client holds no answer")

// accept validates an answer and caches it. An invalid answer is rejected
// whole: nothing of it is cached or applied. Rules already compiled for
// another identifier's answer (same limiter, revision and rules: the same
// override selected them) are shared, not validated and compiled again, so
// distinct identifiers cost a cache entry each, never a rule set each.
func (c *Client) accept(limiter string, id ratelimit.Identifier, resp *rulesv1.GetRulesResponse, reqKey string) (*ratelimit.RuleSet, error) {
	now := c.now()
	fresh := time.Duration(resp.GetCacheForS()) * time.Second
	if fresh == 0 {
		fresh = c.cacheFor
	}
	stale := time.Duration(resp.GetStaleForS()) * time.Second
	if stale == 0 || c.staleFor == 0 {
		stale = c.staleFor
	}
	if resp.GetNotModified() {
		if err := protovalidate.Validate(resp); err != nil {
			return nil, fmt.Errorf("invalid answer for limiter %s: %w", limiter, err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		e := c.lru.items[reqKey]
		if e == nil || (resp.GetRevision() != "" && resp.GetRevision() != e.revision) {
			return nil, fmt.Errorf("invalid answer for limiter %s: %w of revision %q", limiter, errNotHeld, resp.GetRevision())
		}
		e.freshUntil, e.staleUntil = now.Add(fresh), now.Add(fresh+stale)
		c.lru.touch(e)
		return e.rules, nil
	}
	sel, size, err := selection(limiter, resp)
	if err != nil {
		return nil, fmt.Errorf("invalid answer for limiter %s: %w", limiter, err)
	}
	if size > ratelimit.MaxDocumentBytes {
		// A rules document's bound (docs/limits.md): the reference server
		// never stores one, ratekit explain refuses it, and its compiled set
		// alone would be estimated past DefaultMaxBytes.
		return nil, fmt.Errorf("invalid answer for limiter %s: its rules encode to %d bytes, at most %d (ratelimit.MaxDocumentBytes, docs/limits.md)",
			limiter, size, ratelimit.MaxDocumentBytes)
	}
	c.mu.Lock()
	cs := c.lru.set(sel)
	c.mu.Unlock()
	if cs != nil {
		// The rules passed every check when first compiled; the rest of the
		// answer is checked alone.
		if err := protovalidate.Validate(envelope(resp)); err != nil {
			return nil, fmt.Errorf("invalid answer for limiter %s: %w", limiter, err)
		}
	} else {
		rules, err := c.compile(limiter, resp)
		if err != nil {
			return nil, fmt.Errorf("invalid answer for limiter %s: %w", limiter, err)
		}
		cs = &compiled{key: sel, rules: rules, cost: int64(size) * compiledBytesPerByte}
	}
	// The answer is cached under the key of its own vary list, which differs
	// from the request's key on a limiter's first call or when the server's
	// vary list changed.
	var buf [256]byte
	key := string(c.shapeFor(limiter, resp.GetVary()).key(buf[:0], id))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range []string{reqKey, key} {
		if e := c.lru.items[k]; e != nil {
			c.lru.remove(e)
		}
	}
	e := &entry{key: key, set: cs, revision: resp.GetRevision(), freshUntil: now.Add(fresh), staleUntil: now.Add(fresh + stale)}
	c.lru.add(e)
	return e.rules, nil
}

// compile validates an answer whole and compiles its rules (nil when it has
// none).
func (c *Client) compile(limiter string, resp *rulesv1.GetRulesResponse) (*ratelimit.RuleSet, error) {
	if err := protovalidate.Validate(resp); err != nil {
		return nil, err
	}
	if err := config.ValidateRuleList(limiter, resp.GetRules(), c.avail); err != nil {
		return nil, err
	}
	if len(resp.GetRules().GetRules()) == 0 {
		return nil, nil
	}
	rules, err := config.RulesFromProto(resp.GetRules())
	if err != nil {
		return nil, err
	}
	c.stats.compiled.Add(1)
	return ratelimit.CompileRules(tiers.Remote, rules)
}

// selection keys an answer's rules by what selected them: the limiter, the
// document revision and the rules themselves (the matched override's, or the
// default ones), as the SHA-256 of their deterministic encoding. size is that
// encoding's length.
func selection(limiter string, resp *rulesv1.GetRulesResponse) (key string, size int, err error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp.GetRules())
	if err != nil {
		return "", 0, fmt.Errorf("encode rules: %w", err)
	}
	sum := sha256.Sum256(b)
	k := appendField(nil, 's', limiter)
	k = appendField(k, 'r', resp.GetRevision())
	return string(append(k, sum[:]...)), len(b), nil
}

// envelope is an answer without its rules, to validate the rest of it.
func envelope(resp *rulesv1.GetRulesResponse) *rulesv1.GetRulesResponse {
	return &rulesv1.GetRulesResponse{CacheForS: resp.GetCacheForS(), StaleForS: resp.GetStaleForS(),
		Revision: resp.GetRevision(), Vary: resp.GetVary()}
}

// shapeFor records vary as the limiter's shape, returning it.
func (c *Client) shapeFor(limiter string, vary []string) *shape {
	for {
		old := c.shapes.Load()
		if sh := (*old)[limiter]; sh != nil && equalStrings(sh.vary, vary) {
			return sh
		}
		sh := newShape(limiter, vary)
		next := make(map[string]*shape, len(*old)+1)
		for k, v := range *old {
			next[k] = v
		}
		next[limiter] = sh
		if c.shapes.CompareAndSwap(old, &next) {
			return sh
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func newShape(limiter string, vary []string) *shape {
	v := append([]string(nil), vary...)
	sort.Strings(v)
	b := appendField(nil, 's', limiter)
	for _, k := range v {
		b = appendField(b, 'k', k)
	}
	return &shape{vary: v, prefix: string(b)}
}

// key encodes the limiter, the vary property names and the request's values
// of them, length-prefixed so that no two different shapes share a key.
func (s *shape) key(buf []byte, id ratelimit.Identifier) []byte {
	b := append(buf, s.prefix...)
	for _, k := range s.vary {
		if v, ok := id.Get(k); ok {
			b = appendField(b, 'v', v)
		} else {
			b = append(b, '-')
		}
	}
	return bounded(b)
}

// coldKey keys a limiter whose shape is not known yet by the whole
// identifier, so that concurrent first checks of one identifier share a call.
func coldKey(buf []byte, limiter string, id ratelimit.Identifier) []byte {
	b := appendField(buf, 'c', limiter)
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := id.Get(k); ok {
			b = appendField(b, 'k', k)
			b = appendField(b, 'v', v)
		}
	}
	return bounded(b)
}

func appendField(b []byte, tag byte, s string) []byte {
	b = append(b, tag)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// bounded replaces a key longer than maxKeyBytes by its SHA-256, so an
// identifier's size never sets the cache's memory.
func bounded(b []byte) []byte {
	if len(b) <= maxKeyBytes {
		return b
	}
	sum := sha256.Sum256(b)
	return append([]byte{'h'}, sum[:]...)
}

func (c *Client) lookup(limiter string, l Lookup) {
	if c.metrics != nil {
		c.metrics.Lookup(limiter, l)
	}
}

// Stats counts what a Client did since New.
type Stats struct {
	Hits     int64 // checks answered from a fresh cached answer
	Stale    int64 // checks answered from a stale answer (revalidating)
	Misses   int64 // checks with no usable cached answer that made or joined a call
	Calls    int64 // calls made to the service
	Failures int64 // calls that failed (error, timeout or invalid answer)
	Invalid  int64 // answers rejected by validation (also in Failures)
	Skipped  int64 // checks with no usable cached answer and the breaker open: no call, local tiers only
	Compiled int64 // answers whose rules were validated and compiled (the others shared a cached rule set)
	Entries  int   // answers cached now
	Sets     int   // distinct compiled rule sets cached now
	Bytes    int64 // the cache's estimated heap now (see Config.MaxBytes)
	Open     bool  // the breaker is open now
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	n, sets, bytes, open := len(c.lru.items), len(c.lru.sets), c.lru.bytes, c.br.isOpen()
	c.mu.Unlock()
	return Stats{
		Hits: c.stats.hits.Load(), Stale: c.stats.stale.Load(), Misses: c.stats.misses.Load(),
		Calls: c.stats.calls.Load(), Failures: c.stats.failures.Load(), Invalid: c.stats.invalid.Load(),
		Skipped: c.stats.skipped.Load(), Compiled: c.stats.compiled.Load(), Entries: n, Sets: sets, Bytes: bytes, Open: open,
	}
}

// RemoteStatus reports the client's state for the debug page
// (debug.Options.Remote).
func (c *Client) RemoteStatus() observe.RemoteStatus {
	st := c.Stats()
	return observe.RemoteStatus{Service: c.service, Entries: st.Entries, Hits: st.Hits, Stale: st.Stale, Misses: st.Misses,
		Calls: st.Calls, Failures: st.Failures, Invalid: st.Invalid, Skipped: st.Skipped, BreakerOpen: st.Open}
}
