package exampleutil

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
)

// otlpReceiver is an OTLP/HTTP endpoint on loopback that keeps what the
// exporters send.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   map[string]map[string]string // span name -> its string attributes
	metrics []string                     // metric names
	service []string                     // service.name of every export
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	switch req.URL.Path {
	case "/v1/traces":
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rs := range m.GetResourceSpans() {
			r.service = append(r.service, serviceName(rs.GetResource().GetAttributes()))
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					attrs := map[string]string{}
					for _, kv := range s.GetAttributes() {
						attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
					}
					r.spans[s.GetName()] = attrs
				}
			}
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	case "/v1/metrics":
		var m colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, rm := range m.GetResourceMetrics() {
			r.service = append(r.service, serviceName(rm.GetResource().GetAttributes()))
			for _, sm := range rm.GetScopeMetrics() {
				for _, x := range sm.GetMetrics() {
					r.metrics = append(r.metrics, x.GetName())
				}
			}
		}
		out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		w.Write(out)
	default:
		http.NotFound(w, req)
	}
}

func serviceName(attrs []*commonpb.KeyValue) string {
	for _, kv := range attrs {
		if kv.GetKey() == "service.name" {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, an example's checks reach a real
// OTLP/HTTP endpoint as spans carrying the decision, and its metrics as OTLP
// metrics; without it StartOTel wires nothing.
func TestStartOTel(t *testing.T) {
	for _, c := range []struct {
		name, env, service string // env: OTEL_SERVICE_NAME
	}{
		{name: "default", service: "otel_test"},
		{name: "OTEL_SERVICE_NAME", env: "payments_eu", service: "payments_eu"}, // the standard variables apply
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv("OTEL_SERVICE_NAME", c.env)
			}
			testStartOTel(t, c.service)
		})
	}
}

func testStartOTel(t *testing.T, service string) {
	recv := &otlpReceiver{spans: map[string]map[string]string{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	obs := NewObservability()
	shutdown, err := obs.StartOTel(context.Background(), "otel_test")
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "otel_limiter", Store: ratelimit.NewMemoryStore(), Observer: obs.Observer(),
		Rules: []ratelimit.Rule{{Name: "two", Characteristics: []string{"ip"}, Limit: 2, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	obs.Metrics.Init(l)
	for range 3 {
		l.Check(context.Background(), ratelimit.Identifier{"ip": "192.0.2.1"})
	}
	// Shutdown flushes both exports: nothing here waits on a timer.
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	span, ok := recv.spans["ratelimit.check"]
	if !ok {
		t.Fatalf("no ratelimit.check span exported; got %v", recv.spans)
	}
	if span["ratelimit.limiter"] != "otel_limiter" || span["ratelimit.action"] != "block" || span["ratelimit.rule"] != "two" {
		t.Errorf("span attributes %v, want the last check: limiter otel_limiter, action block, rule two", span)
	}
	if !slices.ContainsFunc(recv.metrics, func(n string) bool { return n == "ratelimit_checks_total" || n == "ratelimit_checks" }) ||
		!slices.Contains(recv.metrics, "ratelimit_breaker_state") {
		t.Errorf("exported metrics %v lack ratelimit_checks_total and ratelimit_breaker_state", recv.metrics)
	}

	if len(recv.service) < 2 || slices.ContainsFunc(recv.service, func(s string) bool { return s != service }) {
		t.Errorf("service.name of the exports: %v, want %s", recv.service, service)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	quiet := NewObservability()
	if _, err := quiet.StartOTel(context.Background(), "otel_test"); err != nil || quiet.tracing != nil {
		t.Errorf("StartOTel without an endpoint: tracing %v, err %v; want nothing wired", quiet.tracing, err)
	}
}
