package ratelimitgrpc

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Reason (ErrorInfo) tells a rate limit from gRPC's own ResourceExhausted. The
// metadata are WithHeaderProfile's headers, lower-cased; clients whose retry
// policy lists RESOURCE_EXHAUSTED read the pushback trailer (gRFC A6).
const (
	Reason            = "RATE_LIMITED"
	MetadataPolicy    = "ratelimit-policy"
	MetadataRateLimit = "ratelimit"
	MetadataLimit     = "ratelimit-limit"     // ratelimitheaders.Legacy
	MetadataRemaining = "ratelimit-remaining" // ratelimitheaders.Legacy
	MetadataReset     = "ratelimit-reset"     // ratelimitheaders.Legacy: seconds from now
	TrailerPushback   = "grpc-retry-pushback-ms"
)

// Option configures the interceptors.
type Option interface{ apply(*config) }

type optionFunc func(*config)
type set guard.Setting[Outcome] // a setting every adapter offers

func (f optionFunc) apply(c *config) { f(c) }
func (s set) apply(c *config)        { s(&c.Settings) }

type config struct {
	guard.Options[*Call, Outcome]
	deny       DenyFunc
	domain     string
	noPushback bool
	forwarded  guard.ForwardWarning
}

// forwardingMetadata are the keys a proxy names its client in (gRPC
// metadata keys are lower-case): those identifiers.TrustedProxies reads by
// default. The first call that carries one from a peer no trusted proxy
// covers is logged once: behind a proxy nobody listed, every client would
// share the proxy's bucket.
var forwardingMetadata = [...]string{"x-forwarded-for", "forwarded", "x-real-ip"}

// DenyFunc builds the error of a call blocked by res; nil means DenyStatus's.
type DenyFunc func(ctx context.Context, call *Call, res ratelimit.Result) error

// errPanicked is the Err of the Outcome of a handler that panicked, the code
// a recovery interceptor answers.
var errPanicked = status.Error(codes.Internal, "ratelimitgrpc: the handler panicked")

// Outcome is what is known once the handler has returned, or panicked.
type Outcome struct {
	Call  *Call
	Err   error          // the handler's error (codes.Internal if it panicked); status.Code(Err) is the call's code
	Meter *adapter.Meter // the call's cost meter
}

// Deferred is a limiter peeked before the handler and charged after it.
type Deferred = adapter.Deferred[Outcome]

// Metered charges l with the named cost the handler reported (adapter.AddCost).
func Metered(l *ratelimit.Limiter, name string) Deferred { return guard.Metered[Outcome](l, name) }

// CountCodes charges l with 1 per call ending with one of the codes (failed logins).
func CountCodes(l *ratelimit.Limiter, cs ...codes.Code) Deferred {
	cs = slices.Clone(cs)
	return guard.CountWhen(l, func(o Outcome) bool { return slices.Contains(cs, status.Code(o.Err)) })
}

// WithLimiters adds limiters, checked in order until one blocks.
func WithLimiters(l ...*ratelimit.Limiter) Option { return set(guard.WithLimiters[Outcome](l...)) }

// WithDeferred adds limiters charged after the handler (Metered, CountCodes).
func WithDeferred(d ...Deferred) Option { return set(guard.WithDeferred(d...)) }

// WithClock sets the clock (default time.Now), read once per checked call.
func WithClock(now func() time.Time) Option { return set(guard.WithClock[Outcome](now)) }

// WithTrustedProxies sets whose x-forwarded-for, forwarded or x-real-ip is believed (default nobody's).
// The first call that carries one from any other peer is logged once (slog's
// default logger): behind a proxy not listed, every client would share the
// proxy's bucket.
func WithTrustedProxies(tp identifiers.TrustedProxies) Option {
	return set(guard.WithTrustedProxies[Outcome](tp))
}

// WithIPv6Prefix sets the IPv6 prefix of ip (default 64); it panics outside 1..128.
func WithIPv6Prefix(bits int) Option {
	return set(guard.WithIPv6Prefix[Outcome]("ratelimitgrpc", bits))
}

// WithHeaderProfile selects the rate-limit metadata (default IETF).
func WithHeaderProfile(p ratelimitheaders.Profile) Option {
	return set(guard.WithProfile[Outcome](p))
}

// WithRetryJitter adds up to max (whole seconds) to a blocked call's retry delay.
func WithRetryJitter(max time.Duration) Option {
	return set(guard.WithRetryAfterJitter[Outcome](max))
}

// WithIdentifier replaces DefaultIdentifier.
func WithIdentifier(f func(ctx context.Context, call *Call) ratelimit.Identifier) Option {
	return optionFunc(func(c *config) { c.Identify = f })
}

// WithProperties adds or replaces properties of the built identifier (a user).
func WithProperties(f func(ctx context.Context, call *Call, id ratelimit.Identifier)) Option {
	return optionFunc(func(c *config) { c.Properties = f })
}

// WithSkip exempts the calls for which f returns true (see SkipMethods).
func WithSkip(f func(ctx context.Context, call *Call) bool) Option {
	return optionFunc(func(c *config) { c.Skip = f })
}

// WithCost sets what a call costs the limiters (default 1; 0 checks without counting).
func WithCost(f func(ctx context.Context, call *Call) float64) Option {
	return optionFunc(func(c *config) { c.Cost = f })
}

// WithDenyHandler sets how the error of a blocked call is built.
func WithDenyHandler(f DenyFunc) Option { return optionFunc(func(c *config) { c.deny = f }) }

// WithDomain sets the ErrorInfo domain (default the called service).
func WithDomain(domain string) Option { return optionFunc(func(c *config) { c.domain = domain }) }

// WithoutMetadata is WithHeaderProfile(ratelimitheaders.None).
func WithoutMetadata() Option { return WithHeaderProfile(ratelimitheaders.None) }

// WithoutPushback stops the grpc-retry-pushback-ms trailer.
func WithoutPushback() Option { return optionFunc(func(c *config) { c.noPushback = true }) }

// UnaryServerInterceptor checks limiter (and WithLimiters') before each unary
// call; a blocked call gets DenyStatus's error. limiter may be nil when
// options give them all (WithLimiters, WithDeferred); no limiter at all, a nil
// limiter in WithLimiters, or a Deferred without Limiter or Charge, panics
// here.
func UnaryServerInterceptor(limiter *ratelimit.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	c := newConfig(limiter, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var resp any
		err := c.serve(ctx, info.FullMethod, false,
			func(md metadata.MD) { _ = grpc.SetHeader(ctx, md) }, // fails only once headers are sent: no handler has run
			func(md metadata.MD) { _ = grpc.SetTrailer(ctx, md) },
			func(ctx context.Context) (err error) {
				resp, err = handler(ctx, req)
				return err
			})
		return resp, err
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams, checked once.
func StreamServerInterceptor(limiter *ratelimit.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	c := newConfig(limiter, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		return c.serve(ctx, info.FullMethod, true, func(md metadata.MD) { _ = ss.SetHeader(md) }, ss.SetTrailer,
			func(hctx context.Context) error {
				if hctx != ctx { // a cost meter was added
					ss = &meteredStream{ServerStream: ss, ctx: hctx}
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

func newConfig(limiter *ratelimit.Limiter, opts []Option) *config {
	c := &config{}
	if limiter != nil {
		c.Limiters = []*ratelimit.Limiter{limiter}
	}
	for _, o := range opts {
		o.apply(c)
	}
	c.Init("ratelimitgrpc", func(_ context.Context, call *Call) ratelimit.Identifier { return DefaultIdentifier(call) })
	c.Panicked = func(ctx context.Context, call *Call) Outcome {
		return Outcome{Call: call, Err: errPanicked, Meter: adapter.MeterFrom(ctx)}
	}
	return c
}

func (c *config) serve(ctx context.Context, fullMethod string, stream bool, setHeader, setTrailer func(metadata.MD),
	handler func(ctx context.Context) error) error {
	call := &Call{FullMethod: fullMethod, Stream: stream, IPv6Prefix: c.IPv6Prefix}
	call.Service, call.Method = splitMethod(fullMethod)
	if p, ok := peer.FromContext(ctx); ok {
		call.Peer = identifiers.AddrFromNet(p.Addr)
	}
	call.Metadata, _ = metadata.FromIncomingContext(ctx)
	if !c.forwarded.Logged() {
		for _, h := range forwardingMetadata {
			if len(call.Metadata[h]) > 0 {
				c.forwarded.Untrusted("ratelimitgrpc", "WithTrustedProxies", h, call.Peer, c.TrustedProxies)
				break
			}
		}
	}
	call.ClientIP = c.TrustedProxies.ClientIP(call.Peer, call.Metadata.Get)
	return c.Serve(ctx, call, func(ch guard.Checked) {
		if md := c.Profile.Fields(ch.Decision, ch.Now); md != nil {
			setHeader(md)
		}
	}, func(ch guard.Checked, res ratelimit.Result) Outcome {
		retry := guard.Retry(res.RetryAfter(ch.Now), c.RetryAfterJitter)
		if !c.noPushback {
			pushback := strconv.FormatInt(retry.Milliseconds(), 10)
			if res.Info != nil && res.Info.Never {
				pushback = "-1" // no wait helps: a negative pushback says do not retry (gRFC A6)
			}
			setTrailer(metadata.Pairs(TrailerPushback, pushback))
		}
		err := denyStatus(call, res, c.domain, retry).Err()
		if c.deny != nil {
			err = cmp.Or(c.deny(ctx, call, res), err) // nil: the default
		}
		return Outcome{Call: call, Err: err}
	}, func(err error) Outcome {
		return Outcome{Call: call, Err: status.FromContextError(err).Err()} // Canceled, DeadlineExceeded
	}, func(ctx context.Context) Outcome {
		return Outcome{Call: call, Err: handler(ctx), Meter: adapter.MeterFrom(ctx)}
	}).Err
}

// Call describes the RPC being checked; the hooks receive it.
type Call struct {
	FullMethod      string      // "/package.Service/Method"
	Service, Method string      // "package.Service" and "Method"
	Stream          bool        // a streaming RPC, checked once when it opens
	Peer, ClientIP  netip.Addr  // the socket peer's IP; Peer or what a trusted proxy forwarded
	IPv6Prefix      int         // WithIPv6Prefix's (0: default), for identifiers.SetIP
	Metadata        metadata.MD // the incoming metadata; do not modify it
}

// splitMethod splits "/pkg.Service/Method" into its service and method.
func splitMethod(full string) (service, method string) {
	s := strings.TrimPrefix(full, "/")
	i := strings.LastIndexByte(s, '/') // -1 without a service
	return s[:max(i, 0)], s[i+1:]
}

// DefaultIdentifier holds ip and ip_full (identifiers.SetIP), grpc_service,
// grpc_method and endpoint (the full method) and user = identifiers.Anonymous.
func DefaultIdentifier(call *Call) ratelimit.Identifier {
	id := ratelimit.Identifier{identifiers.GRPCService: call.Service, identifiers.GRPCMethod: call.FullMethod,
		identifiers.Endpoint: call.FullMethod, identifiers.User: identifiers.Anonymous}
	identifiers.SetIP(id, call.ClientIP, call.IPv6Prefix)
	return id
}

// SkipMethods exempts full methods ("/grpc.health.v1.Health/Check") from
// checks. A service's every method (the health service has Check, List and
// Watch) is exempt with WithSkip and a test of Call.Service.
func SkipMethods(fullMethods ...string) func(ctx context.Context, call *Call) bool {
	fullMethods = slices.Clone(fullMethods)
	return func(_ context.Context, call *Call) bool { return slices.Contains(fullMethods, call.FullMethod) }
}

// DenyStatus is ResourceExhausted with RetryInfo (to res's reset, in whole
// seconds), QuotaFailure and ErrorInfo (Reason, domain or call.Service, limiter,
// rule, limit, period_s, retry_after_s, banned, never): never identifier values.
// A call that can never pass (its cost alone is over the rule:
// ratelimit.Info.Never) gets no RetryInfo nor retry_after_s, never "true" and
// a negative pushback trailer, which tells a client not to retry (gRFC A6).
func DenyStatus(call *Call, res ratelimit.Result, domain string) *status.Status {
	return denyStatus(call, res, domain, res.RetryAfter(time.Now()))
}

// denyStatus is DenyStatus stating retry, the delay with its jitter.
func denyStatus(call *Call, res ratelimit.Result, domain string, retry time.Duration) *status.Status {
	rule, info, what := "", ratelimit.Info{}, "exceeded"
	if res.Rule != nil {
		rule = res.Rule.Name
	}
	if res.Info != nil {
		info = *res.Info
	}
	if info.Banned {
		what = "exceeded, banned"
	}
	meta := map[string]string{
		"limiter": res.Limiter, "rule": rule, "limit": strconv.FormatInt(info.Limit, 10), "banned": strconv.FormatBool(info.Banned),
		"period_s": strconv.FormatFloat(info.Period.Seconds(), 'f', -1, 64), "never": strconv.FormatBool(info.Never),
	}
	msg := fmt.Sprintf("rate limit exceeded: limiter %s, rule %s; retry in %s", res.Limiter, rule, retry)
	var details []protoadapt.MessageV1
	if info.Never {
		// No wait helps: no RetryInfo, which a client would obey forever.
		msg = fmt.Sprintf("rate limit exceeded by the call's cost alone: limiter %s, rule %s; it can never pass, do not retry", res.Limiter, rule)
	} else {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
		meta["retry_after_s"] = strconv.FormatInt(int64(retry/time.Second), 10)
	}
	details = append(details,
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "ratelimit:" + res.Limiter + "/" + rule,
			Description: fmt.Sprintf("rate limit of %d per %s %s (limiter %s, rule %s)", info.Limit, info.Period, what, res.Limiter, rule),
			ApiService:  call.Service, QuotaMetric: res.Limiter, QuotaId: rule, QuotaValue: info.Limit,
		}}},
		&errdetails.ErrorInfo{Reason: Reason, Domain: cmp.Or(domain, call.Service), Metadata: meta},
	)
	st := status.New(codes.ResourceExhausted, msg)
	ds, err := st.WithDetails(details...)
	if err != nil { // cannot happen with these well-formed messages
		return st
	}
	return ds
}
