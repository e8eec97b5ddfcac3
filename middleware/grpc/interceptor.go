package ratelimitgrpc

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	ratelimit "github.com/ratekit/ratekit/core"
)

// UnaryServerInterceptor returns an interceptor that checks limiter (and those
// added with WithLimiters) before each unary call. A blocked call gets
// DenyStatus (codes.ResourceExhausted with RetryInfo, QuotaFailure and
// ErrorInfo) without reaching the handler. Chain it with grpc.ChainUnaryInterceptor,
// after recovery, logging and auth interceptors:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(limiter)))
//
// A check that fails open (store down) lets the call through and sends no
// rate-limit metadata. Shadow (log) rules never change the response. It panics
// if a limiter is nil: a programming error found at start-up.
func UnaryServerInterceptor(limiter *ratelimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(limiter, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call := newCall(ctx, info.FullMethod, false, c.proxies)
		if c.skip != nil && c.skip(ctx, call) {
			return handler(ctx, req)
		}
		v := c.before(ctx, call)
		if v.header != nil {
			_ = grpc.SetHeader(ctx, v.header) // fails only if headers were sent, which no handler has done yet
		}
		if v.blocked != nil {
			if !c.noPushback {
				_ = grpc.SetTrailer(ctx, pushback(*v.blocked, v.now))
			}
			return nil, c.denyErr(ctx, call, *v.blocked, v.now)
		}
		if len(c.deferred) == 0 {
			return handler(ctx, req)
		}
		ctx, m := ratelimit.WithMeter(ctx)
		resp, err := handler(ctx, req)
		c.after(ctx, call, v.id, m, err)
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
		call := newCall(ctx, info.FullMethod, true, c.proxies)
		if c.skip != nil && c.skip(ctx, call) {
			return handler(srv, ss)
		}
		v := c.before(ctx, call)
		if v.header != nil {
			_ = ss.SetHeader(v.header)
		}
		if v.blocked != nil {
			if !c.noPushback {
				ss.SetTrailer(pushback(*v.blocked, v.now))
			}
			return c.denyErr(ctx, call, *v.blocked, v.now)
		}
		if len(c.deferred) == 0 {
			return handler(srv, ss)
		}
		ctx, m := ratelimit.WithMeter(ctx)
		err := handler(srv, &meteredStream{ServerStream: ss, ctx: ctx})
		c.after(ctx, call, v.id, m, err)
		return err
	}
}

// meteredStream gives the handler a context that carries the call's meter.
type meteredStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *meteredStream) Context() context.Context { return s.ctx }

type verdict struct {
	id      ratelimit.Identifier
	blocked *ratelimit.Result
	header  metadata.MD
	now     time.Time
}

// before runs every check that precedes the handler.
func (c *config) before(ctx context.Context, call *Call) verdict {
	var id ratelimit.Identifier
	if c.identify != nil {
		id = c.identify(ctx, call)
	} else {
		id = DefaultIdentifier(call)
	}
	if c.properties != nil {
		if id == nil {
			id = ratelimit.Identifier{}
		}
		c.properties(ctx, call, id)
	}
	var opts []ratelimit.CheckOption
	if c.cost != nil {
		opts = append(opts, ratelimit.Cost(c.cost(ctx, call)))
	}
	v := verdict{id: id}
	// Peeks first: they count nothing, so a call they reject is not charged
	// to the counting limiters.
	for _, d := range c.deferred {
		if res := d.Limiter.Peek(ctx, id, ratelimit.Cost(d.PeekCost)); res.Blocked() {
			return c.block(v, res)
		}
	}
	var best *ratelimit.Evaluation
	failed := false
	for _, l := range c.limiters {
		res := l.Check(ctx, id, opts...)
		if res.Blocked() {
			return c.block(v, res)
		}
		failed = failed || res.Failed()
		if e := res.Enforcing(); e != nil && (best == nil || e.Info.Remaining < best.Info.Remaining) {
			best = e
		}
	}
	v.now = time.Now()
	if !failed && !c.noMetadata { // a failed check knows nothing: say nothing rather than something wrong
		v.header = rateMetadata(best, v.now)
	}
	return v
}

func (c *config) block(v verdict, res ratelimit.Result) verdict {
	v.blocked, v.now = &res, time.Now()
	if !c.noMetadata {
		v.header = rateMetadata(res.Enforcing(), v.now)
	}
	return v
}

func (c *config) denyErr(ctx context.Context, call *Call, res ratelimit.Result, now time.Time) error {
	if c.deny != nil {
		if err := c.deny(ctx, call, res); err != nil {
			return err
		}
	}
	return denyStatus(call, res, c.domain, now).Err()
}

// after charges the deferred limiters with what the call cost. The call is
// over (or the client gone), but the resources were spent: count them
// regardless.
func (c *config) after(ctx context.Context, call *Call, id ratelimit.Identifier, m *ratelimit.Meter, err error) {
	ctx = context.WithoutCancel(ctx)
	o := Outcome{Call: call, Err: err, Meter: m}
	for _, d := range c.deferred {
		if cost, ok := d.Charge(ctx, o); ok && cost > 0 {
			d.Limiter.Check(ctx, id, ratelimit.Cost(cost))
		}
	}
}
