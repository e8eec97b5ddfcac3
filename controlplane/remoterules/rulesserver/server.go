package rulesserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"buf.build/go/protovalidate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/promset"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// Defaults of Config.
const (
	DefaultKeyPrefix = "ratekit:rules:"
	DefaultCacheFor  = 30 * time.Second
	DefaultStaleFor  = 10 * time.Minute
	// MaxDocumentBytes bounds an override document, written or read: the
	// rules model's bound on every rules document (docs/limits.md).
	MaxDocumentBytes = ratelimit.MaxDocumentBytes
	// MaxCacheFor and MaxStaleFor bound Config.CacheFor and Config.StaleFor:
	// the protocol's bounds on an answer's cache_for_s and stale_for_s.
	MaxCacheFor = 24 * time.Hour
	MaxStaleFor = 7 * 24 * time.Hour
)

// Errors of the document operations (Get, Put, Delete), which wrap them with
// the document's service and limiter: test them with errors.Is. The HTTP API
// answers them 404, 409 and 413.
var (
	// ErrNotFound: Get or Delete found no document stored.
	ErrNotFound = errors.New("rulesserver: no override document")
	// ErrConflict: the revision a Put or Delete expects (If-Match) is not
	// the stored one.
	ErrConflict = errors.New("rulesserver: revision conflict")
	// ErrTooLarge: a document Put would store, or one Get reads, is over
	// MaxDocumentBytes in proto's binary encoding.
	ErrTooLarge = fmt.Errorf("rulesserver: override document over %d bytes", MaxDocumentBytes)
)

// errStoreRead wraps a failure to read the store (Redis down, hung), whose
// cause GetRules logs rather than tells its callers.
var errStoreRead = errors.New("the rule store is unavailable")

// Config configures a Server.
type Config struct {
	// Redis holds the override documents (a standalone client or a cluster
	// client: each document is one key). Required.
	Redis redis.UniversalClient
	// KeyPrefix starts every key (default DefaultKeyPrefix), at most
	// ratelimit.MaxKeyPrefixLen bytes.
	KeyPrefix string
	// Available optionally maps a service name to its available_limiters.yaml:
	// a document of that service must then name a declared limiter and only
	// its properties (in rules and in selectors), and respect its skip
	// allow-list. Documents of other
	// services get the checks that need no such file.
	Available map[string]*config.AvailableLimiters
	// CacheFor and StaleFor are the lifetimes answered for documents that
	// leave them at 0, and for (service, limiter) pairs with no document: at
	// most MaxCacheFor and MaxStaleFor (defaults DefaultCacheFor,
	// DefaultStaleFor).
	CacheFor time.Duration
	StaleFor time.Duration
	// Logger receives an ERROR record for each invalid stored document, and
	// the management API's audit records: one "rate_limit_rules_write" per
	// PUT or DELETE (who, what, outcome; WARN when it failed) and one WARN
	// "rate_limit_rules_refused" per request turned away (default
	// slog.Default()).
	Logger *slog.Logger
	// Authorize is the management API's authorization hook for writes (PUT,
	// DELETE): it names who writes, for the audit log, or refuses (ok
	// false: 403). Without it only clients connecting from a loopback
	// address to a loopback address may write (audited as "loopback"): a
	// connection from loopback to another address of the host is
	// forwarded (a mesh sidecar sends every client's request from
	// 127.0.0.6 to the pod's IP). Reads are never refused.
	Authorize Authorizer
	// AllowedHosts are the Host names the management API answers to ("name"
	// on any port, "name:port", or "*" for any). Empty: on a loopback
	// listener only localhost, 127.0.0.1 and [::1] (any port), so a hostile
	// name resolved to 127.0.0.1 (DNS rebinding) is refused; on other
	// listeners any Host.
	AllowedHosts []string
}

// cachedDoc is a decoded stored document and its estimated heap.
type cachedDoc struct {
	doc  *rulesv1.OverrideDocument
	cost int64
}

// rejection is a stored revision that load refused, and why. odd is set
// instead of rev for a key that was never received: one of another Redis
// type ("type list"), or a revision over maxRevisionBytes ("revision
// 8388608").
type rejection struct {
	rev string
	odd string
	err error
}

// maxRevisionBytes is the schema's bound on a revision (string.max_bytes of
// OverrideDocument.revision and GetRulesResponse.revision): the scripts
// never send a longer stored one, which only a hand-write makes. Sent, it
// crossed the wire at every read and every GetRules carried it back to
// Redis as the revision known, 8 MiB each way.
const maxRevisionBytes = 128

// Authorizer decides whether a management request may write and names who
// makes it, for the audit log; ok false refuses it.
type Authorizer func(r *http.Request) (who string, ok bool)

// Server is the reference rules service: GetRules answers from override
// documents in Redis, and Put, Get and Delete (and Handler, their HTTP form)
// manage them.
type Server struct {
	rulesv1.UnimplementedRulesServiceServer

	rdb       redis.UniversalClient
	prefix    string
	available map[string]*config.AvailableLimiters
	cacheFor  uint32
	staleFor  uint32
	logger    *slog.Logger
	authorize Authorizer
	hosts     []string
	// storeDown is set while GetRules finds the store failing: logged when
	// it starts and when it ends, not on every call.
	storeDown atomic.Bool

	// docs holds the last decoded, validated document per key with its
	// revision, so an unchanged document costs GetRules one round trip and
	// no decoding; rejected holds the revision of a key's stored document
	// that was refused and why, so it is read, parsed and logged once, not
	// on every call. A key is in one map at most; each is cleared whole when
	// it reaches maxCachedDocs, and docs too when its estimated heap
	// (docBytes) would pass maxCachedDocBytes.
	mu       sync.Mutex
	docs     map[string]cachedDoc
	docBytes int64
	rejected map[string]rejection

	answers *prometheus.CounterVec
	ops     *prometheus.CounterVec
	latency prometheus.Histogram
	metrics promset.Set // the three above
}

var (
	_ rulesv1.RulesServiceServer = (*Server)(nil)
	_ prometheus.Collector       = (*Server)(nil)
)

// New returns a Server. It refuses a Config without Redis, or with a
// CacheFor, StaleFor or KeyPrefix over its bound.
func New(cfg Config) (*Server, error) {
	if cfg.Redis == nil {
		return nil, errors.New("rulesserver: Config.Redis is nil")
	}
	// Every client rejects an answer whose lifetimes pass the protocol's
	// bounds (GetRulesResponse.cache_for_s, stale_for_s).
	if cfg.CacheFor > MaxCacheFor {
		return nil, fmt.Errorf("rulesserver: Config.CacheFor %v is over %v, the protocol's bound on cache_for_s", cfg.CacheFor, MaxCacheFor)
	}
	if cfg.StaleFor > MaxStaleFor {
		return nil, fmt.Errorf("rulesserver: Config.StaleFor %v is over %v, the protocol's bound on stale_for_s", cfg.StaleFor, MaxStaleFor)
	}
	if n := len(cfg.KeyPrefix); n > ratelimit.MaxKeyPrefixLen {
		return nil, fmt.Errorf("rulesserver: Config.KeyPrefix of %d bytes, at most %d", n, ratelimit.MaxKeyPrefixLen)
	}
	s := &Server{
		rdb:       cfg.Redis,
		prefix:    cfg.KeyPrefix,
		available: cfg.Available,
		cacheFor:  seconds(cfg.CacheFor, DefaultCacheFor),
		staleFor:  seconds(cfg.StaleFor, DefaultStaleFor),
		logger:    cfg.Logger,
		authorize: cfg.Authorize,
		hosts:     cfg.AllowedHosts,
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_rules_server_answers_total",
			Help: "GetRules answers, by outcome (override, default, empty, not_modified, invalid_request, error).",
		}, []string{"outcome"}),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_rules_server_documents_total",
			Help: "Management operations on override documents, by operation and outcome.",
		}, []string{"op", "outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratekit_rules_server_get_rules_seconds",
			Help:    "Latency of GetRules.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
	}
	s.metrics = promset.Set{s.answers, s.ops, s.latency}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	s.docs = map[string]cachedDoc{}
	s.rejected = map[string]rejection{}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s, nil
}

func seconds(d, def time.Duration) uint32 {
	if d <= 0 {
		d = def
	}
	return uint32(max(1, d/time.Second))
}

// Describe implements prometheus.Collector.
func (s *Server) Describe(ch chan<- *prometheus.Desc) { s.metrics.Describe(ch) }

// Collect implements prometheus.Collector.
func (s *Server) Collect(ch chan<- prometheus.Metric) { s.metrics.Collect(ch) }

// key is the Redis key of a (service, limiter) document. Both names are
// validated first and hold no ':', so distinct pairs never share a key.
func (s *Server) key(service, limiter string) string { return s.prefix + service + ":" + limiter }

// GetRules answers the rules of the document of (service, limiter): those of
// the most specific override whose selector the identifier matches, else the
// document's default rules. vary lists every selector property, so a client
// caches one answer per combination of their values. An invalid request is
// refused (InvalidArgument) naming its first config.MaxReportedErrors
// problems, with at most 80 bytes of each property name.
func (s *Server) GetRules(ctx context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
	start := time.Now()
	defer func() { s.latency.Observe(time.Since(start).Seconds()) }()
	if err := protovalidate.Validate(req); err != nil {
		s.answers.WithLabelValues("invalid_request").Inc()
		return nil, status.Errorf(codes.InvalidArgument, "get rules: %s", refusal(err))
	}
	doc, err := s.load(ctx, req.GetService(), req.GetLimiter())
	if errors.Is(err, ErrNotFound) {
		s.answers.WithLabelValues("empty").Inc()
		return &rulesv1.GetRulesResponse{Rules: &configv1.RuleList{}, CacheForS: s.cacheFor, StaleForS: s.staleFor}, nil
	}
	if errors.Is(err, errStoreRead) {
		s.answers.WithLabelValues("error").Inc()
		// The cause is logged here, once a failure streak: told to every
		// caller it named Redis's address ("dial tcp 10.0.0.5:6379").
		if !s.storeDown.Swap(true) {
			s.logger.WarnContext(ctx, "rulesserver: the rule store failed; GetRules answers Unavailable until it recovers", "error", err)
		}
		return nil, status.Error(codes.Unavailable, "get rules: the rule store is unavailable")
	}
	if err != nil { // an invalid stored document, which the caller may read about
		s.answers.WithLabelValues("error").Inc()
		return nil, status.Errorf(codes.Unavailable, "get rules: %v", err)
	}
	if s.storeDown.Swap(false) {
		s.logger.InfoContext(ctx, "rulesserver: the rule store recovered")
	}
	resp, matched := Answer(doc, req.GetIdentifier())
	if resp.CacheForS == 0 {
		resp.CacheForS = s.cacheFor
	}
	if resp.StaleForS == 0 {
		resp.StaleForS = s.staleFor
	}
	outcome := "default"
	if matched {
		outcome = "override"
	}
	if kr := req.GetKnownRevision(); kr != "" && kr == resp.Revision {
		outcome = "not_modified"
		resp.NotModified, resp.Rules = true, nil
	}
	s.answers.WithLabelValues(outcome).Inc()
	return resp, nil
}

// refusal renders the violations of a refused request as protovalidate
// does, each map key cut as clip cuts it, and the first
// config.MaxReportedErrors of them, then a count of the others: the keys
// are the client's, and were quoted whole, so a request of 0.6 MB of bad
// property names was refused with 3.7 MB.
func refusal(err error) string {
	var ve *protovalidate.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	for _, v := range ve.Violations { // the violations are this request's own
		for _, e := range v.Proto.GetField().GetElements() {
			if e.HasStringKey() {
				e.SetStringKey(clip(e.GetStringKey()))
			}
		}
	}
	n := len(ve.Violations)
	if n <= config.MaxReportedErrors {
		return ve.Error()
	}
	shown := &protovalidate.ValidationError{Violations: ve.Violations[:config.MaxReportedErrors]}
	return fmt.Sprintf("%s\n - and %d more", shown.Error(), n-config.MaxReportedErrors)
}

// Answer computes the answer of doc for identifier: the rules of the most
// specific matching override (most selector properties, document order among
// equals), else the default rules; vary is every selector property, sorted.
// matched reports that an override, not the default, made the answer.
func Answer(doc *rulesv1.OverrideDocument, identifier map[string]string) (resp *rulesv1.GetRulesResponse, matched bool) {
	overrides := append([]*rulesv1.Override(nil), doc.GetOverrides()...)
	sort.SliceStable(overrides, func(i, j int) bool { return len(overrides[i].GetSelector()) > len(overrides[j].GetSelector()) })
	vary := map[string]struct{}{}
	for _, o := range overrides {
		for k := range o.GetSelector() {
			vary[k] = struct{}{}
		}
	}
	resp = &rulesv1.GetRulesResponse{
		Rules:     doc.GetDefaultRules(),
		CacheForS: doc.GetCacheForS(),
		StaleForS: doc.GetStaleForS(),
		Revision:  doc.GetRevision(),
		Vary:      make([]string, 0, len(vary)),
	}
	for k := range vary {
		resp.Vary = append(resp.Vary, k)
	}
	sort.Strings(resp.Vary)
	for _, o := range overrides {
		if selects(o.GetSelector(), identifier) {
			resp.Rules, matched = o.GetRules(), true
			break
		}
	}
	if resp.Rules == nil {
		resp.Rules = &configv1.RuleList{}
	}
	return resp, matched
}

func selects(selector, identifier map[string]string) bool {
	for k, v := range selector {
		if got, ok := identifier[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// MaxSelectorProperties bounds the distinct properties a document's selectors
// use: they are the vary list of every answer of the document, which the
// protocol bounds (GetRulesResponse.vary) and every client enforces.
const MaxSelectorProperties = 16

// Validate checks a document as Put does: protovalidate, the rule checks of
// rate_limits.yaml, and, when the service's available_limiters.yaml is
// configured, the cross-document checks.
func (s *Server) Validate(doc *rulesv1.OverrideDocument) error {
	available := s.available[doc.GetService()]
	err := config.ValidateMessage(doc, available)
	if err == nil {
		err = checkSelectors(doc)
	}
	if err == nil {
		err = checkSelectorProperties(doc, available)
	}
	if err != nil {
		// The names are the client's until checked: a PUT whose document
		// names none takes its path's, of any length.
		return fmt.Errorf("override document %s/%s: %w", clip(doc.GetService()), clip(doc.GetLimiter()), err)
	}
	return nil
}

// checkSelectors refuses a document whose selectors use more than
// MaxSelectorProperties distinct properties: every answer would carry them
// all as its vary list, and every client would reject it.
func checkSelectors(doc *rulesv1.OverrideDocument) error {
	props := map[string]struct{}{}
	for i, o := range doc.GetOverrides() {
		for k := range o.GetSelector() {
			props[k] = struct{}{}
		}
		if len(props) > MaxSelectorProperties {
			for _, o := range doc.GetOverrides()[i+1:] { // count them all, for the message
				for k := range o.GetSelector() {
					props[k] = struct{}{}
				}
			}
			return &config.ValidationError{Errors: []*config.Error{{
				Limiter: doc.GetLimiter(),
				Path:    fmt.Sprintf("overrides[%d].selector", i),
				Message: fmt.Sprintf("the selectors use %d distinct properties, at most %d (an answer varies by at most %d; the first past the bound is in overrides[%d])",
					len(props), MaxSelectorProperties, MaxSelectorProperties, i),
			}}}
		}
	}
	return nil
}

// checkSelectorProperties refuses, when the service's available_limiters.yaml
// is known, a selector on a property its limiter does not declare, as the
// config checks refuse a rule's: the limiter's identifiers do not carry it
// (a typo: paln), so the override would select nothing, silently. It names
// the first config.MaxReportedErrors, then counts the others.
func checkSelectorProperties(doc *rulesv1.OverrideDocument, available *config.AvailableLimiters) error {
	if available == nil {
		return nil
	}
	spec := available.Spec(doc.GetLimiter())
	if spec == nil { // an undeclared limiter is refused by ValidateMessage
		return nil
	}
	declared := make(map[string]bool, len(spec.GetAvailableProperties()))
	for _, p := range spec.GetAvailableProperties() {
		declared[p] = true
	}
	listed := config.ListNames(spec.GetAvailableProperties())
	ve := &config.ValidationError{}
	for i, o := range doc.GetOverrides() {
		keys := make([]string, 0, len(o.GetSelector()))
		for k := range o.GetSelector() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch {
			case declared[k]:
			case len(ve.Errors) == config.MaxReportedErrors:
				ve.Omitted++
			default:
				ve.Errors = append(ve.Errors, &config.Error{Limiter: doc.GetLimiter(), Path: fmt.Sprintf("overrides[%d].selector", i),
					Message: fmt.Sprintf("overrides[%d].selector: selector property %q is not one of the limiter's available_properties (%s)", i, k, listed)})
			}
		}
	}
	if len(ve.Errors) == 0 {
		return nil
	}
	return ve
}

// Bounds of the documents load keeps: at most maxCachedDocs decoded ones
// and maxCachedDocs rejections, and decoded ones of at most
// maxCachedDocBytes of heap, estimated at docBytesPerByte bytes per byte of
// their encoding (measured at 1.3 for a document of long descriptions, 12
// for one of short rules), so 16 documents at MaxDocumentBytes or 10,000 of
// 1.6 KiB. Past a bound the map is cleared whole.
const (
	maxCachedDocs     = 10_000
	maxCachedDocBytes = 256 << 20
	docBytesPerByte   = 16
)

// loadScript returns the stored revision, and the body only when the
// revision differs from the caller's (ARGV[1]) and the body is at most
// ARGV[2] bytes: a larger one is answered by its size alone, never read.
// A key of another type than a hash, and a revision over ARGV[3] bytes,
// are never read: four elements answer them, the last two saying what
// they are ("type" and the type, "revision" and its size).
var loadScript = redis.NewScript(keyTypeLua + `
if kind ~= 'hash' and kind ~= 'none' then return {'', '', 'type', kind} end
local rn = redis.call('HSTRLEN', KEYS[1], 'rev')
if rn > tonumber(ARGV[3]) then return {'', '', 'revision', tostring(rn)} end
local rev = redis.call('HGET', KEYS[1], 'rev')
if not rev then return {} end
if ARGV[1] ~= '' and rev == ARGV[1] then return {rev} end
local n = redis.call('HSTRLEN', KEYS[1], 'body')
if n > tonumber(ARGV[2]) then return {rev, '', tostring(n)} end
return {rev, redis.call('HGET', KEYS[1], 'body') or ''}
`)

// load reads and validates the stored document of (service, limiter). A
// revision it refused is refused again without being read: a bad document
// costs one read, one parse and one ERROR record, until a write replaces it.
func (s *Server) load(ctx context.Context, service, limiter string) (*rulesv1.OverrideDocument, error) {
	key := s.key(service, limiter)
	s.mu.Lock()
	cached := s.docs[key].doc
	rej, refused := s.rejected[key]
	s.mu.Unlock()
	known := cached.GetRevision()
	if refused {
		known = rej.rev
	}
	res, err := loadScript.Run(ctx, s.rdb, []string{key}, known, MaxDocumentBytes, maxRevisionBytes).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("%w: read override document %s/%s: %w", errStoreRead, service, limiter, err)
	}
	if len(res) == 0 {
		if refused || cached != nil { // a key written again later may reuse the revision
			s.mu.Lock()
			delete(s.rejected, key)
			s.dropDoc(key)
			s.mu.Unlock()
		}
		return nil, ErrNotFound
	}
	switch {
	case len(res) == 1 && refused && rej.odd == "" && res[0] == rej.rev,
		len(res) == 4 && refused && res[2]+" "+res[3] == rej.odd:
		return nil, rej.err
	case len(res) == 1 && cached != nil && res[0] == cached.GetRevision():
		return cached, nil
	}
	var doc *rulesv1.OverrideDocument
	switch len(res) {
	case 2:
		doc, err = s.decodeStored(service, limiter, res[0], res[1])
	case 3:
		err = fmt.Errorf("%w: stored override document %s/%s holds %s bytes", ErrTooLarge, service, limiter, res[2])
	case 4:
		if res[2] == "type" {
			err = fmt.Errorf("stored override document %s/%s: its key is a Redis %s, not a hash (a PUT or DELETE replaces it)", service, limiter, res[3])
		} else {
			err = fmt.Errorf("stored override document %s/%s: its revision holds %s bytes, at most %d (docs/limits.md)", service, limiter, res[3], maxRevisionBytes)
		}
	default:
		return nil, fmt.Errorf("read override document %s/%s: unexpected reply %q", service, limiter, res)
	}
	s.mu.Lock()
	s.dropDoc(key)
	if err == nil {
		cost := int64(len(res[1])) * docBytesPerByte
		if len(s.docs) >= maxCachedDocs || s.docBytes+cost > maxCachedDocBytes {
			clear(s.docs)
			s.docBytes = 0
		}
		s.docs[key] = cachedDoc{doc: doc, cost: cost}
		s.docBytes += cost
		delete(s.rejected, key)
	} else {
		if len(s.rejected) >= maxCachedDocs {
			clear(s.rejected)
		}
		r := rejection{rev: res[0], err: err}
		if len(res) == 4 {
			r.odd = res[2] + " " + res[3]
		}
		s.rejected[key] = r
	}
	s.mu.Unlock()
	if err != nil {
		s.logger.Error("rulesserver: invalid override document in Redis; answering an error so clients keep their last answer or their local tiers",
			slog.String("service", service), slog.String("limiter", limiter), slog.Any("error", err))
		return nil, err
	}
	return doc, nil
}

// dropDoc forgets the decoded document of key, if any; s.mu is held.
func (s *Server) dropDoc(key string) {
	if d, ok := s.docs[key]; ok {
		s.docBytes -= d.cost
		delete(s.docs, key)
	}
}

// decodeStored validates a document read from Redis exactly as a written one.
func (s *Server) decodeStored(service, limiter, rev, body string) (*rulesv1.OverrideDocument, error) {
	if len(body) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: stored override document %s/%s holds %d bytes", ErrTooLarge, service, limiter, len(body))
	}
	doc := &rulesv1.OverrideDocument{}
	if err := proto.Unmarshal([]byte(body), doc); err != nil {
		return nil, fmt.Errorf("decode stored override document %s/%s: %w", service, limiter, err)
	}
	// Fields this version does not know, at any depth (a later version's,
	// or a hand-write), are refused as a PUT of them is: ignored, one could
	// carry what the rules mean, as an ignored mode would have enforced a
	// shadow limiter.
	known := &rulesv1.OverrideDocument{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(body), known); err != nil || proto.Size(known) != proto.Size(doc) {
		return nil, fmt.Errorf("stored override document %s/%s holds fields this version does not know (a later version's?): write it again with this version, or upgrade", service, limiter)
	}
	if doc.GetService() != service || doc.GetLimiter() != limiter {
		return nil, fmt.Errorf("stored override document %s/%s names %s/%s", service, limiter, doc.GetService(), doc.GetLimiter())
	}
	doc.Revision = rev
	if err := s.Validate(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// Get returns the stored document of (service, limiter), or ErrNotFound.
func (s *Server) Get(ctx context.Context, service, limiter string) (*rulesv1.OverrideDocument, error) {
	if err := validPair(service, limiter); err != nil {
		return nil, err
	}
	doc, err := s.load(ctx, service, limiter)
	if errors.Is(err, ErrNotFound) {
		// load's is bare: GetRules meets it for every limiter without a
		// document, and drops it.
		return nil, fmt.Errorf("%w for %s/%s", ErrNotFound, service, limiter)
	}
	return doc, err
}

// keyTypeLua sets kind to the Redis type of KEYS[1]: a key of another type
// than a hash (written by hand) holds no document and no revision, the
// writes replace or delete it rather than fail on it, and a read refuses it
// as an invalid document, not as a failure of Redis.
const keyTypeLua = `
local kind = redis.call('TYPE', KEYS[1])
if type(kind) == 'table' then kind = kind.ok end
`

// putScript stores a document when the expected revision (ARGV[1], "" for
// any) holds. The revision counts writes of the key, so a reader comparing
// revisions sees every change; an identical body is a no-op (idempotent PUT).
// A key of another type is replaced, and so is a revision over ARGV[4]
// bytes (a hand-write no reader takes): with it an identical body is
// written, and the count starts again.
var putScript = redis.NewScript(keyTypeLua + `
local rev = nil
if kind == 'hash' then rev = redis.call('HGET', KEYS[1], 'rev') end
if ARGV[1] == '*' then
  if not rev then return {'conflict', ''} end
elseif ARGV[1] ~= '' and ARGV[1] ~= (rev or '') then return {'conflict', rev or ''} end
if kind ~= 'hash' and kind ~= 'none' then redis.call('UNLINK', KEYS[1]) end
local long = rev and #rev > tonumber(ARGV[4])
if rev and not long and redis.call('HGET', KEYS[1], 'body') == ARGV[2] then return {'same', rev} end
local n = 1
if rev and not long then n = (tonumber(string.match(rev, '^%d+')) or 0) + 1 end
local newrev = tostring(n) .. '-' .. ARGV[3]
redis.call('HSET', KEYS[1], 'rev', newrev, 'body', ARGV[2])
return {'ok', newrev}
`)

// deleteScript deletes a document when the expected revision holds, and a
// key of another type when no revision is expected.
var deleteScript = redis.NewScript(keyTypeLua + `
if kind ~= 'hash' and kind ~= 'none' then
  if ARGV[1] ~= '' then return {'conflict', ''} end
  redis.call('UNLINK', KEYS[1])
  return {'ok', ''}
end
local rev = redis.call('HGET', KEYS[1], 'rev')
if not rev then return {'missing', ''} end
if ARGV[1] ~= '' and ARGV[1] ~= '*' and ARGV[1] ~= rev then return {'conflict', rev} end
redis.call('UNLINK', KEYS[1])
return {'ok', rev}
`)

// Put validates doc and stores it whole, replacing the document of its
// (service, limiter), or whatever its key holds (a key of another Redis type
// has no revision). When doc.Revision is set it must equal the stored
// revision, or be "*" (If-Match: *) and a document be stored (ErrConflict
// otherwise); storing an identical document changes
// nothing. It returns the stored document with its revision, or ErrTooLarge
// for a document over MaxDocumentBytes.
func (s *Server) Put(ctx context.Context, doc *rulesv1.OverrideDocument) (*rulesv1.OverrideDocument, error) {
	out, err := s.put(ctx, doc)
	s.ops.WithLabelValues("put", outcome(err)).Inc()
	return out, err
}

func (s *Server) put(ctx context.Context, doc *rulesv1.OverrideDocument) (*rulesv1.OverrideDocument, error) {
	if err := s.Validate(doc); err != nil {
		return nil, err
	}
	expect := doc.GetRevision()
	stored := proto.Clone(doc).(*rulesv1.OverrideDocument)
	stored.Revision = ""
	// Stored as proto's deterministic binary encoding: byte-stable, so an
	// identical document is recognised and leaves the revision alone.
	canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("encode override document: %w", err)
	}
	if len(canon) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: override document %s/%s encodes to %d bytes", ErrTooLarge, doc.GetService(), doc.GetLimiter(), len(canon))
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:6])
	res, err := putScript.Run(ctx, s.rdb, []string{s.key(doc.GetService(), doc.GetLimiter())}, expect, string(canon), hash, maxRevisionBytes).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("store override document %s/%s: %w", doc.GetService(), doc.GetLimiter(), err)
	}
	if res[0] == "conflict" {
		return nil, fmt.Errorf("%w: override document %s/%s is at revision %q, not %q", ErrConflict, doc.GetService(), doc.GetLimiter(), clip(res[1]), expect)
	}
	stored.Revision = res[1]
	return stored, nil
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	default:
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			return "invalid"
		}
		return "error"
	}
}

// Delete removes the document of (service, limiter), or a key of another
// Redis type in its place. A non-empty revision must equal the stored one
// ("*": any), ErrConflict otherwise (a key of another type has none). It
// returns ErrNotFound when nothing is stored, whatever the revision.
func (s *Server) Delete(ctx context.Context, service, limiter, revision string) error {
	err := s.delete(ctx, service, limiter, revision)
	s.ops.WithLabelValues("delete", outcome(err)).Inc()
	return err
}

func (s *Server) delete(ctx context.Context, service, limiter, revision string) error {
	if err := validPair(service, limiter); err != nil {
		return err
	}
	res, err := deleteScript.Run(ctx, s.rdb, []string{s.key(service, limiter)}, revision).StringSlice()
	if err != nil {
		return fmt.Errorf("delete override document %s/%s: %w", service, limiter, err)
	}
	switch res[0] {
	case "missing":
		return fmt.Errorf("%w for %s/%s", ErrNotFound, service, limiter)
	case "conflict":
		// revision is the client's If-Match, of any length.
		return fmt.Errorf("%w: override document %s/%s is at revision %q, not %.80q", ErrConflict, service, limiter, clip(res[1]), revision)
	}
	return nil
}

// validPair checks a (service, limiter) pair named outside a document.
func validPair(service, limiter string) error {
	req := &rulesv1.GetRulesRequest{Service: service, Limiter: limiter}
	if err := protovalidate.Validate(req); err != nil {
		return fmt.Errorf("override document %.80q/%.80q: %w", service, limiter, err) // the names are the client's, of any length
	}
	return nil
}
