package observe_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// traced runs f inside a recorded "request" span and returns the exported spans.
func traced(t *testing.T, f func(ctx context.Context)) tracetest.SpanStubs {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	f(ctx)
	span.End()
	return exp.GetSpans()
}

func TestTracingAttributes(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			store, prefix := kind.store(t)
			l := newLimiter(t, "api", store, prefix, observe.NewTracing())
			user := ratelimit.Identifier{"ip": "10.0.0.1", "kind": "api", "user": "u1", "path": "/a"}
			login := ratelimit.Identifier{"ip": "10.0.0.3", "kind": "login"}
			for _, tc := range []struct {
				name string
				run  func(ctx context.Context)
				want map[string]string
			}{
				{"allow", func(ctx context.Context) { l.Check(ctx, user) }, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "check", "ratelimit.action": "allow",
					"ratelimit.matched": "true", "ratelimit.exceeded": "false",
					"ratelimit.rule": "shadow_ip", "ratelimit.rule.action": "log", // least remaining
					"ratelimit.limit": "2", "ratelimit.count": "1", "ratelimit.remaining": "1", "ratelimit.period_s": "60",
				}},
				{"block", func(ctx context.Context) {
					for range 3 {
						l.Check(ctx, user)
					}
				}, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "check", "ratelimit.action": "block",
					"ratelimit.matched": "true", "ratelimit.exceeded": "true",
					"ratelimit.rule": "per_user", "ratelimit.rule.action": "limit",
					"ratelimit.limit": "3", "ratelimit.count": "4", "ratelimit.remaining": "0", "ratelimit.period_s": "60",
					"ratelimit.shadow_exceeded": `["shadow_ip"]`,
				}},
				{"peek", func(ctx context.Context) {
					l.Peek(ctx, ratelimit.Identifier{"ip": "10.0.0.7", "kind": "api", "user": "u7"})
				}, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "peek", "ratelimit.action": "allow",
					"ratelimit.matched": "true", "ratelimit.exceeded": "false",
					"ratelimit.rule": "shadow_ip", "ratelimit.rule.action": "log",
					"ratelimit.limit": "2", "ratelimit.count": "0", "ratelimit.remaining": "2", "ratelimit.period_s": "60",
					"ratelimit.degraded": "true", // no path for the count_distinct rule
				}},
				{"skip", func(ctx context.Context) { l.Check(ctx, ratelimit.Identifier{"ip": "127.0.0.1"}) }, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "check", "ratelimit.action": "allow",
					"ratelimit.matched": "true", "ratelimit.exceeded": "false",
					"ratelimit.rule": "trusted", "ratelimit.rule.action": "skip", "ratelimit.skipped": "true",
				}},
				{"banned", func(ctx context.Context) {
					l.Check(ctx, login)
					l.Check(ctx, login)
				}, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "check", "ratelimit.action": "block",
					"ratelimit.matched": "true", "ratelimit.exceeded": "true",
					"ratelimit.rule": "login_ban", "ratelimit.rule.action": "limit", "ratelimit.banned": "true",
					"ratelimit.limit": "1", "ratelimit.count": "2", "ratelimit.remaining": "0", "ratelimit.period_s": "60",
				}},
				{"no match", func(ctx context.Context) { l.Check(ctx, ratelimit.Identifier{"kind": "other"}) }, map[string]string{
					"ratelimit.limiter": "api", "ratelimit.operation": "check", "ratelimit.action": "allow",
					"ratelimit.matched": "false", "ratelimit.exceeded": "false",
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					spans := traced(t, tc.run)
					if len(spans) != 1 {
						t.Fatalf("%d spans, want 1", len(spans))
					}
					if got := attrMap(spans[0].Attributes); !maps.Equal(got, tc.want) {
						t.Fatalf("attributes\n got %v\nwant %v", got, tc.want)
					}
					// A block is a normal outcome, not a span error.
					if st := spans[0].Status; st.Code != codes.Unset {
						t.Fatalf("status = %v, want Unset", st)
					}
				})
			}
		})
	}
}

// A check that fails open marks the span as an error with error.type.
func TestTracingFailOpen(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			l, err := ratelimit.New(ratelimit.Config{Name: "broken", Store: kind.broken(t), Rules: testRules(),
				Observer: observe.NewTracing().Observe, Breaker: ratelimit.BreakerConfig{Failures: 1, Cooldown: time.Hour},
				Logger: discard, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			id := ratelimit.Identifier{"kind": "api", "user": "u1"}
			for _, want := range []string{kind.errType, "circuit_open"} {
				spans := traced(t, func(ctx context.Context) {
					if r := l.Check(ctx, id); r.Err == nil || r.Action != ratelimit.ActionAllow {
						t.Fatalf("check did not fail open: %+v", r)
					}
				})
				got := attrMap(spans[0].Attributes)
				if got["error.type"] != want || got["ratelimit.action"] != "allow" || got["ratelimit.matched"] != "false" {
					t.Fatalf("attributes %v, want error.type %s, action allow, matched false", got, want)
				}
				if st := spans[0].Status; st.Code != codes.Error || st.Description == "" {
					t.Fatalf("status = %+v, want Error with a description", st)
				}
			}
		})
	}
}

func TestTracingWithSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	l := newLimiter(t, "api", ratelimit.NewMemoryStore(), "", observe.NewTracing(observe.WithSpans(tp)))

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	l.Check(ctx, ratelimit.Identifier{"ip": "10.0.0.1", "kind": "login"})
	l.Peek(ctx, ratelimit.Identifier{"ip": "10.0.0.1", "kind": "login"})
	parent.End()

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want check, peek and request", len(spans))
	}
	for i, name := range []string{"ratelimit.check", "ratelimit.peek"} {
		s := spans[i]
		if s.Name != name || s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("span %d = %q with parent %v, want %q under the request span", i, s.Name, s.Parent.SpanID(), name)
		}
		if got := attrMap(s.Attributes); got["ratelimit.rule"] != "login_ban" || got["ratelimit.operation"] != name[len("ratelimit."):] {
			t.Fatalf("%s attributes %v", name, got)
		}
		if !s.StartTime.Before(s.EndTime) && !s.StartTime.Equal(s.EndTime) {
			t.Fatalf("%s starts %v after it ends %v", name, s.StartTime, s.EndTime)
		}
	}
	// The request span holds the last decision (the peek).
	if got := attrMap(spans[2].Attributes); got["ratelimit.operation"] != "peek" {
		t.Fatalf("request span attributes %v", got)
	}
}

// Without a recording span and without WithSpans, tracing does nothing.
func TestTracingNoSpan(t *testing.T) {
	l := newLimiter(t, "api", ratelimit.NewMemoryStore(), "", observe.NewTracing())
	if r := l.Check(context.Background(), ratelimit.Identifier{"kind": "api"}); r.Action != ratelimit.ActionAllow || r.Err != nil {
		t.Fatalf("check = %+v", r)
	}
}

type typedErr struct{}

func (typedErr) Error() string { return "typed" }

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("ratelimit: store check: %w", ratelimit.ErrCircuitOpen), "circuit_open"},
		{fmt.Errorf("ratelimit: store check: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("x: %w", context.Canceled), "canceled"},
		{fmt.Errorf("a: %w", fmt.Errorf("b: %w", typedErr{})), "observe_test.typedErr"},
		{errors.New("plain"), "_OTHER"},
		{fmt.Errorf("store: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), "*net.OpError"},
		{errors.Join(errors.New("a"), errors.New("b")), "*errors.joinError"},
	} {
		if got := observe.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
