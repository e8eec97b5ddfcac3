// Package ratelimitgrpc rate-limits gRPC servers with ratekit limiters: a
// unary and a stream server interceptor.
//
//	grpc.NewServer(
//		grpc.ChainUnaryInterceptor(recovery, logging, auth, ratelimitgrpc.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(limiter)),
//	)
//
// Put the rate-limit interceptor after authentication when rules count by
// user. A stream is checked once, when it opens.
//
// # Identifier
//
// DefaultIdentifier gives ip, grpc_service, grpc_method, endpoint (the full
// method: gRPC routes are already templates) and user = "<anonymous>".
// WithProperties adds the caller's principal and anything else the rules need;
// WithIdentifier replaces the identifier, and WithProperties then adds to the
// replacement, the same in every ratekit adapter. The ip is the socket peer's: the
// x-forwarded-for, forwarded and x-real-ip metadata are believed only from
// peers listed with WithTrustedProxies, so a client cannot pick its own IP.
// An IPv6 client's ip is its /64 network ("2001:db8::/64"; WithIPv6Prefix sets
// another length) and ip_full its whole address (identifiers.SetIP).
//
// # Verdict
//
// A blocked call fails with codes.ResourceExhausted and three error details,
// so clients can tell a rate limit from gRPC's own RESOURCE_EXHAUSTED (message
// size, flow control):
//
//   - RetryInfo: the time until the blocking rule resets, in whole seconds,
//     rounded up;
//   - QuotaFailure: one violation naming the limiter (quota_metric) and the
//     rule (quota_id), with the limit (quota_value);
//   - ErrorInfo: reason RATE_LIMITED, a domain (WithDomain; by default the gRPC
//     service) and metadata limiter, rule, limit, period_s, retry_after_s,
//     banned.
//
// No detail carries identifier values. The grpc-retry-pushback-ms trailer
// repeats the delay for clients whose retry policy lists RESOURCE_EXHAUSTED.
// Allowed and blocked calls carry the rate-limit header metadata of the most
// constraining enforcing rule, in the HTTP adapters' header profiles
// (ratelimithttp), lower-cased: by default the IETF draft's
// ratelimit-policy ("rule";q=limit;w=window) and ratelimit
// ("rule";r=remaining;t=seconds to reset); WithHeaderProfile(ratelimithttp.Legacy)
// sends ratelimit-limit, ratelimit-remaining and ratelimit-reset instead,
// ratelimithttp.GitLab GitLab's names. Shadow (log) rules never change a
// response.
//
// # Fail-open
//
// A limiter whose check fails (its store down or slow) lets the call through
// and never blocks it; it contributes no rate-limit metadata. The metadata
// comes from the limiters whose check succeeded, and a healthy limiter still
// blocks beside a failed one. When every check failed, the call carries no
// rate-limit metadata, since there is nothing true to say. The rule is
// adapter.Decision's, so the HTTP and asynq adapters follow it too.
//
// # Several limiters, skipping, costs
//
// WithLimiters adds limiters checked in order (a general one and one for
// protected methods, say); the first to block rejects the call. WithSkip (with
// SkipMethods) exempts calls such as health checks. WithCost weighs methods.
// WithClock sets the clock the metadata, RetryInfo and pushback are computed
// with, read once per call. WithDeferred adds limiters charged after the
// handler: Metered charges what the call measured through adapter.AddCost
// (database seconds; see docs/design.md#cost), and CountCodes counts only
// some outcomes, failed logins for example.
// Both are peeked before the handler, so a caller already over budget is
// rejected without running it.
package ratelimitgrpc
