// Package ratelimithttp is the net/http rate-limit middleware.
//
//	limiter, _ := ratelimit.New(ratelimit.Config{Name: "http_request", Store: store, Rules: rules})
//	handler := ratelimithttp.Middleware(limiter, ratelimithttp.WithMux(mux))(mux)
//
// For each request it builds an identifier (identifiers.FromHTTP: ip, method,
// path, endpoint, user), checks it against each limiter, and either calls the
// next handler or answers 429. Rate-limit headers, Retry-After and the
// problem+json body are rendered by httpverdict (see its documentation for the
// header profiles).
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
// from proxies listed with WithTrustedProxies.
//
// # Cost and outcome hooks
//
// WithDeferred adds limiters charged after the handler: httpverdict.Metered
// charges the cost that application code reported with ratelimit.AddCost
// (the middleware puts a ratelimit.Meter in the request context), and
// httpverdict.CountStatus counts only some outcomes, such as failed logins.
// Both are peeked before the handler, so callers already over the limit are
// rejected without running it.
//
// # Fail-open
//
// A limiter whose check fails (its store down or slow) lets the request
// through and never blocks it; it contributes no rate-limit headers. The
// headers come from the limiters whose check succeeded, and a healthy limiter
// still blocks beside a failed one. When every check failed, the response
// carries no rate-limit headers, since there is nothing true to say. The rule
// is ratelimit.Decision's, so the gRPC and asynq adapters follow it too.
package ratelimithttp
