package copiertest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
			answers:    map[string]string{"go_module": "gitlab.example.com/platform/all-frameworks", "redis_url_env": "ALL_FRAMEWORKS_REDIS"},
			service:    "all_frameworks",
			module:     "gitlab.example.com/platform/all-frameworks",
			redisEnv:   "ALL_FRAMEWORKS_REDIS",
			tests:      []string{"TestNetHTTP", "TestGRPC", "TestEcho", "TestGin", "TestAsynq"},
		},
	}
}

// TestCopy renders the template for each framework alone and all together,
// then checks what a service team and its CI would run.
func TestCopy(t *testing.T) {
	for _, c := range renderCases() {
		t.Run(c.dir, func(t *testing.T) {
			dst := filepath.Join(work, "copy", c.dir)
			answers := map[string]string{
				"frameworks":   "[" + strings.Join(c.frameworks, ", ") + "]",
				"ratekit_path": repoRoot,
			}
			for k, v := range c.answers {
				answers[k] = v
			}
			copierCopy(t, templateRepo, dst, answers)
			checkRendered(t, c, dst)
			checkValidate(t, c, dst)
			checkGoMod(t, c, dst)
			checkBuildAndTest(t, c, dst)
			checkRuns(t, c, dst)
		})
	}
}

// checkRendered checks the answers file and which files the frameworks chose.
func checkRendered(t *testing.T, c renderCase, dst string) {
	answers := read(t, filepath.Join(dst, ".copier-answers.yml"))
	for _, want := range []string{"_commit: v2.0.0", "_src_path: " + templateRepo, "service_name: " + c.service, "go_module: " + c.module} {
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
	if out := run(t, dst, nil, "gofmt", "-l", "."); out != "" {
		t.Errorf("rendered Go code is not gofmt-clean:\n%s", out)
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

// checkGoMod checks the local-development replaces: the root module and the
// adapter modules of the chosen frameworks, and no others.
func checkGoMod(t *testing.T, c renderCase, dst string) {
	gomod := read(t, filepath.Join(dst, "go.mod"))
	if !strings.Contains(gomod, "module "+c.module+"\n") {
		t.Errorf("go.mod does not declare module %s:\n%s", c.module, gomod)
	}
	if !strings.Contains(gomod, "replace github.com/ratekit/ratekit => "+repoRoot+"\n") {
		t.Errorf("go.mod does not replace ratekit with %s:\n%s", repoRoot, gomod)
	}
	for _, m := range adapterModules {
		line := "replace github.com/ratekit/ratekit/middleware/" + m + " => " + filepath.Join(repoRoot, "middleware", m) + "\n"
		if got, want := strings.Contains(gomod, line), slices.Contains(c.frameworks, m); got != want {
			t.Errorf("go.mod replaces middleware/%s = %v, want %v:\n%s", m, got, want, gomod)
		}
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
	out := run(t, dst, env, "go", "test", "-count=1", "-v", "./...")
	for _, name := range append([]string{"TestShippedFiles", "TestInvalidRateLimitsRejectedWhole", "TestDBUtilizationBudget"}, c.tests...) {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("generated test %s did not pass:\n%s", name, out)
		}
	}
	// Only the rule store test needs Redis; with Redis nothing may skip.
	if os.Getenv("RATEKIT_TEST_REDIS_URL") != "" {
		if !strings.Contains(out, "--- PASS: TestPublishedRules ") {
			t.Errorf("generated test TestPublishedRules did not pass with Redis:\n%s", out)
		}
		if strings.Contains(out, "--- SKIP") {
			t.Errorf("generated tests skipped with Redis:\n%s", out)
		}
	} else if n := strings.Count(out, "--- SKIP"); n > 1 {
		t.Errorf("%d generated tests skipped; only TestPublishedRules needs Redis:\n%s", n, out)
	}
}

// checkRuns starts the service's binary (counting in memory), calls it and
// stops it with SIGTERM.
func checkRuns(t *testing.T, c renderCase, dst string) {
	bin := filepath.Join(dst, c.service+".bin")
	run(t, dst, projectEnv(c.redisEnv), "go", "build", "-o", bin, "./cmd/"+c.service)
	prefix := strings.ToUpper(c.service)
	internal := freeAddr(t)
	env := []string{prefix + "_INTERNAL_ADDR=" + internal, prefix + "_GRPC_ADDR=" + freeAddr(t)}
	var httpAddrs []string
	for _, fw := range c.frameworks {
		if slices.Contains(httpFrameworks, fw) {
			addr := freeAddr(t)
			httpAddrs = append(httpAddrs, addr)
			env = append(env, prefix+"_"+map[string]string{"nethttp": "HTTP", "echo": "ECHO", "gin": "GIN"}[fw]+"_ADDR="+addr)
		}
	}
	p := start(t, dst, bin, c.redisEnv, env)

	metrics := p.waitGet(t, "http://"+internal+"/metrics")
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
		metrics = httpBody(t, "http://"+internal+"/metrics")
		if !regexp.MustCompile(`(?m)^ratelimit_checks_total\{[^}]*rate_limiter="http_request"[^}]*\} [1-9]`).MatchString(metrics) {
			t.Errorf("/metrics counted no http_request check:\n%s", metrics)
		}
	}
	debug := httpBody(t, "http://"+internal+"/debug/ratelimit?format=json")
	if !strings.Contains(debug, `"db_utilization"`) {
		t.Errorf("/debug/ratelimit does not list db_utilization:\n%s", debug)
	}
	if err := p.stop(15 * time.Second); err != nil {
		t.Fatalf("%v:\n%s", err, p.logs())
	}
	if !strings.Contains(p.logs(), c.service+" started") {
		t.Errorf("service logs lack the start line:\n%s", p.logs())
	}
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

// waitGet polls url until it answers 200, failing if the process exits.
func (p *proc) waitGet(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(b)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("service exited (%v) before serving %s:\n%s", p.err, url, p.logs())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer within 20s:\n%s", url, p.logs())
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
