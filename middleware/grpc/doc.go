// Package ratelimitgrpc rate-limits gRPC servers with ratekit limiters: a
// unary and a stream server interceptor, chained after authentication when
// rules count by user.
//
//	grpc.NewServer(
//		grpc.ChainUnaryInterceptor(recovery, logging, auth, ratelimitgrpc.UnaryServerInterceptor(limiter)),
//		grpc.ChainStreamInterceptor(ratelimitgrpc.StreamServerInterceptor(limiter)),
//	)
//
// A blocked call fails with codes.ResourceExhausted, the details of DenyStatus
// and a pushback trailer (negative, do not retry, with no RetryInfo, when the
// call's cost alone is over its rule and it can never pass); every checked
// call carries the HTTP adapters'
// rate-limit headers as metadata. Shadow (log) rules, and limiters whose store
// is down, never block. A call whose caller went away during the checks (its
// context ended, so a check failed open with ratelimit.ErrCanceled, counting
// nothing) does not run the handler, which would otherwise run uncounted: it
// fails with codes.Canceled (DeadlineExceeded when its deadline passed). See
// docs/design.md#cost for WithDeferred.
package ratelimitgrpc
