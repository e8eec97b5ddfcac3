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
// (ratelimitheaders), lower-cased: by default the IETF draft's
// ratelimit-policy and ratelimit (WithHeaderProfile picks another). Shadow
// (log) rules never change a response, and a limiter whose check fails open
// (its store down) never blocks and contributes no metadata (see
// ratelimitheaders.Decision).
//
// # Costs
//
// WithDeferred adds limiters charged after the handler: Metered charges what
// the call measured through adapter.AddCost (database seconds; see
// docs/design.md#cost), and CountCodes counts only some outcomes, failed
// logins for example. Both are peeked before the handler, so a caller already
// over budget is rejected without running it.
package ratelimitgrpc
