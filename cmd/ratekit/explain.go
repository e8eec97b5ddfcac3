package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/suggest"
	"github.com/ratekit/ratekit/observability/observe"
)

const explainUsage = `usage: ratekit explain [--redis URL] --limiter NAME [flags] PROPERTY=VALUE...

Shows how a limiter decides for one identifier, without counting: every rule
in evaluation order with its tier, whether it matches the identifier and,
when it does not, which match entry fails; for the rules that count, the
current count in Redis, the remaining budget, the window reset and any active
ban with its expiry; the rules a higher tier overrides; and the verdict a
check would give now. It only reads (a peek): nothing is counted, banned or
extended.

The rules are the ones a service enforces: the limiter's document in the
rule store (file, published and default tiers) where it has one, and the
files given here for the tiers the document lacks, or for all of them when
the limiter has no document.

example:
  ratekit explain --redis redis://10.0.0.5:6379 --limiter user_sign_in \
      --available-limiters config/available_limiters.yaml \
      --rate-limits config/rate_limits.yaml ip=203.0.113.7 username=alice

flags:
` + connUsage + `
  --limiter NAME              the limiter to explain (required)
  --available-limiters FILE   the application's available_limiters.yaml: the
                              default tier (required when the limiter has no
                              document in the rule store, or one without a
                              default_rules tier: no service seeded it)
  --rate-limits FILE          an operator's rate_limits.yaml: the file tier
  --rules-service URL         the HTTP address of the per-request rules service
                              (ratekit-rules serve -http): its answer for this
                              identifier is the remote tier, above all others;
                              it needs the calling service (--service NAME or
                              $` + envService + `, as in remoterules.Config.Service)
  --cost N                    the cost of the request to explain (default 1)
  --timeout D                 bound on the whole command (default 5s, at most 10m)
  --json                      print the explanation as JSON

The counters ratekit-envoy keeps apart are shown too: a value over 1024
bytes is counted there as its first 991 bytes, a tilde and a digest of the
whole, and when only those counters exist they are the ones explained (a
warning says so); a descriptor's limit override (a rule envoy_override_<N>s
no tier holds, whose limit comes with each request) is listed with its count
and reset, found by a SCAN of the limiter's override keys (at most 100,000
keys per node; a warning says when a node holds more).

PROPERTY=VALUE pairs are the identifier, as the service builds it (for
example ip=203.0.113.7 user=alice request_type=api). A key outside the
limiter's available_properties (or, without --available-limiters, one that
no rule reads) is named in a warning on stderr: it is most often a typo.
Flags may come before or after the identifier.

exit codes: 0 explained (whatever the verdict); 1 invalid config, unknown
limiter or Redis failure; 2 usage error or unreadable file`

func init() {
	commands["explain"] = command{
		summary: "show how a limiter decides for one identifier, without counting",
		usage:   explainUsage,
		run:     runExplain,
	}
}

// explanation is the JSON form of `ratekit explain --json`.
type explanation struct {
	Limiter    string            `json:"limiter"`
	KeyPrefix  string            `json:"key_prefix"`
	Identifier map[string]string `json:"identifier"`
	Cost       float64           `json:"cost"`
	Tiers      []tierSummary     `json:"tiers"`
	Rules      []ruleExplanation `json:"rules"`      // effective rules, in evaluation order
	Overridden []overriddenRule  `json:"overridden"` // replaced by a same-named rule of a higher tier
	RuleStore  *ruleStoreState   `json:"rule_store"`
	Remote     *remoteState      `json:"rules_service,omitempty"`
	Warnings   []string          `json:"warnings,omitempty"` // identifier keys no rule can use
	// GatewayOverrides are the counters of the limit overrides ratekit-envoy
	// was sent with this identifier's descriptor: per-request rules above
	// every tier, whose limit is kept nowhere (see gateway.go).
	GatewayOverrides []gatewayOverride  `json:"gateway_overrides,omitempty"`
	Verdict          verdictExplanation `json:"verdict"`
}

// ruleStoreState is what the rule store holds for the limiter.
type ruleStoreState struct {
	Key      string `json:"key"`
	Document bool   `json:"document"`        // the limiter has a document
	Error    string `json:"error,omitempty"` // reading or applying it failed
}

// tierSummary names where a tier's rules come from.
type tierSummary struct {
	Tier   string `json:"tier"`
	Source string `json:"source"`
	Rules  int    `json:"rules"`
}

// Rule states in an explanation.
const (
	stateNoMatch      = "no_match"      // a match entry fails
	stateSkip         = "skip"          // a matching skip rule: allow, evaluation ends
	stateAllow        = "allow"         // counted, under its limit
	stateExceeded     = "exceeded"      // a log rule a check would exceed (shadow: never blocks)
	stateBlock        = "block"         // a limit rule a check would exceed: the verdict
	stateBanned       = "banned"        // an active ban: exceeded without counting
	stateDegraded     = "degraded"      // a characteristic or the count_distinct property missing: left out
	stateNotEvaluated = "not_evaluated" // an earlier skip, block or a store error ended evaluation
)

// ruleExplanation is one effective rule's part in the decision.
type ruleExplanation struct {
	Position   int      `json:"position"`
	Tier       string   `json:"tier"`
	Name       string   `json:"name"`
	Action     string   `json:"action"`
	Algorithm  string   `json:"algorithm,omitempty"` // sliding_window or token_bucket; absent for the fixed window
	Matched    bool     `json:"matched"`
	Mismatches []string `json:"mismatches,omitempty"` // why the rule does not match
	State      string   `json:"state"`
	Reason     string   `json:"reason,omitempty"` // for not_evaluated and degraded
	Count      *float64 `json:"count,omitempty"`  // current count (distinct values for count_distinct)
	Limit      *int64   `json:"limit,omitempty"`
	// Burst is a token bucket's capacity (its limit unless the rule sets a
	// burst): Count and Remaining are tokens of it.
	Burst     *int64   `json:"burst,omitempty"`
	Remaining *float64 `json:"remaining,omitempty"`
	// ResetAt is the window's end, or the ban's when banned; for a sliding
	// window or token bucket that blocks, when the same check would pass.
	ResetAt *time.Time `json:"reset_at,omitempty"`
	Banned  bool       `json:"banned,omitempty"`
	// Never: the check's cost alone is over the rule (its limit, a token
	// bucket's burst): no check of this cost ever passes (ratelimit.Info.Never).
	Never bool `json:"never,omitempty"`
}

// overriddenRule is a lower-tier rule replaced by a higher tier's rule of the same name.
type overriddenRule struct {
	Tier         string `json:"tier"`
	Name         string `json:"name"`
	OverriddenBy string `json:"overridden_by"`
}

// verdictExplanation is what a check would decide now.
type verdictExplanation struct {
	Action     string  `json:"action"`
	Rule       string  `json:"rule,omitempty"`
	Exceeded   bool    `json:"exceeded"`
	Degraded   bool    `json:"degraded,omitempty"`
	Error      string  `json:"error,omitempty"`         // the store failed: a check would fail open
	RetryAfter float64 `json:"retry_after_s,omitempty"` // none when Never
	// Never: the blocking rule never passes a check of this cost, so there
	// is no retry to tell.
	Never   bool       `json:"never,omitempty"`
	ResetAt *time.Time `json:"reset_at,omitempty"`
	// Shadow: the limiter runs in shadow mode (its rule store tier says so);
	// WouldBlock: enforcing, it would block.
	Shadow     bool `json:"shadow,omitempty"`
	WouldBlock bool `json:"would_block,omitempty"`
	// Skipped: Rule is the skip rule that ended the evaluation
	// (ratelimit.Result.Skipped), not a counting rule.
	Skipped bool `json:"skipped,omitempty"`
}

type explainFlags struct {
	connFlags
	name, usage                    string // the command: explain or clear
	limiter, available, rateLimits string
	asJSON                         bool
	cost                           float64
	timeout                        time.Duration
	rulesService                   string // the per-request rules service's HTTP address
	// remote, when set, is the RuleSource of the limiter openLimiter builds:
	// the rules service's answer for the one identifier the command works
	// on, as a service's client gives it to its limiter.
	remote *remoteTier
}

// remoteTier holds the rules service's answer for one identifier.
type remoteTier struct{ set *ratelimit.RuleSet }

func (r *remoteTier) source(context.Context, string, ratelimit.Identifier) *ratelimit.RuleSet {
	return r.set
}

func runExplain(ctx context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	f := explainFlags{name: "explain", usage: explainUsage}
	f.connFlags.register(fs)
	fs.StringVar(&f.limiter, "limiter", "", "")
	fs.StringVar(&f.available, "available-limiters", "", "")
	fs.StringVar(&f.rateLimits, "rate-limits", "", "")
	fs.StringVar(&f.rulesService, "rules-service", "", "")
	fs.Float64Var(&f.cost, "cost", 1, "")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "")
	fs.BoolVar(&f.asJSON, "json", false, "")
	pos, ok, code := parseArgs(fs, explainUsage, args, out)
	if !ok {
		return code
	}
	f.resolve()
	if err := f.check(); err != nil {
		return usageError(out, explainUsage, "%v", err)
	}
	switch {
	case f.limiter == "":
		return usageError(out, explainUsage, "explain needs --limiter NAME")
	case f.rateLimits != "" && f.available == "":
		return usageError(out, explainUsage, "--rate-limits is checked against --available-limiters FILE: give both")
	case math.IsNaN(f.cost) || math.IsInf(f.cost, 0) || f.cost < 0:
		return usageError(out, explainUsage, "--cost must be a finite number >= 0, got %v", f.cost)
	case checkTimeout(f.timeout) != nil:
		return usageError(out, explainUsage, "%v", checkTimeout(f.timeout))
	case f.rulesService != "" && f.service == "":
		return usageError(out, explainUsage, "--rules-service needs the calling service: --service NAME (or $%s)", envService)
	}
	id, err := parseIdentifier(pos)
	if err != nil {
		return usageError(out, explainUsage, "%v", err)
	}
	// One bound for the whole command, as clear's (see runClear).
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	b, code := openLimiter(ctx, out, f)
	if code != exitOK {
		return code
	}
	defer b.client.Close()
	limiter, ts, sources, state, local := b.limiter, b.tiers, b.sources, b.state, b.local
	opts := []ratelimit.CheckOption{ratelimit.Cost(f.cost)}
	var remote *remoteState
	if f.rulesService != "" {
		remote = &remoteState{URL: shownURL(f.rulesService), Service: f.service}
		rules, err := fetchRemoteRules(ctx, f.rulesService, f.service, f.limiter, id, local.available, f.timeout)
		var set *ratelimit.RuleSet
		if err == nil {
			set, err = ratelimit.CompileRules(tiers.Remote, rules)
		}
		if err != nil {
			remote.Error = err.Error() + " (the services run on their local tiers)"
		} else {
			ts.Remote = rules
			sources = append([]tierSummary{{Tier: tiers.Remote, Source: "rules service " + remote.URL, Rules: len(rules)}}, sources...)
			opts = append(opts, ratelimit.WithRules(set))
		}
	}
	// A value too long for the gateway to keep is counted there by a
	// stand-in (keys.GatewayIdentifier): when only the stand-in's counters
	// exist, they are the ones that decide, and explained.
	var gatewayWarning string
	gid, long := keys.GatewayIdentifier(id)
	shown := id
	if long {
		mine, err := anyExists(ctx, b.client, limiter.Keys(id), f.timeout)
		var theirs bool
		if err == nil {
			theirs, err = anyExists(ctx, b.client, limiter.Keys(gid), f.timeout)
		}
		switch {
		case err != nil:
			gatewayWarning = gatewayValueNote(long) + "; reading them failed: " + err.Error()
		case theirs && !mine:
			shown = gid
			gatewayWarning = gatewayValueNote(long) + "; shown: those counters, the identifier as the gateway counts it"
		case theirs:
			gatewayWarning = gatewayValueNote(long) + "; those counters exist too and are not shown here (ratekit clear removes both)"
		default:
			gatewayWarning = gatewayValueNote(long) + "; none of those exists"
		}
	}
	res := limiter.Peek(ctx, shown, opts...)
	ex := explain(limiter, ts, sources, shown, f.cost, res, time.Now())
	ex.Identifier = identifierStrings(id) // as given, whichever form was peeked
	ex.RuleStore = state
	ex.Remote = remote
	overrides, err := findOverrides(ctx, b.client, f.keyPrefix, f.limiter, gid, f.timeout)
	if err == nil {
		err = overrides.peek(ctx, b.store, f.keyPrefix, f.limiter, gid, f.timeout)
	}
	// A key an override counter counts by is used, if by no rule.
	ex.Warnings = identifierWarnings(id, local.properties, slices.Concat(limiter.Rules(), overrides.rules()))
	if gatewayWarning != "" {
		ex.Warnings = append(ex.Warnings, gatewayWarning)
	}
	ex.GatewayOverrides = overrides.found
	switch {
	case err != nil:
		ex.Warnings = append(ex.Warnings, err.Error())
	case overrides.truncated:
		ex.Warnings = append(ex.Warnings, overrides.truncatedNote())
	}
	if w := prefixWarning(ctx, b.client, f, slices.Concat(limiter.Keys(shown), overrideKeysOf(overrides))); w != "" {
		ex.Warnings = append(ex.Warnings, w)
	}
	for _, w := range ex.Warnings {
		fmt.Fprintf(out.stderr, "warning: %s\n", w)
	}
	if f.asJSON {
		enc := json.NewEncoder(out.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(ex)
	} else {
		printExplanation(out.stdout, ex, time.Now())
	}
	if res.Err != nil {
		fmt.Fprintf(out.stderr, "ratekit explain: %v\n", res.Err)
		return exitInvalid
	}
	return exitOK
}

// localTiers are the tiers a service of the limiter holds itself, from the
// files given on the command line.
type localTiers struct {
	tiers.Set
	fileSource, defaultSource string // "" when the file was not given
	available                 *config.AvailableLimiters
	// properties are the limiter's available_properties; nil when
	// available_limiters.yaml was not given.
	properties []string
}

// boundLimiter is f.limiter on Redis with the rules the services enforce.
type boundLimiter struct {
	limiter *ratelimit.Limiter
	client  redis.UniversalClient // the caller closes it
	store   ratelimit.Store       // the limiter's, on client
	local   localTiers
	tiers   tiers.Set
	sources []tierSummary
	state   *ruleStoreState
}

// openLimiter builds the limiter that explain and clear work on: its local
// tiers from the files, a Redis store without breaker (an operator wants the
// error, not a fail-open), bound to the rule store.
func openLimiter(ctx context.Context, out output, f explainFlags) (boundLimiter, int) {
	local, code := loadLocalTiers(out, f)
	if code != exitOK {
		return boundLimiter{}, code
	}
	client, err := redisClient(f.redisURL, f.cluster, f.timeout)
	if err != nil {
		return boundLimiter{}, usageError(out, f.usage, "--redis: %v", err)
	}
	store := redisstore.New(client)
	cfg := ratelimit.Config{
		Name:      f.limiter,
		Store:     store,
		KeyPrefix: f.keyPrefix,
		Timeout:   f.timeout,
		Breaker:   ratelimit.BreakerConfig{Failures: -1},
		Logger:    slog.New(slog.DiscardHandler), // errors and degraded rules are reported by the commands
	}
	if f.remote != nil {
		cfg.RuleSource = f.remote.source
	}
	limiter, err := ratelimit.New(cfg)
	if err != nil {
		client.Close()
		return boundLimiter{}, usageError(out, f.usage, "%v", err)
	}
	ts, sources, state, code := bindRuleStore(ctx, out, f, client, limiter, local)
	if code != exitOK {
		client.Close()
		return boundLimiter{}, code
	}
	return boundLimiter{limiter: limiter, client: client, store: store, local: local, tiers: ts, sources: sources, state: state}, exitOK
}

// loadLocalTiers reads the limiter's file and default tiers from the files,
// when given.
func loadLocalTiers(out output, f explainFlags) (localTiers, int) {
	if f.available == "" {
		return localTiers{}, exitOK
	}
	available, err := loadAvailable(f.available)
	if err != nil {
		return localTiers{}, report(out.stderr, f.name, err)
	}
	if available.Spec(f.limiter) == nil {
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": limiter %q is not declared in %s (declared: %s)\n",
			f.limiter, f.available, strings.Join(available.Names(), ", "))
		return localTiers{}, exitInvalid
	}
	var rateLimits *config.RateLimits
	if f.rateLimits != "" {
		if rateLimits, err = loadRateLimits(f.rateLimits, available); err != nil {
			return localTiers{}, report(out.stderr, f.name, err)
		}
	}
	set, err := config.Tiers(available, rateLimits, f.limiter)
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": %v\n", err)
		return localTiers{}, exitInvalid
	}
	props := append([]string{}, available.Spec(f.limiter).GetAvailableProperties()...)
	return localTiers{Set: set, fileSource: f.rateLimits, defaultSource: f.available, properties: props, available: available}, exitOK
}

// bindRuleStore gives the limiter the rules a service enforces: it binds it
// to the rule store with the local tiers and refreshes once, exactly as a
// service's replica does (a tier the limiter's document holds replaces the
// local one; without a document, or with an invalid one, the local tiers
// stay). It returns the tiers, where each came from, and the document's state.
func bindRuleStore(ctx context.Context, out output, f explainFlags, client redis.UniversalClient, l *ratelimit.Limiter, local localTiers) (tiers.Set, []tierSummary, *ruleStoreState, int) {
	store, err := rulestore.New(client, rulestore.Options{Prefix: f.rulesPrefix, Timeout: f.timeout,
		Logger: slog.New(slog.DiscardHandler), ClusterMode: f.cluster})
	if err != nil {
		return tiers.Set{}, nil, nil, usageError(out, f.usage, "--rules-prefix: %v", err)
	}
	if err := store.Bind(l, local.Set); err != nil {
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": %v\n", err)
		return tiers.Set{}, nil, nil, exitInvalid
	}
	key := store.Key(l.Name())
	state := &ruleStoreState{Key: key}
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	// Read as the services' replica reads it: a key of another type or over
	// the size bound is answered by its type or size, never received.
	doc, err := store.Document(rctx, l.Name())
	var invalid error
	switch {
	case errors.Is(err, rulestore.ErrNoDocument):
	case errors.Is(err, rulestore.ErrInvalidDocument):
		invalid = err
		state.Document = true // the services skip it too: they keep their last good rules
		state.Error = fmt.Sprintf("document %s is invalid, services keep their last good rules (shown: the local tiers): %v", key, err)
	case err != nil:
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": rule store: %v\n", err)
		return tiers.Set{}, nil, nil, exitInvalid
	default:
		state.Document = true
	}
	if err := store.Refresh(rctx); err != nil && state.Error == "" {
		state.Error = err.Error()
	}
	ts, _ := store.Tiers(l.Name())
	switch {
	case doc != nil && doc.GetDefaultRules() == nil && local.defaultSource == "":
		// A publish before any service seeded the document: the services
		// use their own defaults, which only available_limiters.yaml holds.
		// Without them a verdict or a clear would leave those rules out.
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": limiter %s: its document in the rule store (key %s) has no default_rules tier, so the services use their own defaults, and no --available-limiters was given: give the application's available_limiters.yaml\n", l.Name(), key)
		return tiers.Set{}, nil, nil, exitInvalid
	case doc != nil || local.defaultSource != "":
	case invalid != nil:
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": limiter %s: its document in the rule store is invalid, the services run on their own files: give them (--available-limiters, --rate-limits): %v\n", l.Name(), invalid)
		return tiers.Set{}, nil, nil, exitInvalid
	default:
		fmt.Fprintf(out.stderr, "ratekit "+f.name+": limiter %s has no document in the rule store (key %s) and no --available-limiters was given: it has no rules here%s\n", l.Name(), key, storedLimiters(rctx, store, l.Name(), f.rulesPrefix))
		return tiers.Set{}, nil, nil, exitInvalid
	}
	var sources []tierSummary
	add := func(tier string, inDoc bool, localSource string, rules []ratelimit.Rule) {
		switch {
		case inDoc:
			sources = append(sources, tierSummary{Tier: tier, Source: "rule store " + key, Rules: len(rules)})
		case localSource != "":
			sources = append(sources, tierSummary{Tier: tier, Source: localSource, Rules: len(rules)})
		}
	}
	add(tiers.File, doc.GetFileRules() != nil, local.fileSource, ts.File)
	add(tiers.Published, doc.GetPublishedRules() != nil, "", ts.Published)
	add(tiers.Default, doc.GetDefaultRules() != nil, local.defaultSource, ts.Defaults)
	return ts, sources, state, exitOK
}

// identifierWarnings names the identifier keys that cannot take part in the
// limiter's decision, most often a typo (usernme for username): keys outside
// the limiter's available_properties when they are known, else keys that no
// rule reads.
func identifierWarnings(id ratelimit.Identifier, properties []string, rules []ratelimit.Rule) []string {
	var warnings []string
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if properties != nil {
		for _, k := range keys {
			if !slices.Contains(properties, k) {
				warnings = append(warnings, fmt.Sprintf("identifier key %q is not one of the limiter's available_properties (%s): no rule may use it%s", k, strings.Join(properties, ", "), suggest.Hint(k, properties)))
			}
		}
		return warnings
	}
	used := map[string]bool{}
	for _, r := range rules {
		for _, c := range r.Characteristics {
			used[c] = true
		}
		for k := range r.Match {
			used[k] = true
		}
		if r.CountDistinct != "" {
			used[r.CountDistinct] = true
		}
	}
	names := make([]string, 0, len(used))
	for k := range used {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range keys {
		if !used[k] {
			warnings = append(warnings, fmt.Sprintf("identifier key %q is used by none of the limiter's rules (pass --available-limiters to check it against available_properties)%s", k, suggest.Hint(k, names)))
		}
	}
	return warnings
}

// parseIdentifier reads PROPERTY=VALUE arguments.
func parseIdentifier(args []string) (ratelimit.Identifier, error) {
	id := ratelimit.Identifier{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("identifier argument %q is not PROPERTY=VALUE", a)
		}
		if _, dup := id[k]; dup {
			return nil, fmt.Errorf("identifier property %q is given twice", k)
		}
		id[k] = v
	}
	return id, nil
}

// identifierStrings returns id's properties as the strings a check reads.
func identifierStrings(id ratelimit.Identifier) map[string]string {
	out := make(map[string]string, len(id))
	for k := range id {
		out[k], _ = id.Get(k)
	}
	return out
}

// explain walks the effective rules as the limiter does and sets each one's
// part from the peek's result.
func explain(l *ratelimit.Limiter, ts tiers.Set, sources []tierSummary, id ratelimit.Identifier, cost float64, res ratelimit.Result, now time.Time) explanation {
	ex := explanation{Limiter: l.Name(), KeyPrefix: l.KeyPrefix(), Identifier: identifierStrings(id), Cost: cost,
		Tiers: sources, Rules: []ruleExplanation{}, Overridden: []overriddenRule{}}
	tierOf := map[string]string{}
	for _, tr := range ts.Rules() {
		if tr.OverriddenBy != "" {
			ex.Overridden = append(ex.Overridden, overriddenRule{Tier: tr.Tier, Name: tr.Rule.Name, OverriddenBy: tr.OverriddenBy})
		} else if _, ok := tierOf[tr.Rule.Name]; !ok {
			tierOf[tr.Rule.Name] = tr.Tier
		}
	}
	evals := map[string]*ratelimit.Evaluation{}
	for i := range res.Evaluations {
		evals[res.Evaluations[i].Rule.Name] = &res.Evaluations[i]
	}
	stoppedBy := "" // why later rules are not evaluated
	if res.Err != nil {
		stoppedBy = "the store failed: " + res.Err.Error()
	}
	// The remote tier (a rules service's answer) comes first, as in a check.
	for i, r := range tiers.Merge(ts.Remote, l.Rules()) {
		re := ruleExplanation{Position: i + 1, Tier: tierOf[r.Name], Name: r.Name, Action: string(r.Action)}
		if r.Algorithm != ratelimit.FixedWindow {
			re.Algorithm = string(r.Algorithm)
		}
		re.Mismatches = r.MatchFailures(id)
		re.Matched = len(re.Mismatches) == 0
		ev := evals[r.Name]
		_, hasDistinct := id.Get(r.CountDistinct)
		missing := missingCharacteristic(r, id)
		switch {
		case !re.Matched:
			re.State = stateNoMatch
		case stoppedBy != "":
			re.State, re.Reason = stateNotEvaluated, stoppedBy
		case r.Action == ratelimit.ActionSkip:
			re.State = stateSkip
			stoppedBy = "after skip rule " + r.Name
		case missing != "":
			re.State = stateDegraded
			re.Reason = fmt.Sprintf("characteristic %q is not in the identifier: the rule is left out", missing)
		case r.CountDistinct != "" && !hasDistinct:
			re.State = stateDegraded
			re.Reason = fmt.Sprintf("count_distinct property %q is not in the identifier: the rule is left out", r.CountDistinct)
		case ev == nil:
			re.State, re.Reason = stateNotEvaluated, "the store did not evaluate it"
		default:
			info := ev.Info
			re.Count, re.Limit, re.Remaining, re.ResetAt, re.Banned = &info.Count, &info.Limit, &info.Remaining, &info.ResetAt, info.Banned
			re.Never = info.Never
			if r.Algorithm == ratelimit.TokenBucket {
				burst := cmp.Or(r.Burst, info.Limit)
				re.Burst = &burst
			}
			switch observe.EvaluationResult(ev) {
			case observe.ResultBanned:
				re.State = stateBanned
			case observe.ResultBlock:
				re.State = stateBlock
			case observe.ResultLog:
				re.State = stateExceeded
			default:
				re.State = stateAllow
			}
			if ev.Blocked {
				stoppedBy = "after the blocking rule " + r.Name
			}
		}
		ex.Rules = append(ex.Rules, re)
	}
	v := verdictExplanation{Action: string(res.Action), Exceeded: res.Exceeded, Degraded: res.Degraded, Shadow: res.Shadow,
		WouldBlock: res.Shadow && res.WouldBlock(), Skipped: res.Skipped}
	if res.Rule != nil {
		v.Rule = res.Rule.Name
	}
	if res.Err != nil {
		v.Error = res.Err.Error()
	}
	if res.Info != nil {
		at := res.Info.ResetAt
		v.ResetAt = &at
		v.Never = res.Blocked() && res.Info.Never
		if res.Blocked() && !v.Never {
			v.RetryAfter = res.Info.RetryAfter(now).Seconds()
		}
	}
	ex.Verdict = v
	return ex
}

func printExplanation(w io.Writer, ex explanation, now time.Time) {
	props := make([]string, 0, len(ex.Identifier))
	for k, v := range ex.Identifier {
		props = append(props, k+"="+v)
	}
	sort.Strings(props)
	fmt.Fprintf(w, "limiter %s, counters under %q, cost %g\n", ex.Limiter, ex.KeyPrefix, ex.Cost)
	fmt.Fprintf(w, "identifier: %s\n", cmp.Or(strings.Join(props, " "), "(empty)"))
	var ts []string
	for _, t := range ex.Tiers {
		ts = append(ts, fmt.Sprintf("%s %s (%s)", t.Tier, count(t.Rules, "rule"), t.Source))
	}
	fmt.Fprintf(w, "tiers, highest first: %s\n", strings.Join(ts, ", "))
	if rs := ex.RuleStore; rs != nil {
		switch {
		case rs.Error != "":
			fmt.Fprintf(w, "rule store: %s\n", rs.Error)
		case rs.Document:
			fmt.Fprintf(w, "rule store: document %s\n", rs.Key)
		default:
			fmt.Fprintf(w, "rule store: no document at %s: the services run on their own tiers\n", rs.Key)
		}
	}
	if r := ex.Remote; r != nil && r.Error != "" {
		fmt.Fprintf(w, "rules service: %s\n", r.Error)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tTIER\tRULE\tACTION\tRESULT")
	for _, r := range ex.Rules {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.Position, r.Tier, r.Name, r.Action, explainRuleLine(r, now))
	}
	for _, o := range ex.Overridden {
		fmt.Fprintf(tw, "-\t%s\t%s\t\toverridden by the %s tier's rule of the same name\n", o.Tier, o.Name, o.OverriddenBy)
	}
	tw.Flush()
	if len(ex.GatewayOverrides) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "limit overrides the gateway (ratekit-envoy) was sent with this descriptor: rules above every tier, counted apart;")
		fmt.Fprintln(w, "their limit comes with each request and is kept nowhere, so whether one blocks is not known here (the verdict below leaves them out):")
		for _, o := range ex.GatewayOverrides {
			if o.Count == nil {
				fmt.Fprintf(w, "  %s: key %s\n", o.Rule, o.Key)
				continue
			}
			fmt.Fprintf(w, "  %s: count %g in a window of %s, resets in %s (key %s)\n", o.Rule, *o.Count,
				time.Duration(o.WindowS)*time.Second, explainUntil(now, *o.ResetAt), o.Key)
		}
	}

	v := ex.Verdict
	fmt.Fprintln(w)
	switch {
	case v.Error != "":
		fmt.Fprintf(w, "verdict: unknown: the store failed (a check would fail open and allow): %s\n", v.Error)
	case v.Action == string(ratelimit.ActionBlock) && v.Never:
		fmt.Fprintf(w, "verdict: block by %s: %s (no wait helps)\n", v.Rule, neverPasses)
	case v.Action == string(ratelimit.ActionBlock):
		fmt.Fprintf(w, "verdict: block by %s, retry after %s\n", v.Rule, time.Duration(v.RetryAfter*float64(time.Second)))
	case v.WouldBlock:
		fmt.Fprintf(w, "verdict: allow: the limiter is in shadow mode; enforcing, it would block by %s\n", v.Rule)
	case v.Rule == "" && v.Degraded:
		fmt.Fprintln(w, "verdict: allow: no rule counted (the rules that match were left out)")
	case v.Rule == "":
		fmt.Fprintln(w, "verdict: allow: no rule matches")
	case v.Skipped:
		// The result's rule is the skip; a log rule before it may have
		// exceeded (the result's Exceeded).
		fmt.Fprintf(w, "verdict: allow: skip rule %s ends the evaluation (the rules after it are not evaluated)", v.Rule)
		var exceeded []string
		for _, r := range ex.Rules {
			if r.State == stateExceeded {
				exceeded = append(exceeded, r.Name)
			}
		}
		switch len(exceeded) {
		case 0:
		case 1:
			fmt.Fprintf(w, "; shadow rule %s exceeded before it: logged, not enforced", exceeded[0])
		default:
			fmt.Fprintf(w, "; shadow rules %s exceeded before it: logged, not enforced", strings.Join(exceeded, ", "))
		}
		fmt.Fprintln(w)
	case v.Exceeded:
		fmt.Fprintf(w, "verdict: allow (shadow rule %s exceeded: logged, not enforced)\n", v.Rule)
	default:
		fmt.Fprintf(w, "verdict: allow (most constraining rule: %s)\n", v.Rule)
	}
	if v.Degraded {
		fmt.Fprintln(w, "degraded: a counting rule was left out (the identifier lacks one of its characteristics or its count_distinct property)")
	}
}

// missingCharacteristic returns the first characteristic of r that id
// lacks, as a check finds it, or "" when id has them all or r counts a
// missing one under a shared value (CountMissing).
func missingCharacteristic(r ratelimit.Rule, id ratelimit.Identifier) string {
	if r.CountMissing {
		return ""
	}
	for _, c := range r.Characteristics {
		if _, ok := id.Get(c); !ok {
			return c
		}
	}
	return ""
}

// neverPasses says why a rule blocks a check of its cost for good.
const neverPasses = "the cost alone is over the rule, a check of this cost never passes"

func explainRuleLine(r ruleExplanation, now time.Time) string {
	switch r.State {
	case stateNoMatch:
		return "no match: " + strings.Join(r.Mismatches, "; ")
	case stateSkip:
		return "skip: allowed without counting; evaluation ends here"
	case stateNotEvaluated, stateDegraded:
		return strings.ReplaceAll(r.State, "_", " ") + ": " + r.Reason
	}
	counts := fmt.Sprintf("count %g of %d, remaining %g", *r.Count, *r.Limit, *r.Remaining)
	// What the reset time means depends on the algorithm.
	passes, resets := "window resets in", "window resets in"
	switch ratelimit.Algorithm(r.Algorithm) {
	case ratelimit.SlidingWindow:
		counts = "sliding window estimate: " + counts
		passes, resets = "a check passes again in", "window ends in"
	case ratelimit.TokenBucket:
		capacity := *r.Limit
		if r.Burst != nil {
			capacity = *r.Burst // what the tokens are counted against
		}
		counts = fmt.Sprintf("token bucket: tokens in use %g of %d, remaining %g", *r.Count, capacity, *r.Remaining)
		passes, resets = "a check passes again in", "bucket full in"
	}
	switch r.State {
	case stateBanned:
		return fmt.Sprintf("BANNED until %s (in %s): exceeded without counting; %s", r.ResetAt.UTC().Format(time.RFC3339), explainUntil(now, *r.ResetAt), counts)
	case stateBlock:
		if r.Never {
			return "BLOCK: " + neverPasses + "; " + counts
		}
		return fmt.Sprintf("BLOCK: a check now exceeds the limit; %s, %s %s", counts, passes, explainUntil(now, *r.ResetAt))
	case stateExceeded:
		return fmt.Sprintf("exceeded (log rule: reported, never blocks); %s, %s %s", counts, passes, explainUntil(now, *r.ResetAt))
	}
	return fmt.Sprintf("allow: %s, %s %s", counts, resets, explainUntil(now, *r.ResetAt))
}

func explainUntil(now, t time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

// anyExists reports whether one of keys exists, one call per key: on a
// Redis Cluster they live in different slots.
func anyExists(ctx context.Context, client redis.UniversalClient, keys []string, timeout time.Duration) (bool, error) {
	for _, k := range keys {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		n, err := client.Exists(rctx, k).Result()
		cancel()
		if err != nil {
			return false, fmt.Errorf("read %s: %w", k, err)
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}

// prefixWarning warns when no key of the identifier exists under the
// counters' prefix but some exist under another: the counts shown (zero)
// are not the service's.
func prefixWarning(ctx context.Context, client redis.UniversalClient, f explainFlags, keys []string) string {
	if found, err := anyExists(ctx, client, keys, f.timeout); err != nil || found {
		return ""
	}
	other, err := findElsewhere(ctx, client, f.keyPrefix, f.limiter, keys, f.timeout)
	if err != nil || len(other.prefixes) == 0 {
		return ""
	}
	return fmt.Sprintf("no counter of this identifier under %q, so the counts below are zero, but its keys exist under another prefix: %s", f.keyPrefix, other.describe(f.service))
}
