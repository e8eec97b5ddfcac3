package exampleutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ratekit/ratekit/observability/observe"
)

// OTelEnabled reports whether the standard OpenTelemetry environment asks for
// an OTLP export: OTEL_EXPORTER_OTLP_ENDPOINT (or its _TRACES_ / _METRICS_
// variant) set and OTEL_SDK_DISABLED not true.
func OTelEnabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// StartOTel wires OpenTelemetry when OTelEnabled, and does nothing otherwise:
//
//   - traces: every check and peek becomes a span ("ratelimit.check",
//     observe.Tracing with WithSpans) carrying the decision's attributes, and
//     the attributes also go on the caller's span when one exists;
//   - metrics: the kit's metrics, read from the Prometheus registry through
//     the OpenTelemetry bridge, are pushed over OTLP, for a collector that
//     does not scrape /metrics. The registry stays the one source, so both
//     views agree.
//
// The exporters follow the standard variables (endpoint, headers,
// OTEL_METRIC_EXPORT_INTERVAL, OTEL_BSP_SCHEDULE_DELAY, ...). Call it before
// Observer; shutdown flushes and stops both exports.
func (o *Observability) StartOTel(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !OTelEnabled() {
		return func(context.Context) error { return nil }, nil
	}
	// The service's name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
	// say otherwise: a later detector overrides an earlier one.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	spans, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otel trace exporter: %w", err)
	}
	metrics, err := otlpmetrichttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otel metric exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(
		sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(o.Registry))))))
	o.tracing = observe.NewTracing(observe.WithSpans(tp))
	return func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	}, nil
}
