// Package ratelimithttp is the net/http rate-limit middleware. The header
// profiles, Retry-After and the 429 problem+json body it renders are package
// ratelimitheaders' (middleware/headers), shared with the Echo, Gin and gRPC
// adapters and the Envoy service; the cost meter and Deferred are package
// adapter's.
//
//	limiter, err := ratelimit.New(ratelimit.Config{Name: "http_request", Store: store, Rules: rules})
//	if err != nil {
//		return err // an invalid rule, named
//	}
//	handler := ratelimithttp.Middleware(limiter, ratelimithttp.WithMux(mux))(mux)
//
// For each request it builds an identifier (identifiers.FromHTTP: ip, method,
// path, endpoint, user), checks it against each limiter, and either calls the
// next handler or answers 429 with rate-limit headers, Retry-After and the
// problem+json body.
//
// # Identifier
//
// WithIdentifier replaces the builder; WithProperties adds or replaces
// properties of the identifier once it is built, by the default builder or
// WithIdentifier's (the user an auth middleware found, say), the same in
// every ratekit adapter. WithCost weighs requests (default 1), and WithClock
// sets the clock the headers are computed with, read once per request.
//
// # Endpoint
//
// The endpoint property is the ServeMux pattern (http.Request.Pattern), which
// ServeMux sets only when it dispatches. Middleware wrapping the whole mux runs
// before that: pass WithMux(mux) so the pattern is resolved up front with
// mux.Handler(r), or wrap each route's handler instead
// (mux.Handle("GET /x", mw(h))), where Pattern is already set.
//
// # Client IP
//
// The ip property is the socket peer. Forwarding headers are believed only
// from proxies listed with WithTrustedProxies; the first request that
// carries one from any other peer is logged once (slog's default logger):
// behind a proxy not listed, every client would share the proxy's bucket.
// An IPv6 client is keyed by its
// /64 network ("2001:db8::/64"; WithIPv6Prefix sets another length), and
// ip_full holds the whole address (see identifiers.SetIP).
//
// # HEAD
//
// ServeMux serves HEAD with a "GET /x" route's handler, and ratekit matches
// likewise: a rule whose match on method accepts GET also applies to HEAD
// (see ratelimit.PropertyMethod), so a client blocked on GET is blocked on
// HEAD too.
//
// # Cost and outcome hooks
//
// WithDeferred adds limiters charged after the handler: Metered charges the
// cost that application code reported with adapter.AddCost (the middleware
// puts an adapter.Meter in the request context), and CountStatus counts only
// some outcomes, such as failed logins.
// Both are peeked before the handler, so callers already over the limit are
// rejected without running it. A handler that panics (as a reverse proxy
// does with http.ErrAbortHandler when its client hangs up) is still charged,
// as a 500, before the panic goes on.
//
// # Fail-open
//
// A limiter whose check fails (its store down or slow) lets the request
// through and never blocks it; it contributes no rate-limit headers. The
// headers come from the limiters whose check succeeded, and a healthy limiter
// still blocks beside a failed one. When every check failed, the response
// carries no rate-limit headers, since there is nothing true to say. The rule
// is ratelimitheaders.Decision's, so every adapter follows it.
//
// A request whose caller went away during the checks (its context ended, so
// a check failed open with ratelimit.ErrCanceled, counting nothing) is not
// let through: the handler does not run, since a client over its limit would
// otherwise have it run, uncounted, by hanging up during the check. It is
// answered 499 (client closed request), which no client reads, without
// rate-limit headers.
//
// # Headers
//
// Rate-limit headers come from the most constraining evaluation of an
// enforcing (limit) rule across every limiter that checked the request, so a
// shadow (log) rule never changes what a client sees. WithProfile selects
// the profile (a ratelimitheaders.Profile):
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
//   - None: no rate-limit headers (Retry-After is still sent on a 429, but
//     for a request that can never pass).
//
// WithRetryAfterJitter adds a random delay to Retry-After only.
//
// A blocked request gets Retry-After (seconds until the reset, rounded
// up, never earlier than the reset and never below ratelimit.MinRetryAfter,
// one second, so a client is never told to come back at once), but for one
// that can never pass, blocked by its cost alone (ratelimit.Info.Never): no
// wait helps it, and a client obeying a Retry-After would retry forever.
// Every blocked request gets Cache-Control: no-store, since a 429 must not be
// cached (RFC 6585 §4). The default body is RFC 9457
// application/problem+json of type
// https://iana.org/assignments/http-problem-types#quota-exceeded, listing the
// violated rules in "violated-policies".
package ratelimithttp
