// Package remoterules is the client of the per-request rules service (an
// external service that returns rules for each request's identifier, the last
// step of docs/design.md#phases): a ratelimit.Config.RuleSource whose rules
// come first in every check, above the file, published and default tiers
// (only the limiter's exemptions, the skip rules opening its list, come
// before them), so limits can differ per customer, namespace or plan and
// change without a deploy.
//
//	conn, err := grpc.NewClient("rules:8091", grpc.WithTransportCredentials(insecure.NewCredentials()))
//	if err != nil {
//		return err
//	}
//	defer conn.Close()
//	remote, err := remoterules.New(remoterules.Config{
//		Service:      "web",                                 // rules are scoped by service and limiter
//		RulesService: rulesv1.NewRulesServiceClient(conn),
//		Available:    available,                             // available_limiters.yaml: answers are checked against it
//	})
//	if err != nil {
//		return err
//	}
//	limiter, err := ratelimit.New(ratelimit.Config{Name: "rack_request", Store: store, Rules: rules, RuleSource: remote.RulesFor})
//	if err != nil {
//		return err
//	}
//
// A rule of the answer named like a local rule replaces it and inherits its
// counter (the name is part of the key). Its evaluation has PerRequest set
// and Tier "remote" (tiers.Remote).
//
// The service's answers are checked as rate_limits.yaml is: protovalidate,
// unique names, RE2, the bounds of docs/limits.md (at most 1 MiB of rules,
// ratelimit.MaxDocumentBytes, as every rules document), and against
// available_limiters.yaml (the limiter and every property must be declared,
// a skip rule must be in the limiter's allowed_skip_rules); per-request
// rules have no mode, so an answer that sets one is invalid
// (config.ErrPerRequestMode). An invalid answer is rejected whole, logged at
// WARN and counted; nothing of it applies.
//
// # Cache and failure
//
// Each answer names the identifier properties it depends on (vary). The
// client caches it per limiter and per values of those properties only, in an
// LRU, empty answers included, so repeated shapes make no call: a warm lookup
// is a map lookup under a mutex and allocates nothing (the limiter's merge of
// the tiers adds one allocation to the check; see BenchmarkCheck). A
// limiter's first check, before its vary list is known, keys by the whole
// identifier. A request carries at most 64 properties, the limiter's vary
// properties first; an answer computed without a vary property the
// identifier holds (a first check of a larger identifier) is asked for again
// with them first, so no answer is cached for values it was not computed
// with. A value the protocol cannot carry (over 4096 bytes, or not valid
// UTF-8, which a protobuf string cannot hold) is left out: no selector can
// equal it, and a hostile value never fails the call.
//
// Compiled rules are cached by what selects them, never per identifier: the
// limiter, the document revision and the answer's rules (those of the
// matched override, or the default ones). Every identifier whose answer
// carries the same rules shares one validated, compiled RuleSet, so a
// caller sending distinct values of a property an override selects on costs
// one small cache entry per value (about 250 bytes; 10,000 distinct users
// grow the heap by under 3 MB), not a rule set per value. Stats.Compiled
// counts the compilations. The cache is bounded twice:
//
//   - Config.MaxEntries answers (default DefaultMaxEntries, 10,000);
//   - Config.MaxBytes of estimated heap (default DefaultMaxBytes, 64 MiB):
//     each entry's key and bookkeeping plus, once, each compiled set,
//     estimated at 64 bytes per byte of its encoded rules.
//
// The least recently used answers go first; a rule set goes with the last
// answer that uses it.
//
//   - One call per key: concurrent checks of a cold key wait for the same
//     call (singleflight).
//   - Each call, and each check waiting for one, is bounded by
//     Config.Timeout (default 50ms); a check that runs out runs on the local
//     tiers. A cold check can thus take this timeout plus the store's.
//   - Past cache_for_s an answer still serves, up to stale_for_s more, while
//     one background call revalidates it (sending its revision, so the server
//     can answer not_modified); if the service is down it keeps serving until
//     then. Past that the local tiers serve.
//   - After Config.Breaker.Failures consecutive failed calls (errors,
//     timeouts, invalid answers) the breaker opens: misses make no call and
//     cost nothing for the cooldown; then one probe goes.
//
// Stats counts hits, stale serves, misses, calls, failures, invalid answers
// and breaker skips; Config.Metrics (NewPrometheusMetrics) exports them with
// the call latency, and the debug page shows them (debug.Options.Remote).
//
// The protocol is ratekit.rules.v1 (proto/ratekit/rules/v1/rules.proto,
// generated into package rulesv1 of this module: the root module never
// imports gRPC). Package rulesserver is a reference server backed by Redis,
// and cmd/ratekit-rules its binary.
package remoterules
