// Package ratelimitheaders renders a rate-limit verdict the same way in every
// ratekit adapter and in the Envoy rate limit service: the rate-limit header
// profiles (IETF, Legacy, GitLab, None), Retry-After, and the RFC 9457
// problem+json body of a 429. The HTTP adapters (ratelimithttp,
// ratelimitecho, ratelimitgin) write the headers; the gRPC adapter sends
// them lower-cased as metadata (Profile.Fields); the Envoy service adds them
// to its answer. Users choose a profile with each adapter's WithProfile (or
// WithHeaderProfile for gRPC), and an adapter of their own renders a
// Decision built from its limiters' results with Profile.SetHeaders and
// NewProblem.
//
// # Decision
//
// A Decision is the combined verdict of every limiter that looked at one
// request. A limiter whose check failed open (its store down or slow) never
// blocks and contributes no headers: the headers come from the limiters whose
// check succeeded, and when every check failed there are none, since there is
// nothing true to say.
//
// # Profiles
//
// Rate-limit headers come from the most constraining evaluation of an
// enforcing (limit) rule across every limiter that checked the request, so a
// shadow (log) rule never changes what a client sees:
//
//   - IETF (default): draft-ietf-httpapi-ratelimit-headers -08 and later, two
//     Structured Fields, the policy named after the rule:
//     RateLimit-Policy: "rule";q=<limit>;w=<window seconds>
//     RateLimit: "rule";r=<remaining>;t=<seconds until reset>
//     (a value past the 15 digits of a Structured Field Integer is stated
//     as 999999999999999)
//   - Legacy: the drafts up to -06: RateLimit-Limit, RateLimit-Remaining and
//     RateLimit-Reset, the last in seconds until reset (delta, not epoch).
//   - GitLab: RateLimit-Name, RateLimit-Limit (normalised to requests per 60
//     seconds), RateLimit-Observed, RateLimit-Remaining, RateLimit-Reset (Unix
//     epoch seconds), plus RateLimit-ResetTime (HTTP-date) on a 429.
//   - None: no rate-limit headers (Retry-After is still sent on a 429, but
//     for a request that can never pass).
//
// A blocked request gets Retry-After (seconds until the reset, rounded
// up, never earlier than the reset and never below ratelimit.MinRetryAfter,
// one second, so a client is never told to come back at once) and
// Cache-Control: no-store, since a 429 must not be cached (RFC 6585 §4). A
// request that can never pass, blocked by its cost alone (over a rule's fixed
// limit or a token bucket's burst: ratelimit.Info.Never, Decision.Never), gets no
// Retry-After, since no wait helps and a client obeying one would retry
// forever, and its problem detail says it can never pass. The problem body is of type
// https://iana.org/assignments/http-problem-types#quota-exceeded and lists
// the violated rules in "violated-policies".
//
// The package imports the standard library and core only.
package ratelimitheaders
