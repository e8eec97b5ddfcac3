// Command observability runs the net/http example with the shipped
// Prometheus rules evaluated against it: a Prometheus (Debian's prometheus
// package, when it is on PATH) scrapes the example's internal listener every
// second and loads observability/prometheus/ratekit.rules.yml, so the
// recorded series and the alerts can be watched live.
//
//	go run ./examples/observability                    # embedded store
//	REDIS_URL=redis://127.0.0.1:6379 go run ./examples/observability
//	# once it logs "Prometheus scrapes the example: send requests now":
//	for i in $(seq 60); do curl -s -o /dev/null localhost:8083/hello; done
//	# then http://localhost:9090/alerts: RatekitHighBlockRatio turns pending
//
// Requests sent before Prometheus's first scrape of the example are in that
// first sample, never in a rate, so they raise no alert: the program says
// when the first scrape has happened.
//
// Without prometheus on PATH it writes the configuration and prints the
// command to run. The package's tests check the rules with promtool and a
// real Prometheus, and that the copier template ships the same files.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/identifiers"
	ratelimithttp "github.com/ratekit/ratekit/middleware/nethttp"
)

func main() {
	addr := flag.String("addr", "localhost:8083", "the example's public listener")
	internal := flag.String("internal-addr", "localhost:9104", "the example's /metrics and /debug/ratelimit")
	promAddr := flag.String("prometheus-addr", "localhost:9090", "where Prometheus listens")
	var checkTimeout time.Duration
	exampleutil.CheckTimeoutFlag(&checkTimeout)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *internal, *promAddr, checkTimeout); err != nil {
		log.Fatal(err)
	}
}

// errPrometheusExited is run's error when Prometheus exits before the
// example stops (its port taken, say): the example stops with it.
var errPrometheusExited = errors.New("prometheus exited")

// run serves the example and its Prometheus until ctx ends; checkTimeout
// bounds each check on Redis (0 for ratelimit.DefaultTimeout).
func run(ctx context.Context, addr, internal, promAddr string, checkTimeout time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	internalc := make(chan net.Addr, 1)
	o := httpexample.Options{Addr: addr, InternalAddr: internal, RedisURL: os.Getenv("REDIS_URL"), CheckTimeout: checkTimeout,
		InternalReady: func(a net.Addr) { internalc <- a }}
	done := make(chan error, 1)
	go func() { done <- httpexample.Run(ctx, "observability", o, newHandler) }()
	var target string
	select {
	case a := <-internalc:
		target = a.String()
	case err := <-done:
		return err
	}
	dir, err := os.MkdirTemp("", "ratekit-observability-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(prometheusConfig(rulesPath(), target)), 0o644); err != nil {
		return err
	}
	args := []string{"--config.file=" + config, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + promAddr}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		log.Printf("observability: prometheus is not on PATH (apt-get install prometheus); run it yourself:\n  prometheus %s", strings.Join(args, " "))
		return <-done
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--log.level=warn")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start prometheus: %w", err)
	}
	log.Printf("observability: Prometheus starting at http://%s/, rules from %s; waiting for its first scrape of the example", promAddr, rulesPath())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	go func() {
		if waitScraped(ctx, promAddr) {
			log.Printf("observability: Prometheus scrapes the example: send requests now (alerts: http://%s/alerts)", promAddr)
		}
	}()
	select {
	case err = <-done: // the example stopped: Prometheus stops with it
		cancel()
		<-exited
		return err
	case perr := <-exited:
		if ctx.Err() != nil { // stopped by the caller: Prometheus was killed
			return <-done
		}
		cancel()
		return errors.Join(fmt.Errorf("%w (listening on %s): %w", errPrometheusExited, promAddr, perr), <-done)
	}
}

// scrapedQuery holds once Prometheus has scraped the example.
const scrapedQuery = `up{job="ratekit_example"} == 1`

// waitScraped polls Prometheus at promAddr until it has scraped the example
// once, and reports whether it has (false: ctx ended first). rate() counts
// from a scrape's sample on: requests sent before the first scrape are in
// that sample, never in a rate, so they raise no alert.
func waitScraped(ctx context.Context, promAddr string) bool {
	u := "http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(scrapedQuery)
	for {
		if scraped(ctx, u) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scraped reports whether the query at u has a result.
func scraped(ctx context.Context, u string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false // not listening yet
	}
	defer resp.Body.Close()
	var r struct {
		Data struct{ Result []json.RawMessage }
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r) == nil && len(r.Data.Result) > 0
}

// rulesPath is the repository's observability/prometheus/ratekit.rules.yml.
func rulesPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "observability", "prometheus", "ratekit.rules.yml")
}

// prometheusConfig scrapes target every second and evaluates rules on the
// same interval (the alerts' `for` durations stay as shipped).
func prometheusConfig(rules, target string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: ratekit_example
    static_configs:
      - targets: [%q]
`, rules, target)
}

// newHandler is the net/http example's: GET /hello behind the middleware.
func newHandler(limiter *ratelimit.Limiter, tp identifiers.TrustedProxies) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	probe := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") }
	mux.HandleFunc("GET /healthz", probe)
	mux.HandleFunc("GET /readyz", probe)
	return ratelimithttp.Middleware(limiter, ratelimithttp.WithMux(mux), ratelimithttp.WithTrustedProxies(tp))(mux), nil
}
