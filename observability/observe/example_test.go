package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

func exampleLimiter(obs func(context.Context, ratelimit.Event)) *ratelimit.Limiter {
	l, err := ratelimit.New(ratelimit.Config{
		Name:  "http_request",
		Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{
			Name:            "api_by_user",
			Characteristics: []string{"user"},
			Limit:           2,
			Period:          time.Minute,
		}},
		Observer: obs,
	})
	if err != nil {
		panic(err)
	}
	return l
}

func ExampleMetrics() {
	metrics := observe.NewMetrics(observe.MetricsOptions{Namespace: observe.LabkitNamespace})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics) // serve it with promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	limiter := exampleLimiter(metrics.Observe)
	for range 3 {
		limiter.Check(context.Background(), ratelimit.Identifier{"user": "alice"})
	}
	out, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "gitlab_labkit_rate_limiter_rule_evaluations_total")
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, "#") {
			fmt.Println(line)
		}
	}
	// Output:
	// gitlab_labkit_rate_limiter_rule_evaluations_total{action="limit",rate_limiter="http_request",result="allow",rule="api_by_user"} 2
	// gitlab_labkit_rate_limiter_rule_evaluations_total{action="limit",rate_limiter="http_request",result="block",rule="api_by_user"} 1
}

func ExampleBlockSummary() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // deterministic output
			}
			return a
		},
	}))
	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: logger, Interval: time.Minute})
	// In a service: go blocks.Run(ctx)
	limiter := exampleLimiter(blocks.Observe)
	for range 5 {
		limiter.Check(context.Background(), ratelimit.Identifier{"user": "mallory"})
	}
	blocks.Flush(context.Background())
	// Output:
	// level=INFO msg=rate_limit_block_summary limiter=http_request rule=api_by_user block_count=3
}

func ExampleTracing() {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	limiter := exampleLimiter(observe.NewTracing().Observe)

	ctx, span := tp.Tracer("server").Start(context.Background(), "GET /api/v4/user")
	limiter.Check(ctx, ratelimit.Identifier{"user": "alice"})
	span.End()

	for _, kv := range exporter.GetSpans()[0].Attributes {
		fmt.Printf("%s=%s\n", kv.Key, kv.Value.String())
	}
	// Output:
	// ratelimit.limiter=http_request
	// ratelimit.operation=check
	// ratelimit.action=allow
	// ratelimit.matched=true
	// ratelimit.exceeded=false
	// ratelimit.rule=api_by_user
	// ratelimit.rule.action=limit
	// ratelimit.limit=2
	// ratelimit.count=1
	// ratelimit.remaining=1
	// ratelimit.period_s=60
}
