package ratelimitgrpc

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Reason is the ErrorInfo reason of rate-limit errors. It tells a rate limit
// apart from the other causes of codes.ResourceExhausted (message size,
// flow control).
const Reason = "RATE_LIMITED"

// Response metadata keys. The rate-limit header metadata is the HTTP
// adapters' headers, lower-cased, in the profile chosen with
// WithHeaderProfile: by default the IETF draft's ratelimit-policy and
// ratelimit; MetadataLimit, MetadataRemaining and MetadataReset (reset in
// seconds from now) with ratelimitheaders.Legacy. They describe the most
// constraining enforcing rule among the limiters whose check succeeded, and
// are sent on allowed and blocked calls, never for shadow (log) rules. The
// pushback trailer is read by gRPC clients whose retry policy lists
// RESOURCE_EXHAUSTED (gRFC A6).
const (
	MetadataPolicy    = "ratelimit-policy"
	MetadataRateLimit = "ratelimit"
	MetadataLimit     = "ratelimit-limit"
	MetadataRemaining = "ratelimit-remaining"
	MetadataReset     = "ratelimit-reset"
	TrailerPushback   = "grpc-retry-pushback-ms"
)

// DenyStatus builds the status of a call blocked by res: ResourceExhausted with
// RetryInfo (the time until the blocking rule resets, rounded up to whole
// seconds), QuotaFailure and ErrorInfo (Reason, domain, and metadata naming
// the limiter and rule). It names limiters and rules, never identifier
// values. An empty domain means call.Service.
func DenyStatus(call *Call, res ratelimit.Result, domain string) *status.Status {
	return denyStatus(call, res, domain, time.Now(), 0)
}

// denyStatus builds the status with extra, the retry jitter, added to the
// delay to the reset.
func denyStatus(call *Call, res ratelimit.Result, domain string, now time.Time, extra time.Duration) *status.Status {
	if domain == "" {
		domain = call.Service
	}
	rule := ""
	if res.Rule != nil {
		rule = res.Rule.Name
	}
	retry := res.Info.RetryAfter(now) + extra // nil-safe
	var info ratelimit.Info
	if res.Info != nil {
		info = *res.Info
	}
	what := "exceeded"
	if info.Banned {
		what = "exceeded, banned"
	}
	desc := fmt.Sprintf("rate limit of %d per %s %s (limiter %s, rule %s)", info.Limit, info.Period, what, res.Limiter, rule)
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit exceeded: limiter %s, rule %s; retry in %s", res.Limiter, rule, retry))
	ds, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "ratelimit:" + res.Limiter + "/" + rule,
			Description: desc,
			ApiService:  call.Service,
			QuotaMetric: res.Limiter,
			QuotaId:     rule,
			QuotaValue:  info.Limit,
		}}},
		&errdetails.ErrorInfo{Reason: Reason, Domain: domain, Metadata: map[string]string{
			"limiter":       res.Limiter,
			"rule":          rule,
			"limit":         strconv.FormatInt(info.Limit, 10),
			"period_s":      strconv.FormatFloat(info.Period.Seconds(), 'f', -1, 64),
			"retry_after_s": strconv.FormatInt(int64(retry/time.Second), 10),
			"banned":        strconv.FormatBool(info.Banned),
		}},
	)
	if err != nil { // cannot happen with these well-formed messages
		return st
	}
	return ds
}

func pushback(res ratelimit.Result, now time.Time, extra time.Duration) metadata.MD {
	return metadata.Pairs(TrailerPushback, strconv.FormatInt((res.Info.RetryAfter(now)+extra).Milliseconds(), 10))
}
