package observe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Span attribute keys set by Tracing. No rate-limiting semantic convention
// exists, so they live in their own ratelimit.* namespace (snake_case inside
// it, as OpenTelemetry's naming guide asks). ErrorType is the semconv key.
const (
	AttrLimiter        = attribute.Key("ratelimit.limiter")         // limiter name
	AttrOperation      = attribute.Key("ratelimit.operation")       // check | peek
	AttrAction         = attribute.Key("ratelimit.action")          // allow | block
	AttrMatched        = attribute.Key("ratelimit.matched")         // some rule applied
	AttrExceeded       = attribute.Key("ratelimit.exceeded")        // some rule (shadow included) exceeded
	AttrRule           = attribute.Key("ratelimit.rule")            // the most constraining rule
	AttrRuleAction     = attribute.Key("ratelimit.rule.action")     // its configured action: limit | log | skip
	AttrLimit          = attribute.Key("ratelimit.limit")           // its resolved limit
	AttrCount          = attribute.Key("ratelimit.count")           // its count after this check
	AttrRemaining      = attribute.Key("ratelimit.remaining")       // its remaining budget
	AttrPeriod         = attribute.Key("ratelimit.period_s")        // its resolved period, seconds
	AttrBanned         = attribute.Key("ratelimit.banned")          // a ban is active on it
	AttrShadowExceeded = attribute.Key("ratelimit.shadow_exceeded") // exceeded log (shadow) rules
	AttrSkipped        = attribute.Key("ratelimit.skipped")         // a skip rule ended the evaluation
	AttrDegraded       = attribute.Key("ratelimit.degraded")        // rules were left out (Result.Degraded)
	AttrErrorType      = attribute.Key("error.type")                // set only when the check failed open
)

// Tracing is an Observer that puts each Check and Peek decision on the
// caller's current span, as attributes (OpenTelemetry plans to deprecate span
// events in favour of attributes). A blocked request is not a span error, just
// as HTTP server spans leave a 429 unset; a check that failed open (store down,
// timeout, open breaker, resolver error) sets error.type and status Error.
//
// When one request runs several checks, the span holds the last one; use
// WithSpans to record each check as its own child span as well.
type Tracing struct {
	tracer trace.Tracer
}

var _ Observer = (*Tracing)(nil)

// TracingOption configures NewTracing.
type TracingOption func(*Tracing)

// WithSpans also records every check and peek as a child span of the caller's
// span ("ratelimit.check" / "ratelimit.peek", kind internal), timed from the
// event's duration and carrying the same attributes.
func WithSpans(tp trace.TracerProvider) TracingOption {
	return func(t *Tracing) {
		if tp != nil {
			t.tracer = tp.Tracer("github.com/ratekit/ratekit/observability/observe")
		}
	}
}

// NewTracing returns the tracing observer.
func NewTracing(opts ...TracingOption) *Tracing {
	t := &Tracing{}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Observe implements Observer.
func (t *Tracing) Observe(ctx context.Context, e ratelimit.Event) {
	if e.Result == nil || e.Kind == ratelimit.EventClear {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() && t.tracer == nil {
		return
	}
	attrs := DecisionAttributes(e)
	var errType, errMsg string
	if err := e.Result.Err; storeFailed(err) {
		errType, errMsg = ErrorType(err), err.Error()
		attrs = append(attrs, AttrErrorType.String(errType))
	}
	mark := func(s trace.Span) {
		s.SetAttributes(attrs...)
		if errType != "" {
			s.SetStatus(codes.Error, errMsg)
		}
	}
	if span.IsRecording() {
		mark(span)
	}
	if t.tracer != nil {
		end := time.Now()
		_, child := t.tracer.Start(ctx, "ratelimit."+e.Kind.String(),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(end.Add(-e.Duration)))
		mark(child)
		child.End(trace.WithTimestamp(end))
	}
}

// DecisionAttributes returns the span attributes describing a check or peek.
func DecisionAttributes(e ratelimit.Event) []attribute.KeyValue {
	r := e.Result
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs,
		AttrLimiter.String(e.Limiter),
		AttrOperation.String(e.Kind.String()),
		AttrAction.String(string(r.Action)),
		AttrMatched.Bool(r.Matched),
		AttrExceeded.Bool(r.Exceeded),
	)
	if r.Rule != nil {
		attrs = append(attrs, AttrRule.String(r.Rule.Name), AttrRuleAction.String(string(r.Rule.Action)))
	}
	if i := r.Info; i != nil {
		attrs = append(attrs,
			AttrLimit.Int64(i.Limit),
			AttrCount.Float64(i.Count),
			AttrRemaining.Float64(i.Remaining),
			AttrPeriod.Float64(i.Period.Seconds()),
		)
		if i.Banned {
			attrs = append(attrs, AttrBanned.Bool(true))
		}
	}
	var shadow []string
	for i := range r.Evaluations {
		if ev := &r.Evaluations[i]; ev.Exceeded && ev.Rule != nil && ev.Shadow() {
			shadow = append(shadow, ev.Rule.Name)
		}
	}
	if len(shadow) > 0 {
		attrs = append(attrs, AttrShadowExceeded.StringSlice(shadow))
	}
	if r.Skipped {
		attrs = append(attrs, AttrSkipped.Bool(true))
	}
	if r.Degraded {
		attrs = append(attrs, AttrDegraded.Bool(true))
	}
	return attrs
}

// ErrorType classifies a fail-open error into a low-cardinality error.type:
// "circuit_open", "timeout", "canceled", else the Go type of the outermost
// error in the chain that is not a plain fmt.Errorf wrapper (for example
// "*net.OpError" or "proto.RedisError"), or "_OTHER" (the semconv fallback)
// when no error in the chain has a telling type.
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ratelimit.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	for ; err != nil; err = errors.Unwrap(err) {
		switch t := fmt.Sprintf("%T", err); t {
		case "*fmt.wrapError", "*fmt.wrapErrors":
		case "*errors.errorString":
			return "_OTHER"
		default:
			return t
		}
	}
	return "_OTHER"
}
