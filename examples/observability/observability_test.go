package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/examples/internal/exampleutil"
	"github.com/ratekit/ratekit/examples/internal/httpexample"
	"github.com/ratekit/ratekit/internal/promtest"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/internal/testlog"
)

// The binaries of Debian's prometheus package; the test command sets both.
const (
	EnvPrometheus = "RATEKIT_TEST_PROMETHEUS"
	EnvPromtool   = "RATEKIT_TEST_PROMTOOL"
)

// dir is the repository's observability/ directory.
func dir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "observability")
}

func rulesFile(t *testing.T) string {
	return filepath.Join(dir(t), "prometheus", "ratekit.rules.yml")
}

// binary finds a binary of the prometheus package: the one env names, else
// name on PATH, else the test skips (never when env is set).
func binary(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		bin, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("%s=%s: %v", env, p, err)
		}
		return bin
	}
	if bin, err := exec.LookPath(name); err == nil {
		return bin
	}
	t.Skipf("%s is not installed and %s is unset: apt-get install -y prometheus, or run scripts/test.sh, which installs it", name, env)
	return ""
}

// promtool checks the rules and runs their unit tests (ratekit.rules.test.yml).
func TestPromtool(t *testing.T) {
	promtool := binary(t, EnvPromtool, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "ratekit.rules.yml"},
		{"test", "rules", "ratekit.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(dir(t), "prometheus")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every query of the dashboard names only metrics ratekit exports and series
// the rules record, so that no panel stays empty after a rename.
func TestDashboardQueries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(dir(t), "grafana", "ratekit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("ratekit.json: %v", err)
	}
	rules, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- record: (\S+)$`).FindAllStringSubmatch(string(rules), -1) {
		recorded[m[1]] = true
	}
	exported := []string{"ratelimit_checks_total", "ratelimit_rule_evaluations_total", "ratelimit_breaker_state",
		"ratelimit_rule_store_replica_age_seconds", "ratelimit_config_rejected"}
	if dash.UID == "" || len(dash.Panels) < 8 {
		t.Fatalf("dashboard: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	name := regexp.MustCompile(`\bratelimit[:_][a-z0-9_:]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := name.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no ratekit series", p.Title, q.Expr)
			}
			for _, n := range names {
				if !recorded[n] && !slices.Contains(exported, n) {
					t.Errorf("panel %q: %s is neither recorded by the rules nor exported by ratekit", p.Title, n)
				}
			}
		}
	}
}

// A real Prometheus scrapes the net/http example's internal listener (the
// example counting in a private Redis) every second and evaluates the rules:
// after requests over the limit the recorded block series names the rule and
// the block-ratio alert is pending; after the Redis is killed the breaker
// and fail-open alerts are.
func TestPrometheusEvaluatesRules(t *testing.T) {
	prometheus := binary(t, EnvPrometheus, "prometheus")
	redis := redistest.StartServer(t)

	ctx, cancel := context.WithCancel(context.Background())
	publicc, internalc, done := make(chan net.Addr, 1), make(chan net.Addr, 1), make(chan error, 1)
	o := httpexample.Options{Addr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", RedisURL: redis.URL(), CheckTimeout: exampleutil.TestCheckTimeout,
		Ready: func(a net.Addr) { publicc <- a }, InternalReady: func(a net.Addr) { internalc <- a }}
	go func() { done <- httpexample.Run(ctx, "observability", o, newHandler) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("example: %v", err)
		}
	})
	var public, internal string
	select {
	case a := <-publicc:
		public, internal = "http://"+a.String(), (<-internalc).String()
	case err := <-done:
		t.Fatalf("example: %v", err)
	}

	prom := startPrometheus(t, prometheus, internal)
	waitFor(t, prom, "the example's target up", func() bool {
		return len(query(t, prom, `up{job="ratekit_example"} == 1`)) == 1
	})

	// 5 requests pass, 55 are blocked by hello_per_ip: more than the alert's
	// floor of 6 blocks a minute over its 5-minute window.
	for range 60 {
		get(t, public+"/hello")
	}
	waitFor(t, prom, "the recorded blocks of hello_per_ip", func() bool {
		return len(query(t, prom, `ratelimit:blocks:rate5m{rate_limiter="http_request",rule="hello_per_ip"} > 0`)) == 1
	})
	waitFor(t, prom, "alert RatekitHighBlockRatio", func() bool { return alertActive(t, prom, "RatekitHighBlockRatio") })
	if alertActive(t, prom, "RatekitBreakerOpen") || alertActive(t, prom, "RatekitFailingOpen") {
		t.Error("breaker or fail-open alert active while Redis answers")
	}

	// An outage: every check fails open, and the breaker opens.
	redis.Stop()
	waitFor(t, prom, "alerts RatekitBreakerOpen and RatekitFailingOpen", func() bool {
		for range 5 {
			get(t, public+"/hello")
		}
		return alertActive(t, prom, "RatekitBreakerOpen") && alertActive(t, prom, "RatekitFailingOpen")
	})
}

// startPrometheus runs prometheus with the shipped rules, scraping target
// every second, and returns its base URL once it is ready (promtest.Start).
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	rules, err := filepath.Abs(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(config, []byte(prometheusConfig(rules, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	return promtest.Start(t, bin, config)
}

// waitFor polls cond every 500ms for up to 90s: Prometheus scrapes and
// evaluates every second, but the machine may be loaded.
func waitFor(t *testing.T, prom, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 90s; alerts: %s", what, getBody(prom+"/api/v1/alerts"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// query runs an instant PromQL query and returns its samples' labels.
func query(t *testing.T, prom, q string) []map[string]string {
	t.Helper()
	var r struct {
		Status string
		Data   struct {
			Result []struct{ Metric map[string]string }
		}
	}
	if err := json.Unmarshal([]byte(getBody(prom+"/api/v1/query?query="+url.QueryEscape(q))), &r); err != nil || r.Status != "success" {
		return nil
	}
	var out []map[string]string
	for _, s := range r.Data.Result {
		out = append(out, s.Metric)
	}
	return out
}

// alertActive reports whether Prometheus holds alert name as pending or
// firing (the rules' `for` durations are minutes; pending proves the
// expression is true on the real series).
func alertActive(t *testing.T, prom, name string) bool {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string
				State  string
			}
		}
	}
	if err := json.Unmarshal([]byte(getBody(prom+"/api/v1/alerts")), &r); err != nil {
		return false
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["rate_limiter"] == "http_request" && (a.State == "pending" || a.State == "firing") {
			return true
		}
	}
	return false
}

func getBody(u string) string {
	resp, err := http.Get(u)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func get(t *testing.T, u string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// The copier template ships the same rules, tests and dashboard.
func TestTemplateCopies(t *testing.T) {
	template := filepath.Join(dir(t), "..", "copier-template", "template", "observability")
	for _, f := range []string{"prometheus/ratekit.rules.yml", "prometheus/ratekit.rules.test.yml", "grafana/ratekit.json"} {
		want, err := os.ReadFile(filepath.Join(dir(t), f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(template, f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("copier-template/template/observability/%s differs from observability/%s: copy it", f, f)
		}
	}
}

// Every recording rule and alert keeps job and namespace in its
// aggregations (services share limiter names), and every alert links a
// section of docs/runbook.md that exists.
func TestRulesKeepServicesApartAndLinkRunbooks(t *testing.T) {
	b, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	rules := string(b)
	for _, m := range regexp.MustCompile(`\b(by|on) \(([^)]*)\)`).FindAllStringSubmatch(rules, -1) {
		labels := strings.Split(m[2], ", ")
		if !slices.Contains(labels, "job") || !slices.Contains(labels, "namespace") {
			t.Errorf("%s drops job or namespace", m[0])
		}
	}
	runbook, err := os.ReadFile(filepath.Join(dir(t), "..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(rules, -1)
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
	for _, a := range alerts {
		url := "https://github.com/ratekit/ratekit/blob/main/docs/runbook.md#" + strings.ToLower(a[1])
		if !strings.Contains(rules, `runbook_url: "`+url+`"`) {
			t.Errorf("alert %s has no runbook_url %s", a[1], url)
		}
		if !strings.Contains(string(runbook), "\n## "+a[1]+"\n") {
			t.Errorf("docs/runbook.md has no section ## %s", a[1])
		}
	}
}

// runbookSection returns the text of docs/runbook.md's section ## name, up
// to the next section.
func runbookSection(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), "..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, s, ok := strings.Cut(string(b), "\n## "+name+"\n")
	if !ok {
		t.Fatalf("docs/runbook.md has no section ## %s", name)
	}
	s, _, _ = strings.Cut(s, "\n## ")
	return s
}

// Each alert's runbook section says how long its condition lasts before it
// fires: the alert's `for`, plus the threshold of an age it compares (the
// rule store's replica age must first pass it, then hold for `for`).
func TestRunbookSaysWhenAlertsFire(t *testing.T) {
	b, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	_, alerts, _ := strings.Cut(string(b), "name: ratekit.alerts")
	blocks := regexp.MustCompile(`(?m)^\s*- alert: `).Split(alerts, -1)[1:]
	if len(blocks) == 0 {
		t.Fatal("no alerts")
	}
	for _, blk := range blocks {
		name, _, _ := strings.Cut(blk, "\n")
		m := regexp.MustCompile(`(?m)^\s*for: (\S+)$`).FindStringSubmatch(blk)
		if m == nil {
			continue // fires on the first evaluation
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("%s: for %q: %v", name, m[1], err)
		}
		if a := regexp.MustCompile(`_age_seconds > (\d+)`).FindStringSubmatch(blk); a != nil {
			secs, _ := strconv.Atoi(a[1])
			d += time.Duration(secs) * time.Second
		}
		want := fmt.Sprintf("%d minutes", int(d.Minutes()))
		if what, _, _ := strings.Cut(runbookSection(t, name), "**Check"); !strings.Contains(strings.Join(strings.Fields(what), " "), want) {
			t.Errorf("docs/runbook.md, %s: its What does not say %q (for %s), the time its condition lasts before it fires:\n%s", name, want, m[1], what)
		}
	}
}

// Every log message docs/ names after its level ("a WARN `msg`", "WARN log
// lines `msg`") is one the code logs: an operator greps for it.
func TestDocsNameLoggedMessages(t *testing.T) {
	root := filepath.Join(dir(t), "..")
	var code strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		name := d.Name()
		if (strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")) || strings.HasSuffix(name, ".go.jinja") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			code.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	named := regexp.MustCompile("\\b(?:DEBUG|INFO|WARN|ERROR)(?: log)?(?: lines?)? `([^`]+)`")
	found := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(strings.Join(strings.Fields(string(b)), " "), -1) {
			found++
			if !strings.Contains(code.String(), strconv.Quote(m[1])) {
				t.Errorf("%s names the log message %q, which no code logs", filepath.Base(doc), m[1])
			}
		}
	}
	if found == 0 {
		t.Fatal("docs/ name no log message: the pattern is stale")
	}
}

// The dashboard, like the rules, keeps services apart: services share
// limiter names (every service of the copier template has http_request), so
// every query filters on the job variable and keeps job and namespace in its
// aggregations, and every legend names the job.
func TestDashboardKeepsServicesApart(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(dir(t), "grafana", "ratekit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("ratekit.json: %v", err)
	}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		q, _ := json.Marshal(v.Query)
		vars[v.Name] = string(q)
	}
	if _, ok := vars["job"]; !ok {
		t.Error("the dashboard has no job variable")
	}
	if !strings.Contains(vars["rate_limiter"], `job=~\"$job\"`) {
		t.Errorf("the rate_limiter variable does not follow the job variable: %s", vars["rate_limiter"])
	}
	by := regexp.MustCompile(`\b(by|on) \(([^)]*)\)`)
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, `job=~"$job"`) {
				t.Errorf("panel %q: query %q does not filter on $job", p.Title, q.Expr)
			}
			for _, m := range by.FindAllStringSubmatch(q.Expr, -1) {
				labels := strings.Split(m[2], ", ")
				if !slices.Contains(labels, "job") || !slices.Contains(labels, "namespace") {
					t.Errorf("panel %q: %s drops job or namespace", p.Title, m[0])
				}
			}
			if !strings.Contains(q.LegendFormat, "{{job}}") {
				t.Errorf("panel %q: legend %q does not name the job", p.Title, q.LegendFormat)
			}
		}
	}
}

// The package is a program: run starts the example and a Prometheus that
// loads the shipped rules and scrapes it.
func TestProgramRuns(t *testing.T) {
	binary(t, EnvPrometheus, "prometheus")
	if p := os.Getenv(EnvPrometheus); p != "" {
		t.Setenv("PATH", filepath.Dir(p)+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	// A port found free may be taken before run's Prometheus binds it: then
	// Prometheus exits, run says so and returns, and another port is tried.
	// Once scraped, run must still be running, so the answers came from its
	// Prometheus (another one on the port would have made it exit).
	//
	// run says when to send requests: only once Prometheus has scraped the
	// example, since requests before the first scrape never show in a rate.
	// It said "Prometheus at ..." at start, and the README's 60 requests sent
	// then raised no alert.
	var logs testlog.Buffer
	log.SetOutput(&logs)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	const sendNow = "Prometheus scrapes the example: send requests now"
	const tries = 5
ports:
	for try := 1; ; try++ {
		logs.Reset()
		ctx, cancel := context.WithCancel(context.Background())
		prom := promtest.FreeAddr(t)
		done := make(chan error, 1)
		go func() { done <- run(ctx, "127.0.0.1:0", "127.0.0.1:0", prom, 0) }()
		ready := func() bool {
			return strings.Contains(getBody("http://"+prom+"/api/v1/rules"), `"RatekitFailingOpen"`) &&
				len(query(t, "http://"+prom, `up{job="ratekit_example"} == 1`)) == 1 &&
				strings.Contains(logs.String(), sendNow)
		}
		deadline := time.Now().Add(90 * time.Second)
		for !ready() {
			select {
			case err := <-done:
				cancel()
				if errors.Is(err, errPrometheusExited) && try < tries {
					t.Logf("try %d of %d: %v: trying another port", try, tries, err)
					continue ports
				}
				t.Fatalf("run returned before the example was scraped (try %d of %d): %v", try, tries, err)
			case <-time.After(500 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("the shipped rules not loaded, the example not scraped or %q not logged after 90s (run: %v); alerts: %s; log:\n%s", sendNow, <-done, getBody("http://"+prom+"/api/v1/alerts"), logs.String())
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		return
	}
}

// The panel of rejected config files shows a file while the service runs
// on rejected input, as RatekitConfigRejected alerts: from a rejection at
// start-up (before a scrape saw the file at 0), through a restart that
// rejects it again (a stale marker, then 1 again: the rejection counter was
// born where the last process left it, and the panel on it showed nothing),
// to the first scrape after a fixed file loads. promtool evaluates the
// panel's query, its variables given values.
func TestDashboardShowsFirstRejection(t *testing.T) {
	promtool := binary(t, EnvPromtool, "promtool")
	expr := panelQuery(t, "Config files rejected")
	expr = strings.NewReplacer(`$job`, `.*`, `$rate_limiter`, `.*`, `$__rate_interval`, `4m`).Replace(expr)
	q, err := json.Marshal(expr) // a YAML double-quoted string
	if err != nil {
		t.Fatal(err)
	}
	var cases strings.Builder
	for _, c := range []struct {
		at   string
		want int
	}{{"4m", 1}, {"14m", 1}, {"20m", 1}, {"23m", 1}, {"30m", 1}, {"31m", 0}} {
		fmt.Fprintf(&cases, `      - expr: %s
        eval_time: %s
        exp_samples:
          - labels: '{job="checkout",namespace="shop",file="rate_limits.yaml"}'
            value: %d
`, q, c.at, c.want)
	}
	test := `evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ratelimit_config_rejected{job="checkout",namespace="shop",file="rate_limits.yaml"}'
        values: '_ _ _ 1x16 stale 1x9 0x9'
    promql_expr_test:
` + cases.String()
	file := filepath.Join(t.TempDir(), "dashboard.test.yml")
	if err := os.WriteFile(file, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("panel query %s on a file rejected once: %v\n%s", expr, err, out)
	}
}

// panelQuery returns the query of the dashboard's panel title, which has one.
func panelQuery(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), "grafana", "ratekit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("ratekit.json: %v", err)
	}
	for _, p := range dash.Panels {
		if p.Title == title && len(p.Targets) == 1 {
			return p.Targets[0].Expr
		}
	}
	t.Fatalf("the dashboard has no panel %q with one query", title)
	return ""
}
