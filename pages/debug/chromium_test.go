package debug_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// EnvChromium names the Chromium binary for the browser test; the test
// command sets it (and installs Debian's chromium package) so that the test
// never skips there.
const EnvChromium = "RATEKIT_TEST_CHROMIUM"

func chromiumBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		bin, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("%s=%s: %v", EnvChromium, p, err)
		}
		return bin
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin
		}
	}
	t.Skipf("chromium is not installed and %s is unset: apt-get install -y chromium, or run scripts/test.sh, which installs it", EnvChromium)
	return ""
}

// runChromium runs headless Chromium on url with extra flags and returns its
// stdout and stderr (console messages are logged to stderr).
func runChromium(t *testing.T, url string, flags ...string) (stdout, stderr string) {
	t.Helper()
	bin := chromiumBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.String())
	}
	return out.String(), errb.String()
}

// TestChromium loads the page in a real headless Chromium and asserts on the
// DOM it built: the limiters, the rules in evaluation order with their tiers,
// the escaped description, the breaker states and the blocks; and that the
// browser applied the page under its Content-Security-Policy without a violation.
func TestChromium(t *testing.T) {
	srv := newFixture(t).server(t)
	dom, stderr := runChromium(t, srv.URL+"/debug/ratelimit", "--dump-dom")

	if got := attrs(dom, `<section class="limiter" id="limiter-[a-z_]+" data-limiter="([a-z_]+)"`); !slices.Equal(got, []string{"api", "empty", "jobs"}) {
		t.Fatalf("limiters in the DOM %v, want api, empty, jobs\n%s", got, dom)
	}
	api := section(t, dom, "api")
	rules := api[strings.Index(api, `<table class="rules">`):strings.Index(api, `<table class="overridden">`)]
	if got := attrs(rules, `<tr data-rule="([a-z_]+)" data-tier="([a-z]+)"`); !slices.Equal(got, []string{
		"trusted default", "per_user file", "shadow_ip published", "login_ban default", "paths default", "by_plan default"}) {
		t.Fatalf("effective rules %v", got)
	}
	if got := attrs(api, `<tr data-rule="([a-z_]+)" data-tier="([a-z]+)" data-overridden-by="([a-z]+)"`); !slices.Equal(got, []string{
		"per_user published file", "per_user default file"}) {
		t.Fatalf("overridden rules %v", got)
	}
	for _, want := range []string{
		// The browser parsed the description as text, not as a script element.
		`<small>&lt;script&gt;alert(1)&lt;/script&gt; lowered for incident #42</small>`,
		`<span data-blocks="3">1 / 2 / 3</span>`,
		`<span data-replica-age="42">42s ago</span>`,
		`<span class="state state-closed" data-breaker="closed">closed</span>`,
	} {
		if !strings.Contains(api, want) {
			t.Errorf("limiter api lacks %s", want)
		}
	}
	if strings.Contains(dom, "<script") {
		t.Error("the DOM holds a script element")
	}
	if jobs := section(t, dom, "jobs"); !strings.Contains(jobs, `data-breaker="open"`) || !strings.Contains(jobs, `data-rule="per_queue" data-tier=""`) {
		t.Errorf("limiter jobs: %s", jobs)
	}
	if empty := section(t, dom, "empty"); !strings.Contains(empty, "No rules: every check is allowed.") {
		t.Errorf("limiter empty: %s", empty)
	}
	if strings.Contains(stderr, "Content Security Policy") {
		t.Errorf("the browser reported a Content-Security-Policy violation:\n%s", stderr)
	}
}

// section returns the DOM of one limiter's section.
func section(t *testing.T, dom, limiter string) string {
	t.Helper()
	start := strings.Index(dom, `data-limiter="`+limiter+`"`)
	if start < 0 {
		t.Fatalf("no section for limiter %s", limiter)
	}
	end := strings.Index(dom[start:], "</section>")
	if end < 0 {
		t.Fatalf("section %s is not closed", limiter)
	}
	return dom[start : start+end]
}

// attrs returns the submatches of re in s, each match's groups joined by spaces.
func attrs(s, re string) []string {
	var out []string
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Join(m[1:], " "))
	}
	return out
}
