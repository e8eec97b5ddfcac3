package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/promtest"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/observability/observe"
)

// rolloutService is a service under rollout: two limiters in shadow mode
// (memory store), their decisions compared with a legacy check and counted
// by the real collector, served on a real /metrics endpoint.
type rolloutService struct {
	metrics  *observe.RolloutMetrics
	rollouts map[string]*rollout.Rollout
	srv      *httptest.Server
}

func newRolloutService(t *testing.T) *rolloutService {
	t.Helper()
	s := &rolloutService{metrics: observe.NewRolloutMetrics(observe.MetricsOptions{}), rollouts: map[string]*rollout.Rollout{}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.metrics)
	for _, name := range []string{"checkout", "search"} {
		l, err := ratelimit.New(ratelimit.Config{
			Name: name, Store: ratelimit.NewMemoryStore(), Enforcement: ratelimit.Shadow,
			Rules: []ratelimit.Rule{{
				Name: name + "_per_user", Characteristics: []string{"user"}, Action: ratelimit.ActionLimit,
				Limit: 1 << 40, Period: time.Hour,
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		s.metrics.Init(l)
		s.rollouts[name] = rollout.New(l, s.metrics)
	}
	s.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(s.srv.Close)
	return s
}

// decide runs n real checks of limiter; the legacy check blocks the first
// divergent of them (the new limiter, far under its limit, allows all).
func (s *rolloutService) decide(t *testing.T, limiter string, n, divergent int) {
	t.Helper()
	for i := 0; i < n; i++ {
		d := s.rollouts[limiter].Check(context.Background(), ratelimit.Identifier{"user": fmt.Sprint("u", i%7)}, i < divergent)
		if d.Result.Err != nil {
			t.Fatal(d.Result.Err)
		}
	}
}

type gateJSON struct {
	Pass     bool `json:"pass"`
	Limiters []struct {
		Limiter string         `json:"limiter"`
		Counts  rollout.Counts `json:"counts"`
		Ratio   float64        `json:"divergence_ratio"`
		Pass    bool           `json:"pass"`
		Reason  string         `json:"reason"`
		Rules   []struct {
			Rule string `json:"rule"`
		} `json:"rules"`
	} `json:"limiters"`
}

func parseGate(t *testing.T, stdout string) gateJSON {
	t.Helper()
	var g gateJSON
	if err := json.Unmarshal([]byte(stdout), &g); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	return g
}

// TestRolloutGateMetrics runs the built binary against a real /metrics
// endpoint and a saved scrape: checkout (0.2 % divergent over 2000) passes,
// search (1 % over 1000) fails, and the exit code says so.
func TestRolloutGateMetrics(t *testing.T) {
	s := newRolloutService(t)
	s.decide(t, "checkout", 2000, 4)
	s.decide(t, "search", 1000, 10)
	dir := t.TempDir()

	code, stdout, stderr := ratekit(t, dir, "rollout", "gate", "--metrics", s.srv.URL)
	if code != exitInvalid {
		t.Fatalf("exit %d, want 1 (search fails)\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{
		`(?m)^checkout\s+2000\s+4\s+0\.200%\s+0\s+PASS$`,
		`(?m)^search\s+1000\s+10\s+1\.000%\s+0\s+FAIL: divergence at or above the threshold$`,
		`(?m)^  rule search_per_user\s+10\s+new_only 0, legacy_only 10$`,
		`since each process started`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("output does not match %s:\n%s", want, stdout)
		}
	}

	if code, stdout, stderr := ratekit(t, dir, "rollout", "gate", "--metrics", s.srv.URL, "--limiter", "checkout"); code != exitOK || !strings.Contains(stdout, "PASS") {
		t.Fatalf("--limiter checkout: exit %d\n%s%s", code, stdout, stderr)
	}

	// A saved scrape and the live endpoint are summed: two processes.
	resp, err := http.Get(s.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	scrape := filepath.Join(dir, "metrics.txt")
	f, _ := os.Create(scrape)
	if _, err := f.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	f.Close()
	resp.Body.Close()
	code, stdout, _ = ratekit(t, dir, "rollout", "gate", "--metrics", scrape, "--metrics", s.srv.URL, "--json", "--max-divergence", "0.02")
	g := parseGate(t, stdout)
	if code != exitOK || !g.Pass || len(g.Limiters) != 2 {
		t.Fatalf("exit %d, %+v", code, g)
	}
	if c := g.Limiters[1].Counts; g.Limiters[1].Limiter != "search" || c.Compared() != 2000 || c.LegacyOnly != 20 || g.Limiters[1].Ratio != 0.01 {
		t.Fatalf("summed search: %+v", g.Limiters[1])
	}

	// A named limiter without decisions fails; so does a scrape without any.
	if code, stdout, _ := ratekit(t, dir, "rollout", "gate", "--metrics", scrape, "--limiter", "nothing_here", "--min-decisions", "0"); code != exitInvalid || !strings.Contains(stdout, "no decisions recorded") {
		t.Fatalf("unknown limiter: exit %d\n%s", code, stdout)
	}
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, []byte("# no families\n"), 0o644)
	if code, stdout, _ := ratekit(t, dir, "rollout", "gate", "--metrics", empty); code != exitInvalid || !strings.Contains(stdout, "nothing to judge") {
		t.Fatalf("empty scrape: exit %d\n%s", code, stdout)
	}
	// --json says why too, with an empty list rather than null.
	code, stdout, _ = ratekit(t, dir, "rollout", "gate", "--json", "--metrics", empty)
	var rep struct {
		Pass     bool
		Reason   string
		Limiters []json.RawMessage
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitInvalid || rep.Pass ||
		!strings.Contains(rep.Reason, "nothing to judge") || rep.Limiters == nil || !strings.Contains(stdout, `"limiters": []`) {
		t.Fatalf("empty scrape --json: exit %d, %v\n%s", code, err, stdout)
	}
}

// TestRolloutGateBadInput: what is read is validated like what is written,
// and an unreadable source is a clear exit 2.
func TestRolloutGateBadInput(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"agreement.txt": "# TYPE ratelimit_rollout_decisions_total counter\nratelimit_rollout_decisions_total{rate_limiter=\"x\",rule=\"r\",agreement=\"maybe\"} 3\n",
		"limiter.txt":   "# TYPE ratelimit_rollout_decisions_total counter\nratelimit_rollout_decisions_total{rate_limiter=\"Bad Name\",rule=\"r\",agreement=\"agree\"} 3\n",
		"garbage.txt":   "this is { not metrics\n",
		// Each rule within 2^64 decisions, the limiter's two divergent
		// rules 2^64 together: summed, they wrapped around to none.
		"wrap.txt": "# TYPE ratelimit_rollout_decisions_total counter\n" +
			"ratelimit_rollout_decisions_total{rate_limiter=\"x\",rule=\"a\",agreement=\"agree\"} 1e19\n" +
			"ratelimit_rollout_decisions_total{rate_limiter=\"x\",rule=\"b\",agreement=\"new_only\"} 9223372036854775808\n" +
			"ratelimit_rollout_decisions_total{rate_limiter=\"x\",rule=\"c\",agreement=\"new_only\"} 9223372036854775808\n",
	})
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--metrics", "agreement.txt"}, exitUsage, `unknown agreement "maybe"`},
		{[]string{"--metrics", "limiter.txt"}, exitUsage, `rate_limiter="Bad Name"`},
		{[]string{"--metrics", "garbage.txt"}, exitUsage, "parse garbage.txt"},
		{[]string{"--metrics", "wrap.txt"}, exitUsage, "limiter x: its series count more than 2^64 decisions in all"},
		{[]string{"--metrics", "missing.txt"}, exitUsage, "missing.txt"},
		{[]string{"--metrics", "http://" + redistest.UnusedAddr(t) + "/metrics"}, exitUsage, "fetch http://"},
		{[]string{}, exitUsage, "give either --prometheus or --metrics"},
		{[]string{"--metrics", "a", "--prometheus", "http://x"}, exitUsage, "give either"},
		{[]string{"--metrics", "a", "--max-divergence", "0"}, exitUsage, "--max-divergence"},
		{[]string{"--metrics", "a", "--limiter", "A"}, exitUsage, "--limiter"},
		{[]string{"--metrics", "a", "--timeout", "0s"}, exitUsage, "--timeout must be positive"},
		{[]string{"--prometheus", "ftp://x"}, exitUsage, "not an http(s) URL"},
		{[]string{"--metrics", "a", "--job", "checkout"}, exitUsage, "--job selects the decisions of a Prometheus scrape job"},
		{[]string{"--prometheus", "http://x", "--job", strings.Repeat("j", maxJobBytes+1)}, exitUsage, "--job must be valid UTF-8 of at most 1024 bytes"},
		{[]string{"--prometheus", "http://x", "--job", "\xff"}, exitUsage, "--job must be valid UTF-8"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := ratekit(t, dir, append([]string{"rollout", "gate"}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// EnvPrometheus names the Prometheus server binary (Debian's prometheus
// package) for the gate's query test.
const EnvPrometheus = "RATEKIT_TEST_PROMETHEUS"

func prometheusBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvPrometheus); p != "" {
		bin, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("%s=%s: %v", EnvPrometheus, p, err)
		}
		return bin
	}
	if bin, err := exec.LookPath("prometheus"); err == nil {
		return bin
	}
	t.Skipf("prometheus is not installed and %s is unset: apt-get install -y prometheus", EnvPrometheus)
	return ""
}

// TestRolloutGatePrometheus: a real Prometheus scrapes the service every
// second; decisions made after its first scrape reach the gate through the
// HTTP API's increase() over 24h.
func TestRolloutGatePrometheus(t *testing.T) {
	t.Parallel() // mostly waits for Prometheus to scrape; its own registry, dir and ports
	bin := prometheusBinary(t)
	s := newRolloutService(t)
	dir := t.TempDir()
	target := strings.TrimPrefix(s.srv.URL, "http://")
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: service\n    static_configs: [{targets: [%q]}]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promURL := promtest.Start(t, bin, filepath.Join(dir, "prometheus.yml"))

	query := func(q string) int {
		resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		var pr promResponse
		if json.NewDecoder(resp.Body).Decode(&pr) != nil {
			return 0
		}
		return len(pr.Data.Result)
	}
	waitFor(t, 60*time.Second, "Prometheus to scrape the pre-exported series twice", func() bool {
		return query(`count_over_time(ratelimit_rollout_decisions_total{rate_limiter="search",agreement="agree"}[5m]) >= 2`) > 0
	})
	s.decide(t, "checkout", 2000, 4)
	s.decide(t, "search", 1000, 10)

	var g gateJSON
	var code int
	var stdout, stderr string
	waitFor(t, 60*time.Second, "the gate to see every decision", func() bool {
		code, stdout, stderr = ratekit(t, dir, "rollout", "gate", "--prometheus", promURL, "--json")
		if code == exitUsage {
			t.Fatalf("gate: %s", stderr)
		}
		g = parseGate(t, stdout)
		return len(g.Limiters) == 2 && g.Limiters[0].Counts.Compared() >= 2000 && g.Limiters[1].Counts.Compared() >= 1000
	})
	// increase() extrapolates to the query time alike for every series of
	// the target, so counts may exceed what was made but ratios hold.
	if code != exitInvalid || g.Pass {
		t.Fatalf("exit %d, %+v", code, g)
	}
	checkout, search := g.Limiters[0], g.Limiters[1]
	if checkout.Limiter != "checkout" || !checkout.Pass || checkout.Ratio < 0.0015 || checkout.Ratio > 0.0025 {
		t.Fatalf("checkout: %+v", checkout)
	}
	if search.Limiter != "search" || search.Pass || search.Ratio < 0.009 || search.Ratio > 0.011 || len(search.Rules) != 1 || search.Rules[0].Rule != "search_per_user" {
		t.Fatalf("search: %+v", search)
	}
	code, stdout, _ = ratekit(t, dir, "rollout", "gate", "--prometheus", promURL, "--limiter", "checkout")
	if code != exitOK || !strings.Contains(stdout, "over 24h0m0s") {
		t.Fatalf("checkout alone: exit %d\n%s", code, stdout)
	}
}

// TestRolloutGatePrometheusJobs: three services of one Prometheus all have
// a limiter named checkout, as services made from the copier template all
// have http_request: jobs steady and diverging in namespace prod, and job
// diverging in namespace staging too (one service deployed twice). The
// RatekitRolloutDivergence alert names one job and its namespace; --job and
// --job-namespace judge its decisions alone (1 % divergent: fail), and a gate
// that sums several (0.05 % summed: pass) names them in a warning.
func TestRolloutGatePrometheusJobs(t *testing.T) {
	t.Parallel() // mostly waits for Prometheus to scrape; its own registries, dir and ports
	bin := prometheusBinary(t)
	steady, diverging, staging := newRolloutService(t), newRolloutService(t), newRolloutService(t)
	dir := t.TempDir()
	cfg := "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
	for _, j := range []struct {
		name string
		svcs map[string]*rolloutService // by namespace
	}{
		{"steady", map[string]*rolloutService{"prod": steady}},
		{"diverging", map[string]*rolloutService{"prod": diverging, "staging": staging}},
	} {
		cfg += fmt.Sprintf("  - job_name: %s\n    static_configs:\n", j.name)
		for ns, s := range j.svcs {
			cfg += fmt.Sprintf("      - {targets: [%q], labels: {namespace: %s}}\n", strings.TrimPrefix(s.srv.URL, "http://"), ns)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promURL := promtest.Start(t, bin, filepath.Join(dir, "prometheus.yml"))
	query := func(q string) int {
		resp, err := http.Get(promURL + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		var pr promResponse
		if json.NewDecoder(resp.Body).Decode(&pr) != nil {
			return 0
		}
		return len(pr.Data.Result)
	}
	waitFor(t, 60*time.Second, "Prometheus to scrape the three services' pre-exported series twice", func() bool {
		return query(`count(count by (job, namespace) (count_over_time(ratelimit_rollout_decisions_total{rate_limiter="checkout",agreement="agree"}[5m]) >= 2)) == 3`) == 1
	})
	steady.decide(t, "checkout", 10000, 0)
	diverging.decide(t, "checkout", 1000, 10)
	staging.decide(t, "checkout", 10000, 0)
	// Every decision in Prometheus's latest samples before any gate runs:
	// increase() extrapolates, so a gate could see "every decision" from a
	// scrape made during decide (diverging's 10 divergent of its first 800
	// read 0.0125, not 0.01).
	waitFor(t, 60*time.Second, "Prometheus to scrape every decision", func() bool {
		for _, q := range []string{
			`sum(ratelimit_rollout_decisions_total{rate_limiter="checkout",job="steady"}) >= 10000`,
			`sum(ratelimit_rollout_decisions_total{rate_limiter="checkout",job="diverging",namespace="prod"}) >= 1000`,
			`sum(ratelimit_rollout_decisions_total{rate_limiter="checkout",job="diverging",namespace="staging"}) >= 10000`,
		} {
			if query(q) != 1 {
				return false
			}
		}
		return true
	})

	const summed = "warning: limiter checkout: the decisions of %d jobs are summed (%s): judge the one an alert names with --job JOB --job-namespace NS\n"
	tests := []struct {
		name   string
		args   []string
		code   int
		made   int     // compared decisions made (those of the services judged)
		ratio  float64 // about, of one service; -1 when services are summed (see below)
		stderr string  // "" for none
	}{
		{"the alert's job and namespace", []string{"--job", "diverging", "--job-namespace", "prod"}, exitInvalid, 1000, 0.01, ""},
		{"the other job", []string{"--job", "steady"}, exitOK, 10000, 0, ""},
		{"one job in two namespaces", []string{"--job", "diverging"}, exitOK, 11000, -1,
			fmt.Sprintf(summed, 2, "diverging in namespace prod, diverging in namespace staging")},
		{"every job summed", nil, exitOK, 21000, -1,
			fmt.Sprintf(summed, 3, "diverging in namespace prod, diverging in namespace staging, steady in namespace prod")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gateJSON
			var code int
			var stdout, stderr string
			want := tt.made
			waitFor(t, 60*time.Second, "the gate to see every decision", func() bool {
				args := append([]string{"rollout", "gate", "--prometheus", promURL, "--json", "--limiter", "checkout"}, tt.args...)
				code, stdout, stderr = ratekit(t, dir, args...)
				if code == exitUsage {
					t.Fatalf("gate: %s", stderr)
				}
				g = parseGate(t, stdout)
				return len(g.Limiters) == 1 && g.Limiters[0].Counts.Compared() >= uint64(want)
			})
			// increase() extrapolates: counts may exceed what was made. The
			// series of one service are scraped together, so its ratio
			// holds; several services' are extrapolated apart (14 diverging
			// of 11649 was seen on a loaded machine), so their sum holds at
			// least what was made.
			checkout := g.Limiters[0]
			switch {
			case code != tt.code:
				t.Errorf("exit %d, want %d: %+v", code, tt.code, checkout)
			case tt.ratio >= 0 && (checkout.Ratio < tt.ratio*0.8 || checkout.Ratio > tt.ratio*1.2):
				t.Errorf("checkout's ratio %v, want about %v: %+v", checkout.Ratio, tt.ratio, checkout)
			case tt.ratio < 0 && (checkout.Counts.Agree < uint64(tt.made-10) || checkout.Counts.LegacyOnly < 10):
				t.Errorf("checkout's summed counts %+v, want at least %d agreeing and 10 legacy-only", checkout.Counts, tt.made-10)
			}
			if stderr != tt.stderr {
				t.Errorf("stderr %q, want %q", stderr, tt.stderr)
			}
		})
	}
}

// TestRolloutGatePrometheusErrors: a Prometheus API error answer is reported.
func TestRolloutGatePrometheusErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"parse error"}`)
	}))
	defer srv.Close()
	code, _, stderr := ratekit(t, t.TempDir(), "rollout", "gate", "--prometheus", srv.URL)
	if code != exitUsage || !strings.Contains(stderr, "bad_data: parse error") {
		t.Fatalf("exit %d, %s", code, stderr)
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// A source URL's password appears nowhere: not in an error (url.Parse's
// quotes the whole URL), not in the report of the source judged.
func TestRolloutGateHidesPassword(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			return // no series
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer srv.Close()
	with := strings.Replace(srv.URL, "http://", "http://u:s3cret@", 1)
	unused := "http://u:s3cret@" + redistest.UnusedAddr(t)
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"--prometheus", unused}, exitUsage},
		{[]string{"--prometheus", "http://u:s3cret@127.0.0.1:90x0"}, exitUsage},
		{[]string{"--metrics", unused + "/metrics"}, exitUsage},
		{[]string{"--metrics", "http://u:s3cret@127.0.0.1:90x0/metrics"}, exitUsage},
		{[]string{"--prometheus", with}, exitInvalid},
		{[]string{"--prometheus", with, "--json"}, exitInvalid},
		{[]string{"--metrics", with + "/metrics"}, exitInvalid},
		{[]string{"--metrics", with + "/metrics", "--json"}, exitInvalid},
	} {
		code, stdout, stderr := ratekit(t, t.TempDir(), append([]string{"rollout", "gate"}, tt.args...)...)
		if code != tt.code || strings.Contains(stdout+stderr, "s3cret") {
			t.Errorf("%q: exit %d, want %d without the password:\n%s%s", tt.args, code, tt.code, stdout, stderr)
		}
	}
}

// TestRolloutGateJSONNoDivergentRule: a limiter without a divergent rule has
// "rules": [] in --json, as the limiters are never null (it was null, which
// a script iterating over it fails on).
func TestRolloutGateJSONNoDivergentRule(t *testing.T) {
	dir := writeFiles(t, map[string]string{"agree.txt": "# TYPE ratelimit_rollout_decisions_total counter\n" +
		"ratelimit_rollout_decisions_total{rate_limiter=\"x\",rule=\"a\",agreement=\"agree\"} 5000\n"})
	code, stdout, stderr := ratekit(t, dir, "rollout", "gate", "--json", "--metrics", "agree.txt")
	if code != exitOK || !strings.Contains(stdout, `"rules": []`) {
		t.Fatalf("exit %d, want 0 and \"rules\": []\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}
