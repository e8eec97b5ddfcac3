// Package httpverdict is what the HTTP adapters (ratelimithttp, ratelimitecho,
// ratelimitgin) share: checking a request against several limiters (Guard,
// built on the transport-neutral ratelimit.Guard that the gRPC and asynq
// adapters use too), combining their results (Decision, an alias of
// ratelimit.Decision), and rendering the verdict as response headers (Profile)
// and a 429 problem+json body (WriteProblem).
//
// # Headers
//
// Rate-limit headers come from the most constraining evaluation of an
// enforcing (limit) rule across every limiter that checked the request, so a
// shadow (log) rule never changes what a client sees.
//
// Fail-open: a limiter whose check failed (Result.Err != nil, its store down
// or slow) never blocks and contributes nothing. The headers come from the
// limiters whose check succeeded; when none did, the response carries no
// rate-limit headers rather than made-up ones. Every ratekit adapter follows
// this rule, since it lives in ratelimit.Decision. The profiles:
//
//   - IETF (default): draft-ietf-httpapi-ratelimit-headers -08 and later, two
//     Structured Fields, the policy named after the rule:
//     RateLimit-Policy: "rule";q=<limit>;w=<window seconds>
//     RateLimit: "rule";r=<remaining>;t=<seconds until reset>
//   - Legacy: the drafts up to -06: RateLimit-Limit, RateLimit-Remaining and
//     RateLimit-Reset, the last in seconds until reset (delta, not epoch).
//   - GitLab: RateLimit-Name, RateLimit-Limit (normalised to requests per 60
//     seconds), RateLimit-Observed, RateLimit-Remaining, RateLimit-Reset (Unix
//     epoch seconds), plus RateLimit-ResetTime (HTTP-date) on a 429.
//   - None: no rate-limit headers (Retry-After is still sent on a 429).
//
// A blocked request always gets Retry-After (seconds until the reset, rounded
// up, never earlier than the reset) and Cache-Control: no-store, since a 429
// must not be cached (RFC 6585 §4). The default body is RFC 9457
// application/problem+json of type
// https://iana.org/assignments/http-problem-types#quota-exceeded, listing the
// violated rules in "violated-policies".
//
// # Cost and outcome hooks
//
// A Deferred limiter is charged after the handler, once the cost is known:
// the request's measured resource use (Metered, read from the
// ratelimit.Meter that application code fills with ratelimit.AddCost), or 1
// for the outcomes worth counting (CountStatus, e.g. failed logins only), or
// whatever its Charge function makes of the Outcome. Before the handler it is
// peeked, so that callers already over the limit are blocked without running
// the handler. The charge is made without the request's cancellation: a
// client that hangs up still pays for the work it caused.
package httpverdict
