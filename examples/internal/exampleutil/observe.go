package exampleutil

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/pages/debug"
)

// Observability is what every example exposes next to its service:
// Prometheus metrics at /metrics and the rate-limit debug page at
// /debug/ratelimit, fed by the limiters' Observer.
type Observability struct {
	Registry *prometheus.Registry
	Metrics  *observe.Metrics
	Blocks   *observe.BlockSummary
	// Tiers, when the example binds its limiters to a rule store, shows
	// their rule tiers on the debug page (set it before Mount).
	Tiers debug.TierSource
	// AllowedHosts are the Host names /metrics and /debug/ratelimit answer
	// to besides the default (on a loopback listener: localhost, 127.0.0.1,
	// [::1]; on another, any), the DNS-rebinding defence of
	// debug.Options.AllowedHosts, applied alike to both (set it before Mount).
	AllowedHosts []string

	tracing *observe.Tracing // set by StartOTel when OpenTelemetry is configured
}

// NewObservability returns metrics registered on a fresh registry and a block
// summary. Call Run to log the periodic block summary.
func NewObservability() *Observability {
	o := &Observability{
		Registry: prometheus.NewRegistry(),
		Metrics:  observe.NewMetrics(observe.MetricsOptions{}),
		Blocks:   observe.NewBlockSummary(observe.BlockSummaryOptions{}),
	}
	// The process's own series too (go_goroutines, process_open_fds): in an
	// outage drill they show whether the example leaks as Redis comes and
	// goes, as the template's and ratekit-envoy's do.
	o.Registry.MustRegister(o.Metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return o
}

// Observer is the Config.Observer of the example's limiters: metrics, the
// block summary and, after StartOTel, tracing.
func (o *Observability) Observer() func(context.Context, ratelimit.Event) {
	if o.tracing != nil {
		return observe.Multi(o.Metrics, o.Blocks, o.tracing)
	}
	return observe.Multi(o.Metrics, o.Blocks)
}

// Run logs the block summary on its interval until ctx ends.
func (o *Observability) Run(ctx context.Context) { o.Blocks.Run(ctx) }

// Mount serves /metrics and /debug/ratelimit for limiters on mux, both
// behind the same Host check (AllowedHosts): a rebound page reads neither the
// rules nor the limiters' names and counts.
func (o *Observability) Mount(mux *http.ServeMux, limiters ...*ratelimit.Limiter) {
	for _, l := range limiters {
		o.Metrics.Init(l)
	}
	mux.Handle("GET /metrics", httpguard.CheckHost(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}), o.AllowedHosts, "the example's Observability.AllowedHosts"))
	mux.Handle("GET /debug/ratelimit", debug.New(debug.Options{Blocks: o.Blocks, Tiers: o.Tiers, AllowedHosts: o.AllowedHosts}, limiters...))
}

// Observed checks an example's /metrics and /debug/ratelimit at url after
// five allowed checks and one block of rule: counted and shown.
func Observed(t testing.TB, url, limiter, rule string) {
	t.Helper()
	metrics := get(t, url+"/metrics")
	for _, want := range []string{
		`ratelimit_checks_total{action="allow",error="false",matched="true",rate_limiter="` + limiter + `"} 5`,
		`ratelimit_checks_total{action="block",error="false",matched="true",rate_limiter="` + limiter + `"} 1`,
		`ratelimit_rule_evaluations_total{action="limit",rate_limiter="` + limiter + `",result="block",rule="` + rule + `"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	page := get(t, url+"/debug/ratelimit?format=json")
	for _, want := range []string{`"` + limiter + `"`, `"` + rule + `"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/debug/ratelimit lacks %s:\n%s", want, page)
		}
	}
}

// NotServed checks that the public listener at url serves neither /metrics,
// /debug/ratelimit nor the admin page: they belong on the internal listener.
func NotServed(t testing.TB, url string) {
	t.Helper()
	for _, path := range []string{"/metrics", "/debug/ratelimit", "/debug/ratelimit?format=json", "/admin/ratelimit/"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(b), "ratelimit_") || strings.Contains(string(b), "hello_per_ip") {
			t.Errorf("public GET %s: %d %.200q, want 404 without metrics or rules", path, resp.StatusCode, b)
		}
	}
}

// HeadersBounded checks that the server at url refuses a request whose
// headers pass httpguard.MaxHeaderBytes (431), as every ratekit listener
// does, rather than read up to net/http's default of 1 MiB.
func HeadersBounded(t testing.TB, url string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Padding", strings.Repeat("a", 4*httpguard.MaxHeaderBytes))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET %s with %d bytes of headers: %d, want 431 (httpguard.MaxHeaderBytes is %d)", url, 4*httpguard.MaxHeaderBytes, resp.StatusCode, httpguard.MaxHeaderBytes)
	}
}

func get(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}
