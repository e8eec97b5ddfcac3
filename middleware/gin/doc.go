// Package ratelimitgin is the Gin rate-limit middleware.
//
//	r := gin.New()
//	r.Use(ratelimitgin.Middleware(limiter)) // before registering routes
//	r.GET("/users/:id", handler)
//
// For each request it builds an identifier (ip, method, path, endpoint, user),
// checks it against each limiter, and either calls c.Next or aborts with 429,
// rate-limit headers, Retry-After (none for a request that can never pass,
// blocked by its cost alone: ratelimit.Info.Never) and an
// application/problem+json body (rendered by ratelimitheaders; see its
// documentation for header profiles).
// Headers are set before the abort, and the middleware returns right after
// it, so no later handler runs.
//
// Call r.Use before registering routes: Gin copies the middleware into each
// route's chain when the route is registered. The endpoint property is
// "METHOD " + c.FullPath() (e.g. "GET /users/:id"); requests that match no
// route get identifiers.Unmatched. The path property is the request's
// decoded path (URL.Path) or, for a request served by a static route, the
// route's path: the one Gin routed on, whatever form the request's took (an
// engine with RemoveExtraSlash serves //api/x from /api/x). An engine with
// UseRawPath or UseEscapedPath routes on the escaped path, which for a
// parameter or wildcard route the middleware cannot tell from the decoded
// one (/%68ealthz served by /:code has the path /healthz): on such an
// engine, match those routes by endpoint, not path.
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
// # Client IP
//
// The ip property is the socket peer, resolved through WithTrustedProxies (an
// IPv6 peer as its /64 network, WithIPv6Prefix sets another length; ip_full
// holds the whole address, see identifiers.SetIP):
// forwarding headers are believed only from proxies listed there, and the
// first request that carries one from another peer is logged once (slog's
// default logger), since behind a proxy not listed every client would share
// the proxy's bucket. The
// middleware does not call c.ClientIP() by default, because Gin's default
// engine trusts every proxy, so any client could pick its own rate-limit
// bucket with an X-Forwarded-For header. If your service has configured
// engine.SetTrustedProxies (or TrustedPlatform), WithGinClientIP(engine)
// makes the middleware use c.ClientIP() instead. Middleware checks the engine
// when it is called (configure the engine first): it panics if c.ClientIP()
// believes a forwarding header (engine.RemoteIPHeaders) from an arbitrary
// peer, as Gin's default engine does. A TrustedPlatform header of another
// name (CF-Connecting-IP) is the service's choice and is not checked: set it
// only when every request comes through that platform.
//
// # Cost and outcome hooks
//
// WithDeferred adds limiters charged after the handler (Metered,
// CountStatus) and peeked before it. The middleware puts an
// adapter.Meter in the request context (c.Request.Context()) for
// adapter.AddCost; the outcome hooks see c.Writer.Status() after c.Next, or
// 500 when a handler panicked (it is still charged, before the panic goes on
// to gin.Recovery).
// Pass c.Request.Context() to code that adds costs: c itself reaches the
// request context's values only when the engine's ContextWithFallback is
// true, and a cost added through c is otherwise lost, unseen.
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
package ratelimitgin
