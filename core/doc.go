// Package ratelimit is the core of ratekit: one rate-limit model for every Go
// service and framework.
//
// Build a Limiter once per checkpoint (at start-up, not per request), give it an
// ordered list of rules and a Store, then Check an Identifier per request:
//
//	limiter, err := ratelimit.New(ratelimit.Config{
//		Name:  "http_request",
//		Store: ratelimit.NewMemoryStore(), // or redisstore.Dial(ctx, redisURL)
//		Rules: []ratelimit.Rule{{
//			Name:            "authenticated_api",
//			Characteristics: []string{"user"},
//			Limit:           200,
//			Period:          time.Minute,
//			Action:          ratelimit.ActionLimit,
//		}},
//	})
//	if err != nil {
//		return err // invalid rules are rejected here, each named
//	}
//	result := limiter.Check(ctx, ratelimit.Identifier{"user": "user:123", "request_type": "api"})
//	if result.Action == ratelimit.ActionBlock { /* 429, ResourceExhausted, retry the job later */ }
//
// Adapters for net/http, gRPC, Echo, Gin and asynq (middleware/...) build the
// identifier and render the verdict; this package knows nothing of frameworks.
//
// # Evaluation
//
// Rules are evaluated in order. A rule applies when every Match entry is
// present in the identifier and matches: Equal (canonical string equality),
// Regex (RE2, bounded to 1024 bytes and 10000 instructions) or OneOf. One
// entry is special: a match on the HTTP method (PropertyMethod, "method") that
// accepts "GET" accepts "HEAD" too, because servers answer HEAD with the GET
// handler; a rule that counts by method keeps HEAD and GET in separate counters.
//
// A rule list is bounded (the Max constants, docs/limits.md): at most
// MaxRules rules once its tiers are merged, MaxRulesPerTier per tier,
// MaxCharacteristics characteristics and MaxMatchEntries match entries per
// rule, MaxOneOfValues values per OneOf, property names of MaxPropertyLen
// bytes and matched values of MaxMatchValueLen. Each rule a check evaluates may cost
// a key in the store, so the bound is what keeps a check within its timeout.
//
//   - skip is terminal: evaluation stops and the result is allow, with the skip
//     rule as Result.Rule and no Info. Counting rules before it have already
//     been charged (they appear in Evaluations).
//   - limit and log rules count: every applicable counting rule is charged the
//     check's cost. An exceeded limit rule blocks and is terminal: later rules
//     are neither counted nor reached (not even a later skip). An exceeded log
//     rule reports Exceeded and evaluation continues (shadow mode).
//   - Exceeded means count > limit: a limit of 5 admits 5 and blocks the 6th.
//
// By default windows are fixed and start at the first hit of a key: the
// window's expiry is set when the counter is created and never extended.
// ResetAt is now plus the remaining window (or ban). A rule's Algorithm may
// instead be SlidingWindow (a two-window estimate that smooths the boundary
// burst) or TokenBucket (GCRA with a Burst); neither charges a check it
// rejects, and a rejected check's ResetAt is when it would pass, or for a
// cost that never does (over the limit or the burst) when the window is
// empty or the bucket full (docs/design.md#algorithms).
//
// BanFor keeps an exceeded rule exceeded for that long, in a separate state
// that outlives the window. While a ban is active the rule blocks (limit) or
// reports exceeded (log) without counting, so retries cannot extend it, and
// ResetAt is the ban's end. A log rule writes its own shadow ban and never blocks.
//
// CountDistinct counts distinct values of a property (an exact set) instead of
// volume; the cost is ignored except that cost 0 adds nothing. A member longer
// than 200 bytes is stored as its SHA-256, so clients cannot grow a
// set's memory with long values. A rule whose
// property is missing from the identifier is left out, and the result is
// Degraded (logged at WARN as rate_limit_missing_count_distinct).
//
// Cost (the Cost option, default 1) may be fractional, for example measured
// database seconds. Cost 0 reads without writing: it creates no key, and the
// verdict is whether the count already exceeds the limit. Counts are exact
// up to 2^53 in every store: a limit is at most MaxCount (2^53 - 1), a cost
// over it counts as 2^53, and a count of 2^53 or more is reported as 2^53
// (docs/limits.md#counts).
//
// Peek returns the verdict Check would return with the same cost, without
// counting, banning or extending anything: it blocks when the count plus the
// cost (or the set with the new member) would exceed the limit, or when a ban is
// active. Peek with Cost(0) asks "already over?", which is what the
// peek-then-check pattern for costs known only afterwards needs.
//
// Clear removes the counters and bans (shadow bans too) of every counting rule
// of the limiter for one identifier, whether the rule matches it or not: the
// caller clearing state after a successful login knows who succeeded, not which
// rules matched.
//
// The Result carries the verdict (Action), Exceeded, the most constraining
// evaluated rule (blocking first, then exceeded, then least remaining, then
// rule order) with its Info (resolved limit and period, count, remaining,
// ResetAt), every Evaluation, and Err when the check failed open. Enforcing
// returns the most constraining evaluation of a limit rule, so responses never
// change because of shadow rules.
//
// # Shadow mode
//
// A whole limiter can run in shadow mode (Config.Enforcement = Shadow,
// SetEnforcement at runtime, or a tier's mode in the rule store): it counts
// exactly as enforcing (same keys, same bans, a blocking rule still ends
// evaluation) but its Action is always ActionAllow, Result.Shadow is set,
// WouldBlock tells what enforcing would have answered, and Enforcing is nil so
// no rate-limit headers reach clients. Package rollout compares it with a
// legacy check before it enforces.
//
// # Identifiers and keys
//
// An Identifier maps property names to values; values are compared and keyed
// by their canonical string (see Identifier: integers in decimal, so 42 and
// "42" are one caller). A nil value, including a typed nil such as a nil *url.URL, is
// the same as an absent property; the empty string is a value of its own.
//
// Each (limiter, rule, characteristic values) has its own counter key, for
// example
//
//	ratekit:rl:{http_request:authenticated_api:user=user%3A123}
//	ratekit:rl:{user_sign_in:ban_ip:ip=2001%3Adb8%3A%3A1}:ban
//
// The braces are a Redis Cluster hash tag, so a counter and its ban share a
// slot. Names and values are percent-escaped (':', '=', '{', '}', '%', '!',
// '#', spaces, controls and non-ASCII bytes), a missing property is "!" (only
// for rules with CountMissing: otherwise a rule whose characteristic is
// missing does not apply, and the result is Degraded, logged at WARN as
// rate_limit_missing_characteristic, so a misspelt property never becomes one
// bucket shared by every caller) and a
// value longer than 200 escaped bytes is "#" plus its SHA-256, so no
// two different identifiers can ever share a counter. The limiter name leads
// every key, so two limiters never share counters.
//
// # Failing open, within bounds
//
// Check and Peek never return an error: a store failure, a timeout or a
// failing limit resolver gives ActionAllow with Result.Err set, logged at WARN
// as rate_limit_error and reported to Config.Observer (metrics). Each call to a
// store outside the process is bounded by Config.Timeout (default 100ms):
// through its context alone when the store returns by the deadline on its own
// (redisstore's Store.ContextBounded), otherwise in a goroutine of its own, so
// that even a server that accepts connections and never answers cannot hold a
// request longer. The memory store, in process, is called without either. After Breaker.Failures
// consecutive failures (default 3) a circuit breaker opens: checks then fail
// open at once, without touching the network, with Err wrapping
// ErrCircuitOpen. A background prober, not a caller, tries the store with a
// deadline of its own (Breaker.ProbeTimeout, default 5s: nothing waits for
// it, and a connection may take longer to set up than a check may wait) at
// intervals growing from Cooldown/4 to Cooldown
// (default 500ms); its first success closes the breaker, so the first
// successful check comes within about one Cooldown of the store's return and
// never waits for a caller's timeout. An outage therefore costs a request at
// most the timeout (the checks in flight when it starts), and nothing once the
// breaker is open. The prober stops when the breaker closes or when no check
// has asked for a minute. On a Redis Cluster from redisstore.Dial the limiter
// keeps a breaker per master: a master that is down fails open only the
// checks with a key on it (docs/design.md#fail-open). A caller's own cancellation never counts against the
// store: its result allows with Err wrapping ErrCanceled, logs no warning,
// leaves the breaker as it was, and is not counted as a store error by
// observability/observe. A panic inside a store is recovered: the check fails open
// with Err wrapping ErrStorePanic, and the memory store never holds a lock
// across code that can panic.
//
// # Overriding a rule with one of another kind
//
// A rule of a higher tier replaces a lower one of the same name and inherits
// its counter (the name is in the key). The counting kind is part of the key
// as well: a count_distinct rule's set ends in ":set", so an override that
// changes the kind starts a fresh counter, and one that keeps it inherits the
// old one. Neither store ever meets a value of the wrong type as an error.
// A distinct set stops growing once over its limit (it holds at most limit+1
// members, each at most 201 bytes: a value up to 200 bytes as it is, one more
// for a value starting with '#', and a longer one as "#" and its SHA-256, 65
// bytes).
//
// # Stores
//
// A Store applies the counting operations the limiter builds (see Store, Op
// and OpResult). NewMemoryStore is the embedded default for one process (it
// reclaims expired entries in the background, a bounded number per interval,
// until Close); redisstore.Dial (or redisstore.New on a go-redis client)
// counts in Redis, evaluating every rule of a check in one Lua script call
// (or plain commands for the usual check), and on Redis Cluster in stages of
// pipelined calls that never charge past a blocking rule (see package
// redisstore). Every store passes the conformance suite in core/storetest.
//
// # Batches
//
// CheckBatch checks several requests at once, of one limiter or several
// (the descriptors of an Envoy request: checks that must all count; a
// block in one does not stop the others counting, so the adapters, whose
// first block ends the request, check their limiters one by one):
// each result is what its Check alone would give, and the checks whose
// limiters share a store that implements BatchStore reach it in one call,
// one round trip. A store without BatchStore gets one Eval per check.
//
// # Adapters
//
// The framework adapters (middleware/...) build an identifier per request and
// check it against one or more limiters, outside the model: the cost meter
// that handlers fill with adapter.AddCost is package middleware/adapter's,
// the rendering of a verdict (headers, problem body) middleware/headers'.
//
// # Rule tiers
//
// SetRules replaces the rule list atomically, all or nothing: an invalid list
// is rejected whole and the limiter keeps its last good rules. Package
// github.com/ratekit/ratekit/core/tiers builds the evaluated list from the
// tiers (remote ++ file ++ published ++ default, docs/design.md#tiers), where a
// rule name in a higher tier replaces the lower tier's rule of that name and,
// because the name is in the key, inherits its counter; the skip rules that
// open the default tier (health-check exemptions) come before every tier
// unless one replaces them by name.
package ratelimit
