package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

const (
	// DefaultKeyPrefix starts every counter key unless Config.KeyPrefix is set.
	DefaultKeyPrefix = "ratekit:rl:"
	// DefaultTimeout is the default of Config.Timeout.
	DefaultTimeout = 100 * time.Millisecond
)

// ErrCanceled is the error of results whose caller's context ended before the
// store answered (the client went away). It is logged at no level and counted
// as no store error: it says nothing about the store's health.
var ErrCanceled = errors.New("ratelimit: check canceled by the caller")

// Config builds a Limiter. Only Name and Store are required.
type Config struct {
	// Name identifies the limiter (^[a-z0-9_]{1,64}$); it is the first part
	// of every counter key, so two limiters never share a counter.
	Name string
	// Store keeps the counters: NewMemoryStore(), redisstore.Dial(ctx, url)
	// or redisstore.New(goRedisClient).
	Store Store
	// Rules is the ordered rule list. It can be replaced later with SetRules
	// (the rule store does so when tiers change).
	Rules []Rule
	// KeyPrefix starts every counter key (default DefaultKeyPrefix), at
	// most MaxKeyPrefixLen bytes.
	KeyPrefix string
	// Timeout bounds each call of a check to a store outside the process
	// (0: DefaultTimeout; New refuses a negative one). A check that hits it
	// fails open. The memory store, in process, is called without it: it
	// never waits on a network.
	Timeout time.Duration
	// Breaker bounds a store outage: after Failures consecutive store errors
	// checks fail open at once, without touching the store, while a background
	// probe (a peek of the keys of the check that opened it) tries the store
	// at growing intervals of at most Cooldown; its first success closes the
	// breaker. On a Redis Cluster from redisstore.Dial there is a breaker
	// per master, so that one master down fails open only its own checks.
	Breaker BreakerConfig
	// Logger receives WARN records on fail-open (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock used for ResetAt (default the real clock: time.Now's
	// time read more cheaply, which follows a step of the wall clock, such as
	// an NTP correction, within a second).
	Now func() time.Time
	// Observer is told about every check, peek and clear (metrics, tracing:
	// pass the Observe method of an observability/observe observer, or observe.Multi
	// of several). It must be safe for concurrent use and should not block;
	// a panicking observer never changes a verdict.
	Observer func(ctx context.Context, e Event)
	// RuleSource, when set, supplies per-request rules evaluated before the
	// limiter's own (the highest tier: an external rules service that answers
	// per request, docs/design.md#phases; remoterules is its client), but
	// after the skip rules that open the limiter's list (its exemptions,
	// such as health checks), unless the set replaces one by name. It must be
	// fast and must not block for long: it runs on every check. It returns nil when it has no rules for the request (or cannot
	// reach its backend: the local rules then serve alone). When its set
	// and the limiter's rules together pass MaxRules, the check leaves the
	// set out, logs a WARN and reports Degraded.
	RuleSource func(ctx context.Context, limiter string, id Identifier) *RuleSet
	// Enforcement is the starting mode (default Enforce); Shadow counts but
	// never blocks. SetEnforcement changes it at runtime.
	Enforcement Enforcement
	// BlockedCache configures the process-local cache that answers a banned
	// (optionally: over-limit) counter without the store until it resets.
	// On by default for bans; see BlockedCacheConfig for its staleness.
	BlockedCache BlockedCacheConfig
}

// BreakerConfig configures the circuit breaker of a Limiter.
type BreakerConfig struct {
	Failures int           // consecutive failures that open it (default 3; -1 disables the breaker)
	Cooldown time.Duration // the longest interval between background probes while open (0: 500ms; New refuses a negative one)
	// ProbeTimeout bounds a probe's call to the store (0:
	// DefaultBreakerProbeTimeout; never shorter than Timeout; New refuses a
	// negative one). It is longer than a check's on purpose: while the
	// breaker is open, nothing waits for the probe, and a store may take
	// longer than a check may wait to connect again (a handshake of several
	// round trips to a distant Redis, which the Redis store ends at the
	// deadline of the calls waiting for it).
	ProbeTimeout time.Duration
}

// Limiter evaluates one rate-limit checkpoint's rules. Build it once at start-up
// and share it: it is safe for concurrent use.
type Limiter struct {
	name      string
	store     Store
	prefix    string
	head      string // keys.Head(prefix, name): the start of every counter key
	tagFrom   int    // where the hash tag of every counter key starts, or 0 (see New)
	timeout   time.Duration
	logger    *slog.Logger
	now       func() time.Time
	observer  func(ctx context.Context, e Event)
	local     bool         // in-process store: no network, no timeout needed
	mem       *MemoryStore // the store when it is the memory store: outcomes into a reused buffer
	realClock bool         // now is the real clock (Config.Now unset)
	bounded   bool         // the store returns by the context's deadline on its own
	batch     BatchStore   // the store when CheckBatch may send it several checks at once, else nil
	breaker   breaker      // the store's, or on a store with parts that of the keys of no known part
	parts     *parts       // nil unless the store is partitioned
	source    func(ctx context.Context, limiter string, id Identifier) *RuleSet
	rules     atomic.Pointer[ruleSet]
	mode      atomic.Int32 // Enforcement; see enforcement.go
	blocked   *blockCache  // nil when disabled
}

type ruleSet struct {
	rules    []*compiledRule
	original []Rule
}

// New validates cfg and returns a Limiter. Invalid rules are rejected with an
// error naming each bad rule.
func New(cfg Config) (*Limiter, error) {
	if !rulecheck.ValidName(cfg.Name) {
		return nil, fmt.Errorf("ratelimit: %w", rulecheck.NameError("limiter", cfg.Name))
	}
	if n := len(cfg.KeyPrefix); n > MaxKeyPrefixLen {
		return nil, fmt.Errorf("ratelimit: limiter %s: KeyPrefix of %d bytes, at most %d", cfg.Name, n, MaxKeyPrefixLen)
	}
	if keys.IsNil(cfg.Store) {
		return nil, fmt.Errorf("ratelimit: limiter %s: Store is nil (use NewMemoryStore or redisstore.Dial)", cfg.Name)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("ratelimit: limiter %s: Timeout %v is negative (0 means DefaultTimeout)", cfg.Name, cfg.Timeout)
	}
	if cfg.Breaker.Cooldown < 0 {
		return nil, fmt.Errorf("ratelimit: limiter %s: Breaker.Cooldown %v is negative (0 means DefaultBreakerCooldown)", cfg.Name, cfg.Breaker.Cooldown)
	}
	if cfg.Breaker.ProbeTimeout < 0 {
		return nil, fmt.Errorf("ratelimit: limiter %s: Breaker.ProbeTimeout %v is negative (0 means DefaultBreakerProbeTimeout)", cfg.Name, cfg.Breaker.ProbeTimeout)
	}
	if m, ok := cfg.Store.(*MemoryStore); ok && m.shards == nil {
		return nil, fmt.Errorf("ratelimit: limiter %s: the MemoryStore is a zero value (build it with NewMemoryStore or MemoryConfig.New)", cfg.Name)
	}
	l := &Limiter{
		name:     cfg.Name,
		store:    cfg.Store,
		prefix:   cfg.KeyPrefix,
		timeout:  cfg.Timeout,
		logger:   cfg.Logger,
		now:      cfg.Now,
		observer: cfg.Observer,
		source:   cfg.RuleSource,
		blocked:  newBlockCache(cfg.BlockedCache),
	}
	if l.prefix == "" {
		l.prefix = DefaultKeyPrefix
	}
	l.head = keys.Head(l.prefix, l.name)
	if !strings.Contains(l.prefix, "{") {
		// The tag starts just after the '{' of head: the memory store then
		// need not look for it. A prefix with a '{' of its own would move
		// the tag into the prefix, so the store finds it itself.
		l.tagFrom = len(l.prefix) + 1
	}
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	if l.now == nil {
		l.now, l.realClock = now, true
	}
	_, l.local = cfg.Store.(interface{ inProcess() })
	l.mem, _ = cfg.Store.(*MemoryStore)
	l.batch = batchStore(cfg.Store, l.mem != nil)
	if cb, ok := cfg.Store.(contextBounded); ok {
		l.bounded = cb.ContextBounded()
	}
	l.breaker.threshold = cfg.Breaker.Failures
	if l.breaker.threshold == 0 {
		l.breaker.threshold = DefaultBreakerFailures
	}
	l.breaker.cooldown = cfg.Breaker.Cooldown
	if l.breaker.cooldown <= 0 {
		l.breaker.cooldown = DefaultBreakerCooldown
	}
	l.breaker.probeTimeout = cfg.Breaker.ProbeTimeout
	if l.breaker.probeTimeout == 0 {
		l.breaker.probeTimeout = DefaultBreakerProbeTimeout
	}
	l.breaker.probeTimeout = max(l.breaker.probeTimeout, l.timeout)
	if ps, ok := cfg.Store.(partitioned); ok {
		l.parts = &parts{store: ps}
	}
	if err := l.SetEnforcement(cfg.Enforcement); err != nil {
		return nil, err
	}
	if err := l.SetRules(cfg.Rules); err != nil {
		return nil, err
	}
	return l, nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// KeyPrefix returns the prefix of the limiter's counter keys.
func (l *Limiter) KeyPrefix() string { return l.prefix }

// Rules returns a copy of the rules in evaluation order, the caller's to
// edit (their Match maps and Characteristics too).
func (l *Limiter) Rules() []Rule {
	return cloneRules(l.rules.Load().original)
}

// SetRules validates rules (each within the bounds of docs/limits.md, at
// most MaxRules of them) and, only if all are valid, replaces the rule list
// atomically; checks in flight finish with the old list. On error the limiter
// keeps its previous rules.
func (l *Limiter) SetRules(rules []Rule) error {
	compiled, err := compileRules(rules)
	if err != nil {
		return fmt.Errorf("ratelimit: limiter %s: %w", l.name, err)
	}
	orig := make([]Rule, len(compiled))
	for i, c := range compiled {
		orig[i] = *c.rule
		c.rule = &orig[i]
		c.key = c.key.WithHead(l.head) // the rule's keys all start alike
	}
	l.rules.Store(&ruleSet{rules: compiled, original: orig})
	l.blocked.reset() // a cached block may rest on a rule that changed
	return nil
}

// CheckOption adjusts one Check or Peek.
type CheckOption func(*checkOpts)

type checkOpts struct {
	cost  float64
	spent bool
	extra *RuleSet
}

// Cost sets the amount a check adds to each counting rule (default 1). Use the
// measured resource, for example the request's database seconds. Cost 0 reads
// without counting. A negative or non-finite cost fails the check open; a cost
// over MaxCount counts as MaxCount + 1, which no rule admits.
func Cost(c float64) CheckOption { return func(o *checkOpts) { o.cost = c } }

// Spent says that the check's cost was already spent: measured after the
// work it stands for (the database seconds of a request that ran), so every
// counting rule records it even past its limit, and the checks after it see
// the debt. A fixed window always counts its cost; a sliding window and a
// token bucket otherwise refuse a cost that would take them past their limit
// and record nothing, so that a budget charged after the fact would never
// block. The verdict is as without it: exceeded past the limit.
func Spent() CheckOption { return func(o *checkOpts) { o.spent = true } }

// Check counts the request against every applicable rule and returns the verdict.
// It never returns an error: a store failure gives ActionAllow with Result.Err set
// (fail-open), logged at WARN.
func (l *Limiter) Check(ctx context.Context, id Identifier, opts ...CheckOption) (res Result) {
	l.run(ctx, &res, ModeCheck, id, opts)
	return res
}

// Peek returns the verdict that Check with the same options would give, without
// counting, banning or extending anything.
func (l *Limiter) Peek(ctx context.Context, id Identifier, opts ...CheckOption) (res Result) {
	l.run(ctx, &res, ModePeek, id, opts)
	return res
}

// run evaluates a check or peek into *res (the caller's zero Result, filled
// in place rather than copied from here), applies the enforcement mode it
// started in and tells the observer (which sees the shadowed verdict).
// Written without deferred closures so that, without an observer, the Result
// stays on the stack.
func (l *Limiter) run(ctx context.Context, res *Result, mode Mode, id Identifier, opts []CheckOption) {
	start := l.now()
	enf := Enforcement(l.mode.Load())
	o := checkOpts{cost: 1}
	if len(opts) > 0 {
		o = applyOpts(opts)
	}
	if l.observer == nil {
		l.evaluate(ctx, res, mode, id, o, start)
		l.applyMode(res, enf)
		return
	}
	hres := new(Result) // the observer gets a pointer: this one lives on the heap
	l.evaluate(ctx, hres, mode, id, o, start)
	l.applyMode(hres, enf)
	l.observe(ctx, Event{Kind: eventKind(mode), Limiter: l.name, Identifier: id, Result: hres, Duration: l.now().Sub(start)})
	*res = *hres
}

// applyOpts is apart from run so that only a check with options pays for the
// options struct escaping to the option funcs.
func applyOpts(opts []CheckOption) checkOpts {
	o := checkOpts{cost: 1}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// evaluate is one check or peek: it builds the store ops of the applicable
// rules, calls the store and turns the outcomes into *res (a zero Result),
// which the caller holds so that it is filled in place rather than copied.
func (l *Limiter) evaluate(ctx context.Context, res *Result, mode Mode, id Identifier, o checkOpts, start time.Time) {
	sc := getScratch()   // ops, outcomes and keys never reach the Result:
	defer putScratch(sc) // checks reuse them
	var p plan
	if !l.prepare(ctx, res, &p, sc, id, o, start) {
		return
	}
	if len(sc.ops) > 0 {
		outs, err := l.eval(ctx, mode, sc.ops, sc, start)
		if err != nil {
			*res = l.failOpen(ctx, err, id)
			return
		}
		l.interpret(res, &p, sc, outs, mode, start)
	}
	l.finish(res, &p, sc)
}

// prepare is the part of a check before the store call: it validates the
// cost and plans the rules into sc.ops. It reports false when the check is
// already answered in *res (an invalid cost, a failing resolver).
func (l *Limiter) prepare(ctx context.Context, res *Result, p *plan, sc *scratch, id Identifier, o checkOpts, start time.Time) bool {
	res.Limiter, res.Action = l.name, ActionAllow
	if !(o.cost >= 0 && o.cost <= math.MaxFloat64) { // negative, infinite or NaN
		res.Err = fmt.Errorf("ratelimit: invalid cost %v", o.cost)
		l.warn(ctx, res.Err, nil, id)
		return false
	}
	// Over MaxCount, a cost is over every limit whatever its size; bounded,
	// its sums stay where every Store counts alike (MaxCount).
	o.cost = min(o.cost, maxCost)
	rules := l.rules.Load().rules
	if o.extra != nil || l.source != nil {
		var over bool
		if rules, over = l.withTiers(ctx, rules, id, o.extra); over {
			p.degraded = true
			l.logger.LogAttrs(ctx, slog.LevelWarn, "rate_limit_per_request_rules_left_out",
				slog.String("limiter", l.name), slog.Int("max_rules", MaxRules))
		}
	}
	if r, err := l.plan(ctx, p, sc, rules, id, o.cost, o.spent, start); err != nil {
		*res = Result{Limiter: l.name, Action: ActionAllow, Err: fmt.Errorf("ratelimit: rule %s: resolve: %w", r.Name, err)}
		l.warn(ctx, res.Err, r, id)
		return false
	}
	res.Matched, res.Degraded = p.matched, p.degraded
	return true
}

// finish is the part of a check after the store's outcomes were interpreted:
// the blocked cache's answer, a skip, and the most constraining rule.
func (l *Limiter) finish(res *Result, p *plan, sc *scratch) {
	if p.cached {
		if res.Evaluations == nil { // no op was sent: interpret left no room
			res.Evaluations = sc.evaluations(1)
		}
		res.Evaluations = append(res.Evaluations, sc.cached)
		res.Exceeded = true
		res.Action = ActionBlock
	}
	if p.skip != nil {
		res.Skipped = true
		res.Rule, res.RulePerRequest = p.skip.rule, p.skip.perRequest
		return
	}
	if best := mostConstraining(res.Evaluations, false); best != nil {
		res.Rule, res.RulePerRequest = best.Rule, best.PerRequest
		res.Info = &best.Info // shared with the evaluation: one allocation less per check
	}
}

// withTiers returns the rules of one check that has per-request tiers (from
// WithRules or the RuleSource): the limiter's rules under them. A check
// without any takes the limiter's rules as they are, without this call. When
// the merged list would pass MaxRules, the per-request tiers are left out
// (over is true): the check's cost stays bounded by its local rules.
func (l *Limiter) withTiers(ctx context.Context, rules []*compiledRule, id Identifier, extra *RuleSet) (_ []*compiledRule, over bool) {
	var remote *RuleSet
	if l.source != nil {
		remote = l.source(ctx, l.name, id)
	}
	if extra != nil || remote != nil {
		return withPerRequest(rules, extra, remote)
	}
	return rules, false
}

// plan is what a check gathers from its rules besides the ops (which are in
// its scratch): the rule that ends it early, and what it already knows.
type plan struct {
	matched  bool          // a rule applied
	degraded bool          // a counting rule was left out: a property is missing
	skip     *compiledRule // the skip rule that ended the rule list, if any
	// cached: the blocked cache answered a limit rule (its evaluation is in
	// the scratch): it ended the rule list, and is not sent.
	cached bool
	gen    uint64          // the blocked cache's generation before the store call
	rules  []*compiledRule // the check's rules, which sc.ri indexes
}

// plan walks the rules in order and appends the op of each applicable
// counting rule to sc.ops (its rule's index to sc.ri), until a skip rule or a rule
// the blocked cache answers. A limit or period resolver's error is returned
// with its rule: the check then fails open.
func (l *Limiter) plan(ctx context.Context, p *plan, sc *scratch, rules []*compiledRule, id Identifier, cost float64, spent bool, start time.Time) (*Rule, error) {
	if l.blocked != nil {
		p.gen = l.blocked.generation()
	}
	p.rules = rules
	for i, c := range rules {
		if !c.matches(id) {
			continue
		}
		p.matched = true
		r := c.rule
		if r.Action == ActionSkip {
			p.skip = c
			break
		}
		op := Op{Kind: r.Algorithm.opKind(), Cost: cost, Terminal: r.Action == ActionLimit}
		from := len(sc.keys)
		if !l.appendKeys(ctx, p, sc, c, id, &op) {
			continue
		}
		if r.CountDistinct != "" {
			m, ok := id.Get(r.CountDistinct)
			if !ok {
				sc.keys = sc.keys[:from]
				l.degrade(ctx, p, "rate_limit_missing_count_distinct", r, r.CountDistinct)
				continue
			}
			op.Kind, op.Member = OpDistinct, keys.Member(m) // bounded in size
		}
		op.Limit, op.Period = c.limit, c.period
		if !c.static {
			var err error
			if op.Limit, err = r.resolveLimit(ctx); err == nil {
				op.Period, err = r.resolvePeriod(ctx)
			}
			if err != nil {
				return r, err
			}
		}
		if op.Kind == OpTokenBucket {
			op.Burst = r.Burst
			if op.Burst == 0 {
				op.Burst = op.Limit
			}
		}
		// Only the algorithms that refuse a cost past the limit need it; a
		// spent cost is recorded, never answered by a cached block.
		op.Spent = spent && op.Kind >= OpSliding
		if op.Terminal && !op.Spent && l.blocked.any() {
			if e, ok := l.blocked.get(&op, start); ok {
				sc.keys = sc.keys[:from]
				// Known to block until e.until: the rules before it still
				// count, this one and the rest are not evaluated.
				p.cached = true
				sc.cached = Evaluation{Rule: r, Exceeded: true, Blocked: true, PerRequest: c.perRequest, Tier: c.tier, Info: Info{
					Limit: op.Limit, Period: op.Period, Count: e.count,
					Remaining: op.remaining(e.count, e.banned), ResetAt: e.until, Banned: e.banned, Never: c.never(&op),
				}}
				break
			}
		}
		sc.ops = append(sc.ops, op)
		sc.ri = append(sc.ri, i)
	}
	if l.mem == nil {
		sc.ownKeys()
	}
	return nil, nil
}

// appendKeys builds the counter key of rule c for id (and its ban key when
// the rule bans) into sc.keys and sets them on op. It reports false, undoing
// the key, when id lacks a characteristic the rule does not count as missing.
func (l *Limiter) appendKeys(ctx context.Context, p *plan, sc *scratch, c *compiledRule, id Identifier, op *Op) bool {
	from := len(sc.keys)
	buf, missing := c.key.Append(sc.keys, l.head, id)
	r := c.rule
	if missing != "" && !r.CountMissing {
		sc.keys = buf[:from]
		l.degrade(ctx, p, "rate_limit_missing_characteristic", r, missing)
		return false
	}
	n := len(buf) - from
	if r.BanFor > 0 {
		// The ban key is the counter key and a suffix: one string holds both.
		buf = append(buf, banSuffix...)
	}
	sc.keys = buf
	both := borrowString(buf[from:])
	op.Key = both[:n]
	if r.BanFor > 0 {
		op.BanKey, op.BanFor = both, r.BanFor
	}
	return true
}

// failOpen is the result of a check whose store call failed.
func (l *Limiter) failOpen(ctx context.Context, err error, id Identifier) Result {
	if ctx.Err() != nil { // the caller went away: its own doing, not a store error
		return Result{Limiter: l.name, Action: ActionAllow, Err: fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())}
	}
	if !errors.Is(err, ErrCircuitOpen) {
		l.warn(ctx, err, nil, id)
	}
	return Result{Limiter: l.name, Action: ActionAllow, Err: err}
}

// interpret turns the store's outcomes into the evaluations and verdict of
// res, and keeps the blocked cache in step with what the store said.
func (l *Limiter) interpret(res *Result, p *plan, sc *scratch, outs []OpResult, mode Mode, start time.Time) {
	now := start
	if !l.local {
		// A network store answers later; in process the check's start is
		// as good as a second clock read.
		now = l.now()
	}
	res.Evaluations = sc.evaluations(len(outs) + btoi(p.cached))
	for i := range outs {
		out, op, c := &outs[i], &sc.ops[i], p.rules[sc.ri[i]]
		if !out.Evaluated {
			break
		}
		// Filled in place: an Evaluation is large to build and then copy.
		res.Evaluations = res.Evaluations[:i+1]
		ev := &res.Evaluations[i]
		ev.Rule, ev.Exceeded, ev.PerRequest = c.rule, out.Exceeded, c.perRequest
		if c.tier != "" { // the block starts zeroed: a pointer is written only when there is one
			ev.Tier = c.tier
		}
		ev.Blocked = out.Exceeded && op.Terminal
		ev.Info = Info{
			Limit:     op.Limit,
			Period:    op.Period,
			Count:     out.Count,
			Remaining: op.remaining(out.Count, out.Banned),
			ResetAt:   now.Add(out.TTL),
			Banned:    out.Banned,
			Never:     out.Exceeded && c.never(op),
		}
		if ev.Exceeded {
			res.Exceeded = true
		}
		if op.Terminal && l.blocked != nil {
			switch {
			case ev.Blocked && mode == ModeCheck:
				l.blocked.put(p.gen, op, out, ev.Info.ResetAt, now)
			case !ev.Blocked && l.blocked.any():
				l.blocked.drop(op.Key) // lifted elsewhere: answer no more from it
			}
		}
		if ev.Blocked {
			res.Action = ActionBlock
			p.skip = nil // the block ends evaluation before any later skip
			p.cached = false
			break
		}
	}
}

// degrade leaves rule r out of a check because the identifier lacks prop.
func (l *Limiter) degrade(ctx context.Context, p *plan, msg string, r *Rule, prop string) {
	p.degraded = true
	l.logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("limiter", l.name), slog.String("rule", r.Name), slog.String("property", prop))
}

func (c *compiledRule) matches(id Identifier) bool {
	for i := range c.match {
		if !c.match[i].matches(id) {
			return false
		}
	}
	return true
}

// eval calls the store under the timeout and the circuit breaker.
func (l *Limiter) eval(ctx context.Context, mode Mode, ops []Op, sc *scratch, start time.Time) ([]OpResult, error) {
	if !l.allow(ops) {
		return nil, ErrCircuitOpen
	}
	var outs []OpResult
	var err error
	switch {
	case l.mem != nil:
		if cap(sc.outs) < len(ops) {
			sc.outs = make([]OpResult, len(ops))
		}
		var now time.Time
		if l.realClock && l.mem.realClock {
			now = start // both on the real clock: the check's start time serves the store
		}
		outs, err = l.mem.evalInto(ctx, mode, ops, sc.outs[:len(ops)], now, l.tagFrom)
	case l.local:
		outs, err = evalStore(ctx, l.store, mode, ops) // in-process: no timeout, no closure to allocate
	default:
		if l.bounded {
			outs, err = l.evalBounded(ctx, mode, ops)
			break
		}
		// A guard goroutine may still read its ops after a timeout: it gets
		// its own copy, and the pooled buffer stays reusable.
		gops := append([]Op(nil), ops...)
		outs, err = callStore(l, ctx, func(ctx context.Context) ([]OpResult, error) { return evalStore(ctx, l.store, mode, gops) })
	}
	if err == nil && len(outs) != len(ops) {
		err = fmt.Errorf("store returned %d outcomes for %d ops", len(outs), len(ops))
	}
	if err != nil || !l.breaker.steady() || l.parts != nil && !l.partsSteady(ops) {
		l.record(ctx, err, ops)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: store %s: %w", mode, err)
	}
	return outs, nil
}

// evalStore calls store.Eval; a panic in the store becomes an error.
func evalStore(ctx context.Context, store Store, mode Mode, ops []Op) (outs []OpResult, err error) {
	defer recoverStore(&err)
	return store.Eval(ctx, mode, ops)
}

// evalBounded calls a ContextBounded store under the per-check timeout,
// without the closure and goroutine of callStore.
func (l *Limiter) evalBounded(ctx context.Context, mode Mode, ops []Op) ([]OpResult, error) {
	if ctx.Done() == nil { // never canceled (no deadline either): a reused context
		dc := newDeadlineCtx(ctx, l.timeout)
		defer dc.release()
		return evalStore(dc, l.store, mode, ops)
	}
	ctx, cancel := l.withTimeout(ctx)
	if cancel != nil {
		defer cancel()
	}
	return evalStore(ctx, l.store, mode, ops)
}

// withTimeout bounds ctx by the per-check timeout. A caller's deadline that
// comes first already bounds the call: then ctx is kept as it is, which saves
// the timer and allocations of a derived context, and cancel is nil.
func (l *Limiter) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, l.timeout)
}

func withTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, nil
	}
	return context.WithTimeout(ctx, timeout)
}

// callStore runs f under the per-check timeout. A store outside this process
// runs in its own goroutine unless it is ContextBounded, so that a client that
// ignores deadlines (a socket that accepts but never answers) still cannot hold
// the caller past the timeout.
func callStore[T any](l *Limiter, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	return callStoreWithin(l, l.timeout, ctx, f)
}

// callStoreWithin is callStore under another timeout than the limiter's
// (CheckBatch: the shortest of the batch's limiters).
func callStoreWithin[T any](l *Limiter, timeout time.Duration, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if l.local {
		return f(ctx) // in-process: nothing to wait for
	}
	ctx, cancel := withTimeout(ctx, timeout)
	if cancel != nil {
		defer cancel()
	}
	if l.bounded {
		return f(ctx)
	}
	type reply struct {
		v   T
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		var r reply
		defer func() { ch <- r }()
		defer recoverStore(&r.err) // a panic here would end the process, not the check
		r.v, r.err = f(ctx)
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Clear removes the counters and bans (shadow bans included) of every counting
// rule of the limiter for id, whether or not the rule matches id, and returns
// how many keys existed: call it after a successful login, so that earlier
// failed attempts no longer count (docs/design.md#peek-and-clear). A counter
// that other clients share is not id's to clear and stays: a rule without
// characteristics counts every client together, and one whose characteristic
// id lacks counts id, if at all, in the bucket of every client that lacks it.
func (l *Limiter) Clear(ctx context.Context, id Identifier) (int, error) {
	start := l.now()
	keys := l.keys(ctx, id)
	n, err := 0, error(nil)
	if len(keys) > 0 {
		n, err = callStore(l, ctx, func(ctx context.Context) (n int, err error) {
			defer recoverStore(&err)
			return l.store.Delete(ctx, keys)
		})
	}
	// After the store call: a check that read a ban before the delete must not
	// leave it cached (remove also refuses fills of checks already in flight).
	l.blocked.remove(keys)
	if err != nil {
		err = fmt.Errorf("ratelimit: limiter %s: clear: %w", l.name, err)
		l.warn(ctx, err, nil, id)
	}
	if l.observer != nil {
		l.observe(ctx, Event{Kind: EventClear, Limiter: l.name, Identifier: id, Cleared: n, Err: err, Duration: l.now().Sub(start)})
	}
	return n, err
}

// Keys returns every counter and ban key of id that the limiter's counting
// rules use (what Clear deletes): not the counters id shares with other
// clients (see Clear). A RuleSource is asked with context.Background().
func (l *Limiter) Keys(id Identifier) []string { return l.keys(context.Background(), id) }

// keys is Keys with the context the RuleSource is asked with: Clear's, as
// a check asks it with its own.
func (l *Limiter) keys(ctx context.Context, id Identifier) []string {
	rules := l.rules.Load().rules
	if l.source != nil { // per-request rules count too; Clear must reach their counters
		if remote := l.source(ctx, l.name, id); remote != nil {
			rules, _ = withPerRequest(rules, remote)
		}
	}
	var out []string
	for _, c := range rules {
		if !c.rule.Action.counts() || keys.Shared(c.rule.Characteristics, id) != "" {
			continue
		}
		b, _ := c.key.Append(nil, l.head, id)
		k := string(b)
		out = append(out, k, k+banSuffix)
	}
	return out
}

func (l *Limiter) warn(ctx context.Context, err error, r *Rule, id Identifier) {
	attrs := []slog.Attr{slog.String("limiter", l.name), slog.String("error", err.Error())}
	if r != nil {
		attrs = append(attrs, slog.String("rule", r.Name))
	}
	l.logger.LogAttrs(ctx, slog.LevelWarn, "rate_limit_error", attrs...)
}

// remaining is what op leaves at count: of its limit, or for a token bucket
// of its burst (the tokens a client may spend now).
func (op *Op) remaining(count float64, banned bool) float64 {
	if banned {
		return 0 // nothing passes until the ban ends, whatever the window holds
	}
	if op.Kind == OpTokenBucket {
		return remaining(op.Burst, count)
	}
	return remaining(op.Limit, count)
}

// never reports whether op's cost alone is over its rule's fixed limit:
// over the limit, or for a token bucket over its burst, so the op is
// exceeded however empty its counter. A LimitFunc's limit (0 denies all) is
// a switch an operator turns back (an incident rule): a check it blocks
// waits as any other. A distinct count ignores the cost.
func (c *compiledRule) never(op *Op) bool {
	switch {
	case op.Kind == OpDistinct || c.rule.LimitFunc != nil:
		return false
	case op.Kind == OpTokenBucket:
		return op.Cost > ceiling(float64(op.Burst))
	default:
		return op.Cost > ceiling(float64(op.Limit))
	}
}

// remaining is math.Max(limit-count, 0), NaN included, without the call:
// math.Max is not inlined and a check computes one per evaluation.
func remaining(limit int64, count float64) float64 {
	if r := float64(limit) - count; r > 0 || r != r {
		return r
	}
	return 0
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scratch holds the ops, outcomes and keys of one check. They never reach
// the Result (evaluations copy what they need), so checks reuse them through
// a pool; a guard goroutine, which may outlive the check, gets a copy.
type scratch struct {
	ops  []Op
	outs []OpResult
	// ri holds the index of each op's rule in plan.rules: unlike the rule
	// itself, an index is no pointer, which the garbage collector's write
	// barrier would see on every write while it marks.
	ri []int
	// cached is the evaluation the blocked cache gave (plan.cached).
	cached Evaluation
	// keys holds the keys of ops, in order and nothing else: the memory store
	// reads them in place (see borrowString); for any other store ownKeys
	// copies them into one string first.
	keys []byte
	// evals is a block of evaluations that checks carve their
	// Result.Evaluations from (see evaluations); those from next on are free.
	// An index, not a shrinking slice: no pointer written per check.
	evals []Evaluation
	next  int
	// owned: ownKeys gave the ops a string of their own (see putScratch).
	owned bool
}

// evalBlock is how many evaluations one allocation holds for the checks that
// share a scratch: eleven fill a 1152-byte size class of the allocator on
// 64-bit platforms. A Result that a caller keeps keeps its whole block alive:
// a kilobyte at most beyond its own. Worth it: one allocation per check
// instead makes BenchmarkCheckMemory/rules=1/serial 45% slower.
const evalBlock = 11

// evaluations returns an empty slice with room for n evaluations, for a
// Result. The evaluations reach the caller, who may keep them: each slice is
// a part of the block of its own that no later check touches (its capacity
// ends where the next part starts, so an append by the caller copies), and
// the scratch forgets it. A check thus allocates once per evalBlock
// evaluations instead of once per check.
func (sc *scratch) evaluations(n int) []Evaluation {
	if n > evalBlock/2 {
		return make([]Evaluation, 0, n) // many rules: a block would last only a check or two
	}
	if len(sc.evals)-sc.next < n {
		sc.evals, sc.next = make([]Evaluation, evalBlock), 0
	}
	evs := sc.evals[sc.next : sc.next : sc.next+n]
	sc.next += n
	return evs
}

// Worth it: without the pool BenchmarkCheckMemory/rules=1/serial takes 5.5x as
// long (0.9µs to 4.9µs) and allocates 6 times per check instead of never.
var scratchPool = sync.Pool{New: func() any {
	return &scratch{ops: make([]Op, 0, 8), ri: make([]int, 0, 8), keys: make([]byte, 0, 256)}
}}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.ops) > 64 || cap(sc.keys) > 16<<10 {
		return // too big to keep
	}
	// Drop what the ops hold beyond the scratch's own bytes: the members of
	// distinct ops (the caller's values) and the string ownKeys made, so that
	// a pooled scratch keeps no more of a request than its key buffer does.
	// Keys borrowed from that buffer are left: the next check overwrites
	// them, and every pointer written costs a write barrier while the
	// garbage collector marks.
	for i := range sc.ops {
		op := &sc.ops[i]
		if sc.owned {
			op.Key, op.BanKey = "", ""
		}
		if op.Member != "" {
			op.Member = ""
		}
	}
	if sc.cached.Rule != nil {
		sc.cached = Evaluation{}
	}
	sc.ops, sc.ri, sc.keys, sc.owned = sc.ops[:0], sc.ri[:0], sc.keys[:0], false
	scratchPool.Put(sc)
}

// ownKeys gives the ops keys of their own, for a store that may keep them
// beyond the check (a go-redis pipeline, a guard goroutine): one string holds
// every key of the check, and each op's keys are substrings of it.
func (sc *scratch) ownKeys() {
	if len(sc.ops) == 0 {
		return
	}
	all := string(sc.keys)
	sc.owned = true
	off := 0
	for i := range sc.ops {
		op := &sc.ops[i]
		n := len(op.Key)
		op.Key = all[off : off+n]
		if op.BanKey != "" {
			n = len(op.BanKey)
			op.BanKey = all[off : off+n]
		}
		off += n
	}
}

// borrowString returns the bytes of b as a string without copying them. The
// string is valid only while b's bytes are not written again: a key borrowed
// from a check's scratch is read during the check only, and whatever keeps a
// key beyond it (the memory store's map, the blocked cache) clones it.
// Worth it: a copy per key makes BenchmarkCheckMemory/rules=1/serial 27%
// slower (rules=5: 21%), one allocation per key.
func borrowString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
