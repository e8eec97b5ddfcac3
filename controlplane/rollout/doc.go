// Package rollout moves a checkpoint from a legacy rate limiter to a ratekit
// limiter without a flag day: the new limiter first runs in shadow mode
// beside the legacy check, every request's two decisions are compared and
// counted, and the new limiter enforces only once the two have agreed on
// almost every request for a day.
//
// The steps:
//
//  1. Shadow. Start the limiter in shadow mode: Config.Enforcement =
//     ratelimit.Shadow, `mode: shadow` in rate_limits.yaml, or a published
//     `{mode: shadow, rules: []}` (`ratekit rules publish`). In shadow mode it
//     counts exactly as it would when enforcing (same counters, same bans)
//     but never blocks, and adapters send no rate-limit headers for it.
//  2. Compare. Wrap the limiter in a Rollout and pass the legacy decision of
//     each request to Check (or Compare, for a result an adapter already
//     has). Decision.Block says what to do: the legacy decision while in
//     shadow mode, the limiter's once it enforces. Give New a Recorder:
//     observe.RolloutMetrics exports
//     ratelimit_rollout_decisions_total{rate_limiter, rule, agreement} with
//     agreement agree, new_only, legacy_only or failed (fail-open: not
//     compared).
//  3. Gate. `ratekit rollout gate --prometheus URL` (or --metrics with a
//     /metrics URL or file) computes per limiter the share of compared
//     decisions that disagreed over the last 24 hours and passes a limiter
//     when it is below 0.5 % (MaxDivergence) over at least MinDecisions
//     decisions; it exits 1 when any limiter fails. Per-rule counts show
//     which rule diverges; the debug page shows the mode and figures too.
//  4. Enforce. Flip the mode to enforce (publish `{mode: enforce, rules: []}`,
//     edit rate_limits.yaml, or SetEnforcement) and keep comparing for a
//     while: Decision.Block now follows the limiter, and a rise in divergence
//     is the signal to flip back. Then remove the legacy check.
//
// Which tier's mode wins follows the rules' tier order: rate_limits.yaml over
// a published mode, either over Config.Enforcement.
package rollout
