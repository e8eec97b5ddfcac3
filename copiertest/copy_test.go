package copiertest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var httpFrameworks = []string{"nethttp", "echo", "gin"}

// adapterModules are the frameworks whose adapter is a module of its own.
var adapterModules = []string{"grpc", "echo", "gin", "asynq"}

// renderCase is one answer set of `copier copy --defaults`.
type renderCase struct {
	dir        string   // destination folder: the default service name
	frameworks []string // the frameworks answer
	answers    map[string]string
	service    string // the service name the case ends up with
	module     string // its Go module path
	redisEnv   string // the variable its Redis URL is read from
	tests      []string
}

func renderCases() []renderCase {
	one := func(fw string, tests ...string) renderCase {
		return renderCase{dir: "svc_" + fw, frameworks: []string{fw}, service: "svc_" + fw,
			module: "example.com/svc_" + fw, redisEnv: "REDIS_URL", tests: tests}
	}
	return []renderCase{
		one("nethttp", "TestNetHTTP"),
		one("grpc", "TestGRPC"),
		one("echo", "TestEcho"),
		one("gin", "TestGin"),
		one("asynq", "TestAsynq"),
		{
			// Every framework, and answers other than the defaults; the folder
			// name has a dash, which the default service name turns into "_".
			dir:        "all-frameworks",
			frameworks: []string{"nethttp", "grpc", "echo", "gin", "asynq"},
			// ratekit_path given explicitly; the other cases take the
			// default publish.sh recorded (this checkout).
			answers:  map[string]string{"go_module": "gitlab.example.com/platform/all-frameworks", "redis_url_env": "ALL_FRAMEWORKS_REDIS", "ratekit_path": repoRoot},
			service:  "all_frameworks",
			module:   "gitlab.example.com/platform/all-frameworks",
			redisEnv: "ALL_FRAMEWORKS_REDIS",
			tests:    []string{"TestNetHTTP", "TestGRPC", "TestEcho", "TestGin", "TestAsynq"},
		},
		{
			// Opted into the per-request rules service (the remote tier).
			dir:        "svc_remote",
			frameworks: []string{"nethttp"},
			answers:    map[string]string{"rules_service": "true"},
			service:    "svc_remote",
			module:     "example.com/svc_remote",
			redisEnv:   "REDIS_URL",
			tests:      []string{"TestNetHTTP", "TestRulesService"},
		},
	}
}

// TestCopy renders the template for each framework alone and all together
// (`copier copy --defaults`: nothing but the frameworks answered, the other
// answers are the defaults), then checks what a service team and its CI would
// run.
func TestCopy(t *testing.T) {
	for _, c := range renderCases() {
		t.Run(c.dir, func(t *testing.T) {
			dst := filepath.Join(work, "copy", c.dir)
			answers := map[string]string{"frameworks": "[" + strings.Join(c.frameworks, ", ") + "]"}
			for k, v := range c.answers {
				answers[k] = v
			}
			copierCopy(t, templateRepo, dst, answers)
			checkRendered(t, c, dst)
			checkEnvDocumented(t, c, dst)
			checkValidate(t, c, dst)
			checkBuildAndTest(t, c, dst)
			checkGoMod(t, c.module, c.frameworks, dst)
			checkRemoteModule(t, c, dst)
			checkRuns(t, c, dst)
			checkStartsOnHungRedis(t, c, dst)
			checkLogsOnRefusedRedis(t, c, dst)
			checkAsynqOnSentinel(t, c, dst)
		})
	}
}

// checkRendered checks the answers file and which files the frameworks chose.
func checkRendered(t *testing.T, c renderCase, dst string) {
	answers := read(t, filepath.Join(dst, ".copier-answers.yml"))
	for _, want := range []string{"_commit: v" + currentVersion, "_src_path: " + templateRepo, "ratekit_path: " + repoRoot, "service_name: " + c.service, "go_module: " + c.module} {
		if !strings.Contains(answers, want) {
			t.Errorf(".copier-answers.yml lacks %q:\n%s", want, answers)
		}
	}
	for _, fw := range []string{"nethttp", "grpc", "echo", "gin", "asynq"} {
		_, err := os.Stat(filepath.Join(dst, "internal", "server", fw+".go"))
		if chosen := slices.Contains(c.frameworks, fw); chosen != (err == nil) {
			t.Errorf("internal/server/%s.go exists = %v, framework chosen = %v", fw, err == nil, chosen)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "cmd", c.service, "main.go")); err != nil {
		t.Errorf("no main package: %v", err)
	}
	// The dashboards and alerts, verbatim (no Jinja: they hold {{ $labels }}).
	for _, f := range []string{"prometheus/ratekit.rules.yml", "prometheus/ratekit.rules.test.yml", "grafana/ratekit.json"} {
		if read(t, filepath.Join(dst, "observability", f)) != read(t, filepath.Join(repoRoot, "observability", f)) {
			t.Errorf("observability/%s differs from the repository's", f)
		}
	}
	if out := run(t, dst, nil, "gofmt", "-l", "."); out != "" {
		t.Errorf("rendered Go code is not gofmt-clean:\n%s", out)
	}
}

// checkEnvDocumented checks the service's environment both ways: every
// variable its code reads is listed by main.go's package comment and by the
// README, and each variable they list is read. OTEL_* variables other than
// the endpoint are covered by "the other standard OTEL_* variables".
func checkEnvDocumented(t *testing.T, c renderCase, dst string) {
	t.Helper()
	reads := map[string]bool{}
	// os.Getenv("X"), main.go's env("X", default), ratelimits' EnvX = "X",
	// and otel.go's list of the OTEL_* variables it looks up.
	literal := regexp.MustCompile(`(?:os\.Getenv\(|\benv\()"([A-Z][A-Z0-9_]*)"|\bEnv\w+ += "([A-Z][A-Z0-9_]*)"|"(OTEL_[A-Z0-9_]+)"`)
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		src := read(t, p)
		for _, m := range literal.FindAllStringSubmatch(src, -1) {
			reads[m[1]+m[2]+m[3]] = true
		}
		if strings.Contains(src, "os.Getenv(gin.EnvGinMode)") {
			reads["GIN_MODE"] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reads[c.redisEnv] || !reads[strings.ToUpper(c.service)+"_INTERNAL_ADDR"] {
		t.Fatalf("found no read of %s or of %s_INTERNAL_ADDR among %v", c.redisEnv, strings.ToUpper(c.service), slices.Sorted(maps.Keys(reads)))
	}
	mainGo := read(t, filepath.Join(dst, "cmd", c.service, "main.go"))
	comment := mainGo[:strings.Index(mainGo, "\npackage main")]
	readme := read(t, filepath.Join(dst, "README.md"))
	for name := range reads {
		if strings.HasPrefix(name, "OTEL_") && name != "OTEL_EXPORTER_OTLP_ENDPOINT" {
			continue
		}
		if !regexp.MustCompile(`(?m)^//   - ` + name + `\b`).MatchString(comment) {
			t.Errorf("main.go's package comment does not list %s, which the service reads:\n%s", name, comment)
		}
		if !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README.md does not name %s, which the service reads", name)
		}
	}
	listed := regexp.MustCompile(`(?m)^//   - ([A-Z][A-Z0-9_]*)\b`).FindAllStringSubmatch(comment, -1)
	listed = append(listed, regexp.MustCompile("(?m)^\\| `([A-Z][A-Z0-9_]*)` \\|").FindAllStringSubmatch(readme, -1)...)
	for _, m := range listed {
		if !reads[m[1]] {
			t.Errorf("%s is documented (main.go or README.md) but the service never reads it", m[1])
		}
	}
}

// checkValidate runs the ratekit CLI of this checkout on the rendered files
// and checks the limiters the chosen frameworks declare.
func checkValidate(t *testing.T, c renderCase, dst string) {
	out := run(t, dst, nil, ratekitCLI, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.example.yaml")
	declared := map[string]bool{
		"http_request":   slices.ContainsFunc(c.frameworks, func(fw string) bool { return slices.Contains(httpFrameworks, fw) }),
		"grpc_request":   slices.Contains(c.frameworks, "grpc"),
		"job":            slices.Contains(c.frameworks, "asynq"),
		"db_utilization": true,
	}
	for name, want := range declared {
		got := regexp.MustCompile(`(?m)^  ` + name + ` +\d+ properties`).MatchString(out)
		if got != want {
			t.Errorf("available_limiters.yaml declares %s = %v, want %v:\n%s", name, got, want, out)
		}
	}
	if !strings.Contains(out, "rate_limits.example.yaml: ") || !strings.HasSuffix(strings.TrimSpace(out), "OK") {
		t.Errorf("ratekit validate did not check the example:\n%s", out)
	}
}

// checkGoMod checks go.mod after `make tidy`: the local-development replaces
// of the root module and the adapter modules of the chosen frameworks (and no
// others), each of them required.
func checkGoMod(t *testing.T, module string, frameworks []string, dst string) {
	t.Helper()
	m := readGoMod(t, dst)
	if m.Module.Path != module {
		t.Errorf("go.mod declares module %q, want %s", m.Module.Path, module)
	}
	replaces, requires := m.replaces(), m.requires()
	if replaces["github.com/ratekit/ratekit"] != repoRoot || requires["github.com/ratekit/ratekit"] == "" {
		t.Errorf("go.mod does not require ratekit replaced with %s: replaces %v, requires %v", repoRoot, replaces, requires)
	}
	for _, fw := range adapterModules {
		mod := "github.com/ratekit/ratekit/middleware/" + fw
		want := slices.Contains(frameworks, fw)
		if got := replaces[mod] == filepath.Join(repoRoot, "middleware", fw); got != want {
			t.Errorf("go.mod replaces %s with the checkout = %v, want %v: %v", mod, got, want, replaces)
		}
		if got := requires[mod] != ""; got != want {
			t.Errorf("go.mod requires %s = %v, want %v", mod, got, want)
		}
	}
}

// checkRemoteModule checks that only a service that opted into the rules
// service depends on its client's module (and so on gRPC), from the checkout.
func checkRemoteModule(t *testing.T, c renderCase, dst string) {
	t.Helper()
	m := readGoMod(t, dst)
	const mod = "github.com/ratekit/ratekit/controlplane/remoterules"
	want := c.answers["rules_service"] == "true"
	if got := m.replaces()[mod] == filepath.Join(repoRoot, "controlplane", "remoterules") && m.requires()[mod] != ""; got != want {
		t.Errorf("go.mod requires %s from the checkout = %v, want %v: replaces %v", mod, got, want, m.replaces())
	}
}

// checkBuildAndTest runs the service's own Makefile targets and its generated
// tests, offline but for the Go module proxy.
func checkBuildAndTest(t *testing.T, c renderCase, dst string) {
	env := projectEnv(c.redisEnv)
	run(t, dst, env, "make", "tidy", "build", "vet")
	// The CI step, with the ratekit version of the service's go.mod (go tool).
	if out := run(t, dst, env, "make", "validate-rate-limits"); strings.Count(out, "\nOK") < 2 {
		t.Errorf("make validate-rate-limits checked fewer than 2 documents:\n%s", out)
	}
	// The generated tests keep to rule store keys of their own: a test that
	// seeded the service's documents in a shared Redis would rewrite the
	// rules of its running processes (a test's file tier that counts health
	// checks, for one).
	index := "ratekit:rules:{" + c.service + "}:@index"
	// Nor do they leave their own rule stores behind: rule documents never
	// expire, and a team's Redis gathered 60 keys a run.
	testRuleKeys := func() int {
		return redisInt(t, "EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "test:rules:{*")
	}
	var testRuleKeysBefore int
	if os.Getenv("RATEKIT_TEST_REDIS_URL") != "" {
		redisInt(t, "DEL", index)
		testRuleKeysBefore = testRuleKeys()
	}
	out := run(t, dst, env, "go", "test", "-count=1", "-v", "./...")
	if os.Getenv("RATEKIT_TEST_REDIS_URL") != "" {
		if redisInt(t, "EXISTS", index) != 0 {
			t.Errorf("the generated tests wrote the service's own rule store (%s) in the test Redis", index)
		}
		if n := testRuleKeys(); n != testRuleKeysBefore {
			t.Errorf("the generated tests left %d rule store keys (test:rules:{...}) in the test Redis", n-testRuleKeysBefore)
		}
	}
	for _, name := range append([]string{"TestShippedFiles", "TestBuiltInAvailableLimiters", "TestInvalidRateLimitsRejectedWhole", "TestRateLimitsRejectionsCountFromZero", "TestRateLimitsRejectedGauge", "TestSIGHUPBeforeRun", "TestDBUtilizationBudget", "TestLogDurationsReadable", "TestReloadCancelledIsNoRejection", "TestRunReturnsOnceStopped"}, c.tests...) {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("generated test %s did not pass:\n%s", name, out)
		}
	}
	// Only the rule store and admin page tests, and the mode's case with the
	// rule store, need Redis: with Redis they pass and nothing skips; without
	// it nothing else may skip.
	redisTests := []string{"TestPublishedRules", "TestInvalidRateLimitsAtStartKeepTheStoredFileTier", "TestAdminPage", "TestRateLimitsMode/redis"}
	if os.Getenv("RATEKIT_TEST_REDIS_URL") != "" {
		for _, name := range redisTests {
			if !strings.Contains(out, "--- PASS: "+name+" ") {
				t.Errorf("generated test %s did not pass with Redis:\n%s", name, out)
			}
		}
		if strings.Contains(out, "--- SKIP") {
			t.Errorf("generated tests skipped with Redis:\n%s", out)
		}
		return
	}
	for _, m := range regexp.MustCompile(`--- SKIP: (\S+)`).FindAllStringSubmatch(out, -1) {
		if !slices.Contains(redisTests, m[1]) {
			t.Errorf("generated test %s skipped; only %v need Redis:\n%s", m[1], redisTests, out)
		}
	}
}

// checkRuns starts the service's binary (counting in memory), calls it and
// stops it with SIGTERM.
func checkRuns(t *testing.T, c renderCase, dst string) {
	bin := filepath.Join(dst, c.service+".bin")
	run(t, dst, projectEnv(c.redisEnv), "go", "build", "-o", bin, "./cmd/"+c.service)
	prefix := strings.ToUpper(c.service)
	otlp := startOTLPReceiver(t)
	remote := c.answers["rules_service"] == "true"
	var internal, grpcAddr string
	var httpAddrs []string
	// Elsewhere than the project: available_limiters.yaml is built in.
	cwd := t.TempDir()
	p, metrics := startServing(t, cwd, bin, c.redisEnv, func() ([]string, string) {
		internal, grpcAddr = freeAddr(t), freeAddr(t)
		// The internal listener answers to one more name than the loopback ones.
		env := []string{prefix + "_INTERNAL_ADDR=" + internal, prefix + "_GRPC_ADDR=" + grpcAddr,
			prefix + "_INTERNAL_ALLOWED_HOSTS=ops.example, localhost, 127.0.0.1", "OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.url,
			"OTEL_SERVICE_NAME=" + c.service + "_eu"} // the standard variables apply
		httpAddrs = nil
		for _, fw := range c.frameworks {
			if slices.Contains(httpFrameworks, fw) {
				addr := freeAddr(t)
				httpAddrs = append(httpAddrs, addr)
				env = append(env, prefix+"_"+map[string]string{"nethttp": "HTTP", "echo": "ECHO", "gin": "GIN"}[fw]+"_ADDR="+addr)
			}
		}
		if remote {
			// Nothing listens there: the service starts, and its checks fail
			// open to the local tiers.
			env = append(env, prefix+"_RULES_SERVICE_ADDR="+freeAddr(t))
		}
		return env, "http://" + internal + "/metrics"
	})
	if !strings.Contains(metrics, `rate_limiter="db_utilization"`) {
		t.Errorf("/metrics has no series of db_utilization:\n%s", metrics)
	}
	for _, addr := range httpAddrs {
		resp, _ := httpGet(t, "http://"+addr+"/hello")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("GET %s/hello: %d, RateLimit-Policy %q; want 200 with rate-limit headers", addr, resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
	}
	if len(httpAddrs) > 0 {
		readmeRoutesAnswer(t, dst, httpAddrs)
		metrics = httpBody(t, "http://"+internal+"/metrics")
		if !regexp.MustCompile(`(?m)^ratelimit_checks_total\{[^}]*rate_limiter="http_request"[^}]*\} [1-9]`).MatchString(metrics) {
			t.Errorf("/metrics counted no http_request check:\n%s", metrics)
		}
	}
	// DNS rebinding: the internal listener (loopback) refuses a rebound name
	// on /metrics as on the debug page, and serves a loopback one and the
	// one _INTERNAL_ALLOWED_HOSTS adds.
	for _, path := range []string{"/metrics", "/debug/ratelimit?format=json"} {
		for host, want := range map[string]int{"evil.example": http.StatusForbidden, "localhost": http.StatusOK, "ops.example:1": http.StatusOK} {
			req, err := http.NewRequest(http.MethodGet, "http://"+internal+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want || strings.Contains(string(body), "db_utilization") != (want == http.StatusOK) {
				t.Errorf("GET %s with Host %s: %d %.200q, want %d", path, host, resp.StatusCode, body, want)
			}
		}
	}
	debug := httpBody(t, "http://"+internal+"/debug/ratelimit?format=json")
	if !strings.Contains(debug, `"db_utilization"`) {
		t.Errorf("/debug/ratelimit does not list db_utilization:\n%s", debug)
	}
	if got := strings.Contains(debug, `"rules_service": {`); got != remote || (remote && !strings.Contains(debug, `"service": "`+c.service+`"`)) {
		t.Errorf("/debug/ratelimit shows the rules service: %v, want %v:\n%s", got, remote, debug)
	}
	// The start line says where everything is.
	for _, want := range []string{`"msg":"` + c.service + ` started"`, `"internal":"` + internal + `"`, `"http://` + internal + `/debug/ratelimit"`,
		`"store":"memory, per process`, `"db_utilization (`, `"default_rules":"built into the binary (shipped.go)"`,
		`"rate_limits":"rate_limits.yaml (absent: no operator rules)"`, `"rate_limits_reload":"when changed (checked every 30s) and on SIGHUP"`,
		`"counters_prefix":"ratekit:` + c.service + `:rl:"`} {
		if !strings.Contains(p.logs(), want) {
			t.Errorf("the start log line lacks %s:\n%s", want, p.logs())
		}
	}
	// SIGHUP reloads rate_limits.yaml at once (the poll is every 30s).
	write(t, filepath.Join(cwd, "rate_limits.yaml"), "rate_limits:\n  db_utilization:\n    - name: sighup_rule\n      characteristics: [root_namespace]\n      limit: 7\n      period_s: 60\n      action: limit\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(httpBody(t, "http://"+internal+"/debug/ratelimit?format=json"), `"sighup_rule"`); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rate_limits.yaml not reloaded 20s after SIGHUP:\n%s", p.logs())
		}
	}
	if slices.Contains(c.frameworks, "grpc") {
		// A call that never ends (a health Watch) may not hold the drain
		// past its bound (10s): SIGTERM still stops the service.
		watch := grpcHealthWatch(t, grpcAddr)
		defer watch.Close()
	}
	if err := p.stop(15 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, p.logs())
	}
	if !strings.Contains(p.logs(), c.service+" started") {
		t.Errorf("service logs lack the start line:\n%s", p.logs())
	}
	// A clean stop says so, last: without that line it read like a crash.
	if lines := strings.Split(strings.TrimSpace(p.logs()), "\n"); !strings.Contains(lines[len(lines)-1], `"level":"INFO","msg":"`+c.service+` stopped","cause":"terminated signal received"`) {
		t.Errorf("the last log line after SIGTERM is not the clean stop's:\n%s", p.logs())
	}
	// OpenTelemetry, flushed at exit: the checks as spans (HTTP frameworks
	// made some), the metrics over OTLP, both as the service.name that
	// OTEL_SERVICE_NAME gives.
	traces, metrics := otlp.received("/v1/traces"), otlp.received("/v1/metrics")
	for _, want := range []string{"ratelimit_checks_total", "ratelimit_breaker_state", c.service + "_eu"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("OTLP metrics export lacks %q (%d bytes)", want, len(metrics))
		}
	}
	if len(httpAddrs) > 0 {
		for _, want := range []string{"ratelimit.check", "ratelimit.limiter", "http_request", c.service + "_eu"} {
			if !strings.Contains(traces, want) {
				t.Errorf("OTLP trace export lacks %q (%d bytes)", want, len(traces))
			}
		}
	}
}

// checkStartsOnHungRedis starts the binary checkRuns built on a Redis that
// hangs (SIGSTOP: it accepts connections and never answers), with client
// timeouts of an hour: the service must serve all the same, its start-up
// waits for Redis bounded, and stop on SIGTERM.
func checkStartsOnHungRedis(t *testing.T, c renderCase, dst string) {
	redisAddr := hungRedis(t)
	p, _ := startServing(t, t.TempDir(), filepath.Join(dst, c.service+".bin"), c.redisEnv, func() ([]string, string) {
		return listenEnv(t, c, c.redisEnv+"=redis://"+redisAddr+"?dial_timeout=1h&write_timeout=1h")
	})
	if err := p.stop(15 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, p.logs())
	}
}

// checkLogsOnRefusedRedis starts the binary checkRuns built on a Redis
// address nobody listens on: it serves, and its log stays JSON, one record a
// line, while every dial is refused (go-redis printed its own plain-text
// lines among them, which breaks a log pipeline's parsing in the incident
// hour).
func checkLogsOnRefusedRedis(t *testing.T, c renderCase, dst string) {
	p, _ := startServing(t, t.TempDir(), filepath.Join(dst, c.service+".bin"), c.redisEnv, func() ([]string, string) {
		return listenEnv(t, c, c.redisEnv+"=redis://"+freeAddr(t))
	})
	// The rule store's refreshes fail while it serves: wait for the WARN
	// that says so, so that the log holds what a refused Redis makes.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.logs(), "rule_store"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no rule store record 30s after a start on a refused Redis:\n%s", p.logs())
		}
	}
	if err := p.stop(15 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, p.logs())
	}
	for line := range strings.Lines(p.logs()) {
		if strings.TrimSpace(line) != "" && !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON on a refused Redis: %q", line)
		}
	}
}

// checkAsynqOnSentinel starts the binary checkRuns built with its Redis URL
// naming the Sentinel setup of RATEKIT_TEST_REDIS_SENTINEL (when set, and the
// service has the asynq worker): the worker must work on the master, where
// its heartbeat writes asynq:servers:{host:PID:id}. It used to connect to
// the URL's first address, the sentinel itself.
func checkAsynqOnSentinel(t *testing.T, c renderCase, dst string) {
	sentinel := os.Getenv("RATEKIT_TEST_REDIS_SENTINEL")
	if sentinel == "" || !slices.Contains(c.frameworks, "asynq") {
		return
	}
	hosts, master, _ := strings.Cut(sentinel, "/")
	sh, sp, err := net.SplitHostPort(strings.Split(hosts, ",")[0])
	if err != nil {
		t.Fatalf("RATEKIT_TEST_REDIS_SENTINEL = %q: %v", sentinel, err)
	}
	addr := strings.Fields(run(t, dst, nil, "redis-cli", "-h", sh, "-p", sp, "SENTINEL", "get-master-addr-by-name", master))
	if len(addr) != 2 {
		t.Fatalf("the sentinel names no master %s: %q", master, addr)
	}
	p, _ := startServing(t, t.TempDir(), filepath.Join(dst, c.service+".bin"), c.redisEnv, func() ([]string, string) {
		return listenEnv(t, c, c.redisEnv+"=redis-sentinel://"+hosts+"/"+master)
	})
	pattern := fmt.Sprintf("asynq:servers:{*:%d:*}", p.cmd.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if run(t, dst, nil, "redis-cli", "-h", addr[0], "-p", addr[1], "--scan", "--pattern", pattern) != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s on the Sentinel master %s:%s 30s after start:\n%s", pattern, addr[0], addr[1], p.logs())
		}
	}
	if err := p.stop(15 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, p.logs())
	}
}

// hungRedis starts a redis-server on a free loopback port and stops it with
// SIGSTOP; it is killed when the test ends. A port found free may be taken
// before redis-server binds it: then it exits, and another port is tried; an
// answer from another process on the port does not count.
func hungRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("RATEKIT_TEST_REDIS_URL") != "" {
			t.Fatal("redis-server not on PATH although RATEKIT_TEST_REDIS_URL is set")
		}
		t.Skip("redis-server not on PATH: run ./scripts/test.sh")
	}
	const tries = 5
ports:
	for try := 1; ; try++ {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		logName := filepath.Join(t.TempDir(), "redis.log")
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir(),
			"--logfile", logName)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		for deadline := time.Now().Add(10 * time.Second); !redisAnswersAs(addr, cmd.Process.Pid); time.Sleep(20 * time.Millisecond) {
			select {
			case <-exited:
				log, _ := os.ReadFile(logName)
				if !strings.Contains(strings.ToLower(string(log)), "address already in use") || try == tries {
					t.Fatalf("redis-server on %s exited, try %d of %d:\n%s", addr, try, tries, log)
				}
				t.Logf("redis-server on %s: address already in use (try %d of %d): trying another port", addr, try, tries)
				continue ports
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis-server on %s did not start", addr)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		return addr
	}
}

// redisAnswersAs reports whether the Redis at addr answers INFO with process
// id pid.
func redisAnswersAs(addr string, pid int) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "INFO server\r\n"); err != nil {
		return false
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n') // $<length> of the bulk string
	if err != nil || !strings.HasPrefix(head, "$") {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return false
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return false
	}
	return strings.Contains(string(body), fmt.Sprintf("process_id:%d\r\n", pid))
}

// redisInt sends one command to the Redis of RATEKIT_TEST_REDIS_URL and
// returns its integer reply (this module needs no Redis client).
func redisInt(t *testing.T, args ...string) int {
	t.Helper()
	u, err := url.Parse(os.Getenv("RATEKIT_TEST_REDIS_URL"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var cmds [][]string
	if pw, ok := u.User.Password(); ok {
		cmds = append(cmds, []string{"AUTH", u.User.Username(), pw})
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		cmds = append(cmds, []string{"SELECT", db})
	}
	cmds = append(cmds, args)
	r := bufio.NewReader(conn)
	var reply string
	for _, cmd := range cmds {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := io.WriteString(conn, b.String()); err != nil {
			t.Fatal(err)
		}
		if reply, err = r.ReadString('\n'); err != nil || strings.HasPrefix(reply, "-") {
			t.Fatalf("redis %s: %q, %v", cmd[0], reply, err)
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(reply, ":")))
	if err != nil {
		t.Fatalf("redis %v: reply %q is not an integer", args, reply)
	}
	return n
}

// grpcHealthWatch opens grpc.health.v1.Health/Watch on the gRPC server at
// addr (HTTP/2 without TLS, the gRPC framing by hand: this module needs no
// gRPC) and returns once the first status arrived: a call in flight until the
// server ends it. Close the body to end it.
func grpcHealthWatch(t *testing.T, addr string) io.ReadCloser {
	t.Helper()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protocols}}
	// An empty HealthCheckRequest (the overall status): one uncompressed
	// message of 0 bytes.
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/grpc.health.v1.Health/Watch", strings.NewReader("\x00\x00\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("gRPC health Watch: %v", err)
	}
	var header [5]byte
	if _, err := io.ReadFull(resp.Body, header[:]); err != nil || resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("gRPC health Watch: %d %v %v, want a first status", resp.StatusCode, resp.Header, err)
	}
	return resp.Body
}

// otlpReceiver is an OTLP/HTTP endpoint on loopback that keeps the raw
// protobuf bodies per path. The tests look for strings in them (span, metric
// and attribute names are stored verbatim in protobuf), which needs no OTLP
// code in this module.
type otlpReceiver struct {
	url    string
	mu     sync.Mutex
	bodies map[string][]byte
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{bodies: map[string][]byte{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.url = "http://" + l.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies[req.URL.Path] = append(r.bodies[req.URL.Path], b...)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *otlpReceiver) received(path string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.bodies[path])
}

// proc is a running service binary.
type proc struct {
	cmd     *exec.Cmd
	logFile string        // its stdout and stderr
	done    chan struct{} // closed when the process has exited
	err     error         // its exit error, once done
}

// logs returns what the process has written so far.
func (p *proc) logs() string {
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// start runs bin in dir without the Redis variable (the service counts in
// memory and starts no worker), killing it when the test ends.
func start(t *testing.T, dir, bin, redisEnv string, env []string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin), logFile: filepath.Join(t.TempDir(), "service.log"), done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, redisEnv+"=") }), env...)
	// A file, not a buffer: the process writes to it directly, so reading it
	// while the process runs races with nothing.
	f, err := os.Create(p.logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// listenEnv is the environment of a service of c on free loopback addresses
// (its internal, gRPC and every HTTP listener) with more, and the URL of its
// /metrics.
func listenEnv(t *testing.T, c renderCase, more ...string) ([]string, string) {
	t.Helper()
	prefix := strings.ToUpper(c.service)
	internal := freeAddr(t)
	env := append([]string{prefix + "_INTERNAL_ADDR=" + internal, prefix + "_GRPC_ADDR=" + freeAddr(t)}, more...)
	for _, fw := range httpFrameworks {
		env = append(env, prefix+"_"+map[string]string{"nethttp": "HTTP", "echo": "ECHO", "gin": "GIN"}[fw]+"_ADDR="+freeAddr(t))
	}
	return env, "http://" + internal + "/metrics"
}

// startServing runs bin as start does, with the environment setup returns,
// and returns once the URL setup returns with it answers 200, with that
// answer. The addresses setup names are found free and let go, so another
// process may take one before the service binds it: the service then exits
// saying so, and it is started again on the addresses of another call.
func startServing(t *testing.T, dir, bin, redisEnv string, setup func() (env []string, ready string)) (*proc, string) {
	t.Helper()
	const tries = 5
	for try := 1; ; try++ {
		env, ready := setup()
		p := start(t, dir, bin, redisEnv, env)
		body, err := p.waitGet(ready)
		if err == nil {
			return p, body
		}
		if !errors.Is(err, errExited) || !strings.Contains(p.logs(), "address already in use") || try == tries {
			t.Fatalf("try %d of %d: %v:\n%s", try, tries, err, p.logs())
		}
		t.Logf("try %d of %d: an address was taken: starting again on others", try, tries)
	}
}

// errExited is waitGet's error when the process exits first.
var errExited = errors.New("service exited")

// waitGet polls url until it answers 200 and returns the answer; it fails if
// the process exits first or after 20s.
func (p *proc) waitGet(url string) (string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b), nil
			}
		}
		select {
		case <-p.done:
			return "", errors.Join(fmt.Errorf("%w before serving %s", errExited, url), p.err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s did not answer within 20s", url)
		}
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(within time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("service exited with %w after SIGTERM", p.err)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("service still running %s after SIGTERM", within)
	}
}

// httpGet returns the response to GET url and its body.
// readmeRoute is a route of the rendered README's table, in a row's first
// cell: | `GET /x`, `GET /y` | what |
var readmeRoute = regexp.MustCompile("`GET (/[a-z]+)`")

// readmeRoutesAnswer checks that the routes the rendered README lists, the
// probes among them, answer 200 on every HTTP listener: an adopter's first
// curl after make run.
func readmeRoutesAnswer(t *testing.T, dst string, addrs []string) {
	t.Helper()
	var routes []string
	for line := range strings.Lines(read(t, filepath.Join(dst, "README.md"))) {
		if first, ok := strings.CutPrefix(line, "| `GET "); ok {
			first, _, _ = strings.Cut("`GET "+first, " | ")
			for _, m := range readmeRoute.FindAllStringSubmatch(first, -1) {
				routes = append(routes, m[1])
			}
		}
	}
	if !slices.Contains(routes, "/healthz") || !slices.Contains(routes, "/readyz") {
		t.Errorf("README.md lists routes %v, without the probes /healthz and /readyz", routes)
	}
	for _, addr := range addrs {
		for _, r := range routes {
			if resp, body := httpGet(t, "http://"+addr+r); resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s%s, a route README.md lists: %d %.200s", addr, r, resp.StatusCode, body)
			}
		}
	}
}

func httpGet(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp, string(b)
}

// httpBody returns the body of GET url, which must answer 200.
func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, body := httpGet(t, url)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d\n%s", url, resp.StatusCode, body)
	}
	return body
}
