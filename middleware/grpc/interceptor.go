package ratelimitgrpc

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
)

// UnaryServerInterceptor returns an interceptor that checks limiter (and those
// added with WithLimiters) before each unary call. A blocked call gets
// DenyStatus (codes.ResourceExhausted with RetryInfo, QuotaFailure and
// ErrorInfo) without reaching the handler. Chain it with grpc.ChainUnaryInterceptor,
// after recovery, logging and auth interceptors:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(limiter)))
//
// A limiter whose check fails open (store down) never blocks and contributes
// no rate-limit metadata; the other limiters' checks still count. Shadow (log)
// rules never change the response. It panics if a limiter is nil: a
// programming error found at start-up.
func UnaryServerInterceptor(limiter *ratelimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(limiter, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := c.serve(ctx, newCall(ctx, info.FullMethod, false, c.TrustedProxies, c.IPv6Prefix),
			func(md metadata.MD) { _ = grpc.SetHeader(ctx, md) }, // fails only if headers were sent, which no handler has done yet
			func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) },
			func(ctx context.Context) (err error) {
				resp, err = handler(ctx, req)
				return err
			})
		return resp, err
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls. A
// stream is checked once, when it opens, not per message. Chain it with
// grpc.ChainStreamInterceptor.
func StreamServerInterceptor(limiter *ratelimit.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(limiter, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		return c.serve(ctx, newCall(ctx, info.FullMethod, true, c.TrustedProxies, c.IPv6Prefix),
			func(md metadata.MD) { _ = ss.SetHeader(md) },
			ss.SetTrailer,
			func(hctx context.Context) error {
				if hctx != ctx { // a cost meter was added
					return handler(srv, &meteredStream{ServerStream: ss, ctx: hctx})
				}
				return handler(srv, ss)
			})
	}
}

// meteredStream gives the handler a context that carries the call's meter.
type meteredStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *meteredStream) Context() context.Context { return s.ctx }

// serve runs one call through the guard: the checks, the header metadata of
// allowed and blocked calls alike, then the deny error, or the handler and the
// charges of the deferred limiters.
func (c *config) serve(ctx context.Context, call *Call, setHeader, setTrailer func(metadata.MD),
	handler func(ctx context.Context) error) error {
	if c.Skipped(ctx, call) {
		return handler(ctx)
	}
	ch := c.Check(ctx, call)
	if !c.noMetadata {
		if md := c.Profile.Fields(ch.Decision, ch.Now); md != nil {
			setHeader(md)
		}
	}
	if res := ch.Decision.BlockedBy(); res != nil {
		extra := guard.Jitter(c.RetryAfterJitter)
		if !c.noPushback {
			setTrailer(pushback(*res, ch.Now, extra))
		}
		return c.denyErr(ctx, call, *res, ch.Now, extra)
	}
	o := c.Run(ctx, ch.ID, func(ctx context.Context) Outcome {
		return Outcome{Call: call, Err: handler(ctx), Meter: adapter.MeterFrom(ctx)}
	})
	return o.Err
}

func (c *config) denyErr(ctx context.Context, call *Call, res ratelimit.Result, now time.Time, extra time.Duration) error {
	if c.deny != nil {
		if err := c.deny(ctx, call, res); err != nil {
			return err
		}
	}
	return denyStatus(call, res, c.domain, now, extra).Err()
}
