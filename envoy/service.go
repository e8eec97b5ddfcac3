package ratekitenvoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Defaults for the bounds of Options.
const (
	DefaultMaxDescriptors = 32
	DefaultMaxEntries     = 16
	DefaultMaxValueLen    = keys.GatewayMaxValueLen
	DefaultMaxDomainLen   = 256
	DefaultMaxHits        = 1 << 20
	// MaxOverridePeriod bounds the window of a descriptor's limit override
	// (unit × unit_multiplier): longer windows are rejected.
	MaxOverridePeriod = 366 * 24 * time.Hour
	// OverrideRulePrefix starts the name of the per-request rule made from a
	// descriptor's limit override; the window in seconds follows, e.g.
	// "envoy_override_60s", so overrides of different windows never share a
	// counter while overrides of the same window over the same entries do
	// (as in envoyproxy/ratelimit, whose keys hold no limit value).
	// The tools find these counters by it (internal/keys, where their
	// shape is kept).
	OverrideRulePrefix = keys.OverrideRulePrefix
)

// UnknownDomain says how the service answers a request whose domain names no
// limiter.
type UnknownDomain uint8

const (
	// UnknownDomainError answers NOT_FOUND naming the domain (the default):
	// Envoy counts it as an error and, unless failure_mode_deny is set, lets
	// the request through.
	UnknownDomainError UnknownDomain = iota
	// UnknownDomainOK answers OK with one OK status per descriptor, like
	// envoyproxy/ratelimit for a domain without configuration.
	UnknownDomainOK
)

// Options configures NewService. The zero value is usable.
type Options struct {
	// Domains maps an Envoy domain to a limiter name. A domain not in the map
	// selects the limiter of the same name.
	Domains map[string]string
	// Available, when set, restricts each limiter's descriptor keys to its
	// available_properties (the same contract every rule is checked against).
	// Without it any key of the form ^[a-z0-9_]{1,64}$ is accepted.
	Available *config.AvailableLimiters
	// UnknownDomain is the answer to a domain that selects no limiter.
	UnknownDomain UnknownDomain
	// Headers is the header profile of response_headers_to_add (default
	// ratelimitheaders.IETF, the profile the HTTP adapters default to).
	Headers ratelimitheaders.Profile
	// Bounds of what a caller controls; zero means the default.
	MaxDescriptors int // descriptors per request (DefaultMaxDescriptors)
	MaxEntries     int // entries per descriptor (DefaultMaxEntries)
	// MaxValueLen bounds an entry's value in bytes (DefaultMaxValueLen): a
	// longer one (a path or header a client sent) is checked as MaxValueLen
	// bytes standing for it: its first MaxValueLen - 33 bytes, a tilde and 32
	// hex digits of the SHA-256 of the whole (see "Mapping" in the package
	// documentation).
	MaxValueLen int
	// MaxHits bounds the cost of a check (DefaultMaxHits): a descriptor whose
	// hits_addend (its own, else the request's) is over it can never pass,
	// and is answered OVER_LIMIT without a check, as a cost over a rule's
	// limit is (no Retry-After), so no larger cost reaches the store.
	MaxHits uint64
	// Concurrent checks a request's descriptors with one Check each, run
	// concurrently, instead of one ratelimit.CheckBatch (the default), which
	// sends them all in one store call when the store implements
	// ratelimit.BatchStore and one after the other when it does not. Only
	// for a store without BatchStore over a real network, where one round
	// trip per descriptor costs more than a goroutine each.
	Concurrent bool
	// ReuseIdentifiers lets the service reuse the identifier maps of a
	// request's checks for later requests once its checks are done, which
	// saves two of the three allocations of each descriptor
	// (BenchmarkShouldRateLimit's service_reuse). Set it only when no
	// limiter's Config.Observer keeps Event.Identifier, and no
	// Config.RuleSource keeps its identifier, past its call
	// (remoterules.Client's does: it reads the identifier in a goroutine of
	// its own); the limiter itself never keeps it, and the observers of
	// observability/observe (Metrics, BlockSummary, Tracing) do not.
	ReuseIdentifiers bool
	// Logger receives ERROR records for recovered panics (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of duration_until_reset and the headers (default time.Now).
	Now func() time.Time
}

// Service answers envoy.service.ratelimit.v3.RateLimitService from ratekit
// limiters. It is safe for concurrent use.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	domains   map[string]*served // by domain; only NewService writes it
	unknown   UnknownDomain
	profile   ratelimitheaders.Profile
	maxDesc   int
	maxEnt    int
	maxVal    int
	maxHits   uint64
	parallel  bool
	reuse     bool
	logger    *slog.Logger
	now       func() time.Time
	metrics   *Metrics
	overrides overrideCache
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// served is what a request for a served domain needs, found in one lookup.
type served struct {
	limiter *ratelimit.Limiter
	allowed map[string]bool // the descriptor keys of the limiter; nil: any
	metrics *domainSeries
}

// NewService returns a Service over limiters. Each limiter answers the domain
// of its name, unless Options.Domains maps that domain to another limiter,
// and the domains Options.Domains maps to it. An error names
// every inconsistency: a duplicate limiter, a mapping to a limiter not given,
// a limiter missing from Options.Available.
func NewService(limiters []*ratelimit.Limiter, opts Options) (*Service, error) {
	s := &Service{
		domains:  map[string]*served{},
		unknown:  opts.UnknownDomain,
		profile:  opts.Headers,
		maxDesc:  orDefault(opts.MaxDescriptors, DefaultMaxDescriptors),
		maxEnt:   orDefault(opts.MaxEntries, DefaultMaxEntries),
		maxVal:   orDefault(opts.MaxValueLen, DefaultMaxValueLen),
		maxHits:  opts.MaxHits,
		parallel: opts.Concurrent,
		reuse:    opts.ReuseIdentifiers,
		logger:   opts.Logger,
		now:      opts.Now,
		metrics:  newMetrics(),
	}
	if s.maxHits == 0 {
		s.maxHits = DefaultMaxHits
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	var errs []error
	if len(limiters) == 0 {
		errs = append(errs, errors.New("no limiters to serve"))
	}
	byName := map[string]*ratelimit.Limiter{}
	byDomain := map[string]*ratelimit.Limiter{}
	for i, l := range limiters {
		switch {
		case l == nil:
			errs = append(errs, fmt.Errorf("limiter #%d is nil", i))
		case byName[l.Name()] != nil:
			errs = append(errs, fmt.Errorf("limiter %s given twice", l.Name()))
		default:
			byName[l.Name()] = l
			byDomain[l.Name()] = l
		}
	}
	for _, domain := range sortedKeys(opts.Domains) {
		name := opts.Domains[domain]
		l := byName[name]
		if l == nil {
			errs = append(errs, fmt.Errorf("domain %q maps to limiter %q, which is not served (have %s)", domain, name, strings.Join(sortedKeys(byName), ", ")))
			continue
		}
		byDomain[domain] = l
	}
	var props map[string]map[string]bool // limiter -> allowed descriptor keys; nil: any
	if opts.Available != nil {
		props = map[string]map[string]bool{}
		for _, name := range sortedKeys(byName) {
			spec := opts.Available.Spec(name)
			if spec == nil {
				errs = append(errs, fmt.Errorf("limiter %s is not declared in %s", name, opts.Available.File))
				continue
			}
			allowed := map[string]bool{}
			for _, p := range spec.GetAvailableProperties() {
				allowed[p] = true
			}
			props[name] = allowed
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ratekitenvoy: %w", err)
	}
	for domain, l := range byDomain {
		s.domains[domain] = &served{limiter: l, allowed: props[l.Name()], metrics: s.metrics.servedDomain(domain)}
	}
	return s, nil
}

// Register registers s on a gRPC server as the RateLimitService.
func (s *Service) Register(r grpc.ServiceRegistrar) { rlsv3.RegisterRateLimitServiceServer(r, s) }

// Metrics returns the service's Prometheus collector (register it once).
func (s *Service) Metrics() *Metrics { return s.metrics }

// ShouldRateLimit implements RateLimitServiceServer. A malformed request is
// answered INVALID_ARGUMENT before anything is counted; a store failure fails
// open (the descriptor is OK, the error is counted).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (resp *rlsv3.RateLimitResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.logger.LogAttrs(ctx, slog.LevelError, "ratekit_envoy_panic",
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			s.seriesOf(req.GetDomain()).request(codeInternal)
			resp, err = nil, status.Error(codes.Internal, "ratekitenvoy: internal error (logged)")
		}
	}()
	dom := s.domains[req.GetDomain()]
	if dom == nil {
		unknown := s.metrics.unknown
		if msg := s.checkDomain(req.GetDomain()); msg != "" {
			unknown.request(codeInvalid)
			return nil, status.Error(codes.InvalidArgument, msg)
		}
		if err := s.checkCount(len(req.GetDescriptors())); err != nil {
			unknown.request(codeInvalid)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if s.unknown == UnknownDomainOK {
			unknown.request(codeOK)
			return okResponse(len(req.GetDescriptors())), nil
		}
		unknown.request(codeUnknownDomain)
		return nil, status.Errorf(codes.NotFound, "ratekitenvoy: unknown domain %q (served: %s)",
			truncate(req.GetDomain()), strings.Join(sortedKeys(s.domains), ", "))
	}
	l := dom.limiter
	// The checks' requests and a single check's result are on the stack:
	// Check and CheckBatch keep what a request points to, not the request
	// (were it otherwise, the compiler would move them to the heap).
	var room [fewDescriptors]ratelimit.Request
	var single [1]ratelimit.Result
	var ids *idBlock // nil: a new identifier per check, never reused
	if s.reuse {
		ids = idBlocks.Get().(*idBlock)
	}
	reqs, head, parts, overs, never, err := s.parse(l, dom.allowed, req, room[:], ids)
	if err != nil {
		ids.release()
		dom.metrics.request(codeInvalid)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp = &head.resp
	d := ratelimitheaders.Decision{Results: s.checkAll(ctx, l, reqs, single[:], never)}
	// The checks are done (a concurrent one too, and a store call given up
	// on holds its keys, not the identifier): nothing of ours reads the
	// identifiers again. On a panic they are not reused.
	ids.release()
	if err := ctx.Err(); err != nil && anyCanceled(d.Results) {
		// The caller gave up (Envoy's timeout): no answer reaches it, and
		// what was not checked is neither OK nor a store failure.
		dom.metrics.request(codeCanceled)
		return nil, status.FromContextError(err).Err()
	}
	now := s.now()
	failed := 0 // no check was canceled: the caller is still there
	for i := range d.Results {
		r := &d.Results[i]
		if overs != nil && overs[i] && !r.Blocked() && overrideBlocked(r) {
			// The override's own verdict stands even when the limiter's
			// result was softened (a limiter run in a shadow mode): like
			// envoyproxy/ratelimit, a limit sent by the gateway is never shadow.
			r.Action = ratelimit.ActionBlock
		}
		p := &parts[i]
		st := &p.status
		st.Code = rlsv3.RateLimitResponse_OK
		if r.Failed() {
			failed++
		} else {
			if r.Blocked() {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if e := r.Enforcing(); e != nil {
				st.CurrentLimit = currentLimit(&p.limit, e)
				st.LimitRemaining = uint32(min(math.Floor(e.Info.Remaining), math.MaxUint32))
				st.DurationUntilReset = setDuration(&p.reset, max(e.Info.ResetAt.Sub(now), 0))
			}
		}
		resp.Statuses[i] = st
	}
	var buf [8]headerField // the most a profile writes: on the stack
	fields := buf[:0]
	s.profile.Each(&d, now, 0, func(name, value string) {
		if never != nil && name == ratelimitheaders.HeaderRetryAfter {
			return // a descriptor over MaxHits can never pass: no wait helps
		}
		fields = append(fields, headerField{name, value})
	})
	resp.ResponseHeadersToAdd = head.headerValues(fields)
	answer := codeOK
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		answer = codeOverLimit
	}
	dom.metrics.request(answer)
	if failed > 0 {
		dom.metrics.failedOpen(failed)
	}
	return resp, nil
}

// checkAll checks every descriptor: one Check for one descriptor, else one
// ratelimit.CheckBatch (one store call for all of them), or with
// Options.Concurrent a Check each, run concurrently. A single check's
// result goes to single, which has room for it. The checks are
// independent, each its own identifier, as Envoy's descriptors are. A panic
// in a concurrent check is carried back to the caller's goroutine, where
// ShouldRateLimit recovers it. The descriptors that never marks (nil when
// none) are not checked: their result blocks, with no rule.
func (s *Service) checkAll(ctx context.Context, l *ratelimit.Limiter, reqs []ratelimit.Request, single []ratelimit.Result, never []bool) []ratelimit.Result {
	if never != nil {
		out := make([]ratelimit.Result, len(reqs))
		var at []int
		var some []ratelimit.Request
		for i := range reqs {
			if never[i] {
				out[i] = ratelimit.Result{Limiter: l.Name(), Action: ratelimit.ActionBlock, Exceeded: true}
				continue
			}
			at, some = append(at, i), append(some, reqs[i])
		}
		if len(some) > 0 {
			for j, r := range s.checkAll(ctx, l, some, single, nil) {
				out[at[j]] = r
			}
		}
		return out
	}
	if len(reqs) == 1 {
		single[0] = l.Check(ctx, reqs[0].Identifier, reqs[0].Options...)
		return single[:1]
	}
	if !s.parallel {
		return ratelimit.CheckBatch(ctx, reqs)
	}
	out := make([]ratelimit.Result, len(reqs))
	// Each check gets a copy of its request: a goroutine holding reqs would
	// move the caller's requests to the heap.
	one := func(i int, r ratelimit.Request) { out[i] = l.Check(ctx, r.Identifier, r.Options...) }
	var wg sync.WaitGroup
	panics := make([]any, len(reqs))
	for i := 1; i < len(reqs); i++ {
		r := reqs[i]
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			one(i, r)
		})
	}
	func() {
		defer func() { panics[0] = recover() }()
		one(0, reqs[0])
	}()
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	return out
}

// anyCanceled reports whether a check of results was canceled by its caller.
func anyCanceled(results []ratelimit.Result) bool {
	for i := range results {
		if errors.Is(results[i].Err, ratelimit.ErrCanceled) {
			return true
		}
	}
	return false
}

// overrideBlocked reports whether r's evaluation of a descriptor's limit
// override blocked.
func overrideBlocked(r *ratelimit.Result) bool {
	for i := range r.Evaluations {
		e := &r.Evaluations[i]
		if e.Blocked && e.PerRequest && strings.HasPrefix(e.Rule.Name, OverrideRulePrefix) {
			return true
		}
	}
	return false
}

// checkDomain returns why an unknown domain is malformed, or "".
func (s *Service) checkDomain(domain string) string {
	switch {
	case domain == "":
		return "ratekitenvoy: domain is empty"
	case len(domain) > DefaultMaxDomainLen:
		return fmt.Sprintf("ratekitenvoy: domain is %d bytes, over the limit of %d", len(domain), DefaultMaxDomainLen)
	}
	return ""
}

// checkCount returns why a request of n descriptors is malformed, whatever
// its domain, or nil.
func (s *Service) checkCount(n int) error {
	switch {
	case n == 0:
		return errors.New("ratekitenvoy: no descriptors")
	case n > s.maxDesc:
		return fmt.Errorf("ratekitenvoy: %d descriptors, over the limit of %d", n, s.maxDesc)
	}
	return nil
}

// tooManyEntries is the error for descriptor at holding n entries, over
// MaxEntries.
func (s *Service) tooManyEntries(at descAt, n int) error {
	return fmt.Errorf("ratekitenvoy: %s has %d entries, over the limit of %d", at, n, s.maxEnt)
}

// parse validates the whole request for l, whose descriptor keys are those
// allowed (any when nil), and returns one check per descriptor (in room when
// it is long enough), the answer's response and the messages of each status
// (newAnswer), which descriptors carry a limit override (nil when none
// does), and which are over MaxHits (nil when none is). The identifiers are
// ids' (see idBlock.next). The first problem found is returned, naming the
// descriptor, entry and key.
func (s *Service) parse(l *ratelimit.Limiter, allowed map[string]bool, req *rlsv3.RateLimitRequest, room []ratelimit.Request, ids *idBlock) (reqs []ratelimit.Request, head *answerHead, parts []statusParts, overs, never []bool, err error) {
	descs := req.GetDescriptors()
	if err := s.checkCount(len(descs)); err != nil {
		return nil, nil, nil, nil, nil, err
	}
	reqHits := uint64(req.GetHitsAddend())
	if reqHits == 0 {
		reqHits = 1 // Envoy: an unset hits_addend adds 1
	}
	if len(descs) <= len(room) {
		reqs = room[:len(descs)]
	} else {
		reqs = make([]ratelimit.Request, len(descs))
	}
	head, parts, oneOpts := newAnswer(len(descs))
	var opts []ratelimit.CheckOption // the options of every check, in one block
	for i, d := range descs {
		id, hits, over, err := s.parseDescriptor(descAt(i), d, reqHits, allowed, l.Name(), ids)
		if err != nil {
			return nil, nil, nil, nil, nil, err
		}
		reqs[i] = ratelimit.Request{Limiter: l, Identifier: id}
		if hits > s.maxHits {
			// It can never pass, and its cost must not reach the store:
			// checkAll answers it blocked without a check.
			if never == nil {
				never = make([]bool, len(descs))
			}
			never[i] = true
			continue
		}
		if hits == 1 && over == nil {
			continue // the defaults: no options
		}
		if opts == nil {
			if oneOpts != nil {
				opts = oneOpts
			} else {
				opts = make([]ratelimit.CheckOption, 0, 2*(len(descs)-i))
			}
		}
		from := len(opts)
		if hits != 1 {
			opts = append(opts, costOption(hits))
		}
		if over != nil {
			opts = append(opts, ratelimit.WithRules(over))
			if overs == nil {
				overs = make([]bool, len(descs))
			}
			overs[i] = true
		}
		reqs[i].Options = opts[from:len(opts):len(opts)]
	}
	return reqs, head, parts, overs, never, nil
}

// smallCosts are the options of the hits_addend 0 (a read) to 63, built
// once: a gateway sends a route's constant hits_addend on every request.
var smallCosts = func() (o [64]ratelimit.CheckOption) {
	for i := range o {
		o[i] = ratelimit.Cost(float64(i))
	}
	return o
}()

func costOption(hits uint64) ratelimit.CheckOption {
	if hits < uint64(len(smallCosts)) {
		return smallCosts[hits]
	}
	return ratelimit.Cost(float64(hits))
}

// descAt names a descriptor in errors; formatted only when one is returned.
type descAt int

func (i descAt) String() string { return "descriptor #" + strconv.Itoa(int(i)) }

// parseDescriptor validates one descriptor and returns its identifier, its
// hits (its own hits_addend, else reqHits, the request's) and its compiled
// limit override (nil without one). The identifier is ids' (see
// idBlock.next).
func (s *Service) parseDescriptor(at descAt, d *rlcommonv3.RateLimitDescriptor, reqHits uint64, allowed map[string]bool, limiter string, ids *idBlock) (ratelimit.Identifier, uint64, *ratelimit.RuleSet, error) {
	entries := d.GetEntries()
	switch {
	case d == nil:
		return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s is null", at)
	case len(entries) == 0:
		return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s has no entries", at)
	case len(entries) > s.maxEnt:
		return nil, 0, nil, s.tooManyEntries(at, len(entries))
	case d.GetIsNegativeHits():
		return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s: is_negative_hits (a refund) is not supported: ratekit counters only grow within a window", at)
	}
	id := ids.next(len(entries))
	for j, e := range entries {
		k, v := e.GetKey(), e.GetValue()
		switch {
		case !validProperty(k):
			return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s entry #%d: key %q must match ^[a-z0-9_]{1,64}$ (descriptor keys are identifier properties)", at, j, truncate(k))
		case allowed != nil && !allowed[k]:
			return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s entry #%d: key %q is not an available property of limiter %s (have %s)", at, j, k, limiter, strings.Join(sortedKeys(allowed), ", "))
		}
		if _, dup := id[k]; dup {
			return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s entry #%d: key %q appears twice", at, j, k)
		}
		id[k] = keys.GatewayValue(v, s.maxVal)
	}
	hits := reqHits
	if h := d.GetHitsAddend(); h != nil {
		hits = h.GetValue() // 0 is allowed: it reads without counting
	}
	var over *ratelimit.RuleSet
	if o := d.GetLimit(); o != nil {
		var err error
		if over, err = s.override(entries, o); err != nil {
			return nil, 0, nil, fmt.Errorf("ratekitenvoy: %s: limit override: %w", at, err)
		}
	}
	return id, hits, over, nil
}

// idBlock holds the identifiers of a request's checks, emptied, for a later
// request (Options.ReuseIdentifiers): a map's header and group are two of
// the three allocations of a descriptor (the third boxes its value).
type idBlock struct {
	ids  []ratelimit.Identifier
	used int
}

var idBlocks = sync.Pool{New: func() any { return new(idBlock) }}

// next returns an empty identifier for the next descriptor, with room for n
// properties when it is new. Without a block (nil) it is new and not kept:
// a limiter's Observer or RuleSource may keep it past the check
// (remoterules.Client.RulesFor reads it in a goroutine of its own).
func (b *idBlock) next(n int) ratelimit.Identifier {
	if b == nil {
		return make(ratelimit.Identifier, n)
	}
	if b.used == len(b.ids) {
		b.ids = append(b.ids, make(ratelimit.Identifier, n))
	}
	b.used++
	return b.ids[b.used-1]
}

// release empties the identifiers b handed out, so that a pooled one holds
// no caller's value, and puts b back. It keeps at most DefaultMaxDescriptors
// identifiers.
func (b *idBlock) release() {
	if b == nil {
		return
	}
	for _, id := range b.ids[:b.used] {
		clear(id)
	}
	b.used = 0
	if len(b.ids) > DefaultMaxDescriptors {
		clear(b.ids[DefaultMaxDescriptors:])
		b.ids = b.ids[:DefaultMaxDescriptors]
	}
	idBlocks.Put(b)
}

var unitDurations = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	// ratekit windows are fixed lengths from the first hit, not calendar
	// units: a month is 30 days and a year 365.
	typev3.RateLimitUnit_MONTH: 30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:  365 * 24 * time.Hour,
}

// override returns the compiled per-request rule of a descriptor's limit
// override: a limit rule over all the keys of the descriptor's entries,
// never shadow. Its cache key is built on the stack: a hit allocates nothing.
func (s *Service) override(entries []*rlcommonv3.RateLimitDescriptor_Entry, o *rlcommonv3.RateLimitDescriptor_RateLimitOverride) (*ratelimit.RuleSet, error) {
	unit, ok := unitDurations[o.GetUnit()]
	if !ok {
		return nil, fmt.Errorf("unit %s is not supported (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", o.GetUnit())
	}
	mult := uint64(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = uint64(m.GetValue())
	}
	if mult == 0 || mult > uint64(MaxOverridePeriod/unit) {
		return nil, fmt.Errorf("unit_multiplier %d: the window must be between one unit and %v", mult, MaxOverridePeriod)
	}
	period := unit * time.Duration(mult)
	var buf [256]byte
	key := buf[:0] // keys (^[a-z0-9_]+$), requests and period, each ended by NUL
	for _, e := range entries {
		key = append(append(key, e.GetKey()...), 0)
	}
	key = append(strconv.AppendUint(key, uint64(o.GetRequestsPerUnit()), 10), 0)
	key = strconv.AppendInt(key, int64(period), 10)
	if set := s.overrides.get(key); set != nil {
		return set, nil
	}
	props := make([]string, len(entries))
	for j, e := range entries {
		props[j] = e.GetKey()
	}
	limit := int64(o.GetRequestsPerUnit())
	var limitFunc func(context.Context) (int64, error)
	if limit == 0 {
		// envoyproxy/ratelimit treats 0 requests per unit as "deny all"; a
		// static limit must be at least 1, so a constant resolver says it.
		limitFunc = func(context.Context) (int64, error) { return 0, nil }
	}
	set, err := ratelimit.CompileRules("", []ratelimit.Rule{{
		Name:            keys.OverrideRule(period),
		Description:     "limit override sent by Envoy with the descriptor",
		Characteristics: props,
		Limit:           limit,
		LimitFunc:       limitFunc,
		Period:          period,
		Action:          ratelimit.ActionLimit, // never shadow, as in envoyproxy/ratelimit
	}})
	if err != nil {
		return nil, err
	}
	s.overrides.put(string(key), set)
	return set, nil
}

// overrideCache keeps compiled overrides, so a gateway sending the same
// override on every request compiles it once. It is bounded: when full it is
// emptied, which costs recompilation and nothing else.
type overrideCache struct {
	mu sync.RWMutex
	m  map[string]*ratelimit.RuleSet
}

const overrideCacheSize = 1024

func (c *overrideCache) get(k []byte) *ratelimit.RuleSet {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[string(k)] // no copy: a map index converts in place
}

func (c *overrideCache) put(k string, s *ratelimit.RuleSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= overrideCacheSize {
		c.m = make(map[string]*ratelimit.RuleSet, 64)
	}
	c.m[k] = s
}

// responseUnits are the units of current_limit, longest first.
var responseUnits = []struct {
	d time.Duration
	u rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit describes an evaluation's rule as Envoy's RateLimit: the limit
// per the longest unit that divides the window, with unit_multiplier for the
// rest (a 90s window is 90 SECOND, a 2h one 2 HOUR). A window of no whole
// seconds has unit UNKNOWN.
// It fills and returns cl, a zero message.
func currentLimit(cl *rlsv3.RateLimitResponse_RateLimit, e *ratelimit.Evaluation) *rlsv3.RateLimitResponse_RateLimit {
	cl.Name = e.Rule.Name
	cl.RequestsPerUnit = uint32(min(max(e.Info.Limit, 0), math.MaxUint32))
	p := e.Info.Period
	for _, u := range responseUnits {
		if p >= u.d && p%u.d == 0 {
			cl.Unit = u.u
			if n := p / u.d; n > 1 {
				cl.UnitMultiplier = wrapperspb.UInt32(uint32(min(n, math.MaxUint32)))
			}
			break
		}
	}
	return cl
}

// setDuration fills and returns pb, a zero message, with d: durationpb.New
// into a message the caller allocated.
func setDuration(pb *durationpb.Duration, d time.Duration) *durationpb.Duration {
	pb.Seconds, pb.Nanos = int64(d/time.Second), int32(d%time.Second)
	return pb
}

// headerField is one field of an answer's headers.
type headerField struct{ name, value string }

// headerValues returns fields as Envoy's header list, sorted by name so that
// answers are stable, a name's values in the order they were added. They
// are h's when h has room for them.
func (h *answerHead) headerValues(fields []headerField) []*corev3.HeaderValue {
	if len(fields) == 0 {
		return nil
	}
	slices.SortStableFunc(fields, func(x, y headerField) int { return strings.Compare(x.name, y.name) })
	var block []corev3.HeaderValue
	var out []*corev3.HeaderValue
	if len(fields) <= len(h.headers) {
		block, out = h.headers[:len(fields)], h.headerList[:len(fields)]
	} else {
		block, out = make([]corev3.HeaderValue, len(fields)), make([]*corev3.HeaderValue, len(fields))
	}
	for i, hf := range fields {
		block[i].Key, block[i].Value = hf.name, hf.value
		out[i] = &block[i]
	}
	return out
}

// statusParts are the messages of one descriptor's status.
type statusParts struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// fewDescriptors is the most descriptors of a request whose checks'
// requests ShouldRateLimit keeps on its stack and whose statuses are in the
// response's allocation.
const fewDescriptors = 8

// answerHead is what an answer holds whatever its descriptors: the response,
// its headers and the statuses of up to fewDescriptors descriptors, in one
// allocation.
type answerHead struct {
	resp rlsv3.RateLimitResponse
	// The headers of an answer in the IETF profile, blocked or not.
	headers    [4]corev3.HeaderValue
	headerList [4]*corev3.HeaderValue
	statuses   [fewDescriptors]*rlsv3.RateLimitResponse_DescriptorStatus
}

// oneAnswer is the answer to a request of one descriptor, the usual one, with
// its check's options, in one allocation.
type oneAnswer struct {
	answerHead
	parts   [1]statusParts
	options [2]ratelimit.CheckOption // the check's cost and override
}

// newAnswer returns an OK response with room for n statuses and the headers,
// and the messages of each status: one allocation for one descriptor (with
// room for its check's options, else nil), two for up to 8, three for more,
// where a message each would be 2 + 3n.
func newAnswer(n int) (*answerHead, []statusParts, []ratelimit.CheckOption) {
	var h *answerHead
	var parts []statusParts
	var opts []ratelimit.CheckOption
	if n == 1 {
		a := &oneAnswer{}
		h, parts, opts = &a.answerHead, a.parts[:], a.options[:0]
	} else {
		h, parts = &answerHead{}, make([]statusParts, n)
	}
	h.resp.OverallCode = rlsv3.RateLimitResponse_OK
	if n <= len(h.statuses) {
		h.resp.Statuses = h.statuses[:n:n]
	} else {
		h.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	return h, parts, opts
}

func okResponse(n int) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range n {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp
}

// seriesOf returns the series of domain: its own when it is served, else
// those of the unknown domains.
func (s *Service) seriesOf(domain string) *domainSeries {
	if d := s.domains[domain]; d != nil {
		return d.metrics
	}
	return s.metrics.unknown
}

// validProperty reports whether k matches ^[a-z0-9_]{1,64}$, like
// rulecheck.ValidName, without a regular expression: it runs for every entry
// of every request.
func validProperty(k string) bool {
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// truncate shortens a caller's string for an error message.
func truncate(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
