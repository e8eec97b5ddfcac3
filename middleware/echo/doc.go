// Package ratelimitecho is the Echo v4 rate-limit middleware.
//
//	e := echo.New()
//	e.IPExtractor = echo.ExtractIPDirect() // see "Client IP" below
//	e.Use(ratelimitecho.Middleware(limiter))
//
// For each request it builds an identifier (ip, method, path, endpoint, user;
// path is the one Echo routes on, echo.GetPath: escaped where the request's
// escaping differs from the decoded path's, so /%68ealthz is not /healthz),
// checks it against each limiter, and either calls the next handler or sets
// the rate-limit headers, Retry-After (none for a request that can never
// pass, blocked by its cost alone: ratelimit.Info.Never) and
// X-Content-Type-Options: nosniff and
// returns an *echo.HTTPError (Code 429, a *DeniedError with the decision and
// the problem details as Internal), so that Echo's HTTPErrorHandler renders
// the 429 like every other error: the default handler writes the
// application/problem+json details of ratelimitheaders; a custom one may use
// Decision (see ratelimitheaders for header profiles, and WithRetryAfterJitter).
//
// WithIdentifier replaces the identifier builder; WithProperties adds or
// replaces properties of the identifier once it is built, by the default
// builder or WithIdentifier's, the same in every ratekit adapter. WithCost
// weighs requests (default 1), and WithClock sets the clock the headers are
// computed with, read once per request.
//
// WithLimiters, WithDeferred, WithClock, WithTrustedProxies, WithIPv6Prefix, WithProfile and
// WithRetryAfterJitter are the options every HTTP adapter offers, the same
// in ratelimithttp, ratelimitecho and ratelimitgin.
//
// Register it with e.Use, not e.Pre: the endpoint property is the route
// template, "GET " + c.Path() (e.g. "GET /users/:id"), which the router fills
// only after routing; e.Pre middleware sees an empty path. Requests that match
// no route get identifiers.Unmatched, those that Echo hands to a 404 route too
// (e.RouteNotFound's, and the catch-alls "/api" and "/api/*" that a group's
// Use registers so that its middleware sees its unmatched requests).
//
// # Client IP
//
// The ip property is the socket peer, resolved through WithTrustedProxies (an
// IPv6 peer as its /64 network, WithIPv6Prefix sets another length; ip_full
// holds the whole address, see identifiers.SetIP):
// forwarding headers are believed only from proxies listed there, and the
// first request that carries one from another peer is logged once (slog's
// default logger), since behind a proxy not listed every client would share
// the proxy's bucket. The
// middleware does not call c.RealIP() by default, because without an
// e.IPExtractor Echo's RealIP trusts X-Forwarded-For and X-Real-IP from
// anyone, which lets every client pick its own rate-limit bucket. If your
// service already configures e.IPExtractor (echo.ExtractIPFromXFFHeader with
// trust options, or echo.ExtractIPDirect), WithEchoIPExtractor(e) makes the
// middleware use c.RealIP() instead. Middleware checks e when it is called
// (set e.IPExtractor first): it panics if e or e.IPExtractor is nil, or if
// the extractor believes X-Forwarded-For or X-Real-IP from an arbitrary peer.
// A header of another name that a custom extractor reads (a CDN's) is the
// service's choice and is not checked. Every Echo service should set
// e.IPExtractor anyway, since other middleware and handlers call c.RealIP().
//
// # Cost and outcome hooks
//
// WithDeferred adds limiters charged after the handler (Metered,
// CountStatus) and peeked before it. The middleware puts an
// adapter.Meter in the request context for adapter.AddCost. The status an
// outcome hook sees is the committed response status or, when the handler
// returned an error without writing a response, the status Echo's default
// HTTPErrorHandler sends for it: the code of an *echo.HTTPError returned as
// is (of its Internal when that is an *echo.HTTPError too), 500 for any other
// error, a wrapped *echo.HTTPError included; 500 when the handler panicked
// (it is still charged, before the panic goes on to Echo's Recover).
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
package ratelimitecho
