package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds the real ratekit binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "ratekit-cli-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "ratekit")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// ratekit runs the binary in dir and returns its exit code, stdout and stderr.
// The RATEKIT_* variables of the test's environment are not passed on.
func ratekit(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return ratekitEnv(t, dir, nil, args...)
}

// ratekitEnv runs the binary as ratekit does, with env (NAME=VALUE) added to
// the environment.
func ratekitEnv(t *testing.T, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATEKIT_") || strings.HasPrefix(kv, "RATEKIT_TEST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "controlplane", "config", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestValidateValid(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml") + "  guarded:\n    description: g\n    available_properties: [ip]\n    allowed_skip_rules: [skip_office]\n",
		"rate_limits.yaml":        readFixture(t, "rate_limits.yaml") + "  guarded:\n    - name: skip_office\n      action: skip\n      match: {ip: {one_of: [192.0.2.1]}}\n",
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	want := `available_limiters.yaml: 4 limiters
  guarded           1 property    0 default rules  skip rules allowed: skip_office
  pipelines_create  5 properties  1 default rule
  rack_request      3 properties  2 default rules
  user_sign_in      2 properties  1 default rule
rate_limits.yaml: 7 rules for 3 limiters
  guarded           1 rule   (1 skip)
  pipelines_create  4 rules  (3 limit, 1 skip)
  user_sign_in      2 rules  (2 limit)
skip rules: 2 (each bypasses its limiter for every request it matches)
  rate_limits.yaml:27:7: pipelines_create/pipelines_create_skip_app_defaults: match {} (every request)
  rate_limits.yaml:49:7: guarded/skip_office: match {ip: {one_of: ["192.0.2.1"]}}
OK
`
	if stdout != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", stdout, want)
	}

	// Without --rate-limits only available_limiters.yaml is checked.
	code, stdout, _ = ratekit(t, dir, "validate", "--available-limiters=available_limiters.yaml")
	if code != 0 || !strings.HasSuffix(stdout, "skip rules: none\nOK\n") {
		t.Fatalf("exit %d, stdout:\n%s", code, stdout)
	}
}

func TestValidateInvalid(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"rate_limits.yaml": `rate_limits:
  user_sign_in:
    - name: per_ip
      limit: ten
      period_s: 60
      action: limit
      characteristics: [ip]
    - name: per_ip
      action: skip
      ban_for_s: 60
  sign_up: []
`,
		"bad_available.yaml": "available_limiters:\n  a:\n    description: \"\"\n    default_rules:\n      - name: x\n        action: log\n",
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	want := `rate_limits.yaml:4:14: user_sign_in/per_ip: limit must be a whole number, got the value "ten"
rate_limits.yaml:8:7: user_sign_in/per_ip: ban_for_s is not valid on skip rules
rate_limits.yaml:8:13: user_sign_in/per_ip: rule name "per_ip" is used twice in this limiter (first at line 3)
rate_limits.yaml:11:3: sign_up: no limiter "sign_up" in available_limiters.yaml (it declares pipelines_create, rack_request, user_sign_in)
`
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, stdout, stderr, want)
	}

	code, _, stderr = ratekit(t, dir, "validate", "--available-limiters", "bad_available.yaml", "--rate-limits", "rate_limits.yaml")
	want = `bad_available.yaml:3:18: a: description is missing
bad_available.yaml:5:9: a/x: limit and log rules require limit and period_s
rate_limits.yaml: not checked: bad_available.yaml is invalid
`
	if code != 1 || stderr != want {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
	// --json says so too: no error of the rate-limits file there does not
	// make it valid.
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "bad_available.yaml", "--rate-limits", "rate_limits.yaml")
	var res struct {
		Valid      bool     `json:"valid"`
		NotChecked []string `json:"not_checked"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || res.Valid || !slices.Equal(res.NotChecked, []string{"rate_limits.yaml"}) {
		t.Fatalf("--json: exit %d, %+v (%v), want exit 1 and not_checked [rate_limits.yaml]:\n%s", code, res, err, stdout)
	}
}

// validate accepts the algorithm fields and rejects the combinations the
// algorithms do not support, each with file, line and rule.
func TestValidateAlgorithms(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"good.yaml": `rate_limits:
  user_sign_in:
    - {name: bucket, limit: 5, period_s: 60, action: limit, algorithm: token_bucket, burst: 10, characteristics: [ip]}
    - {name: sliding, limit: 5, period_s: 60, action: log, algorithm: sliding_window, ban_for_s: 60, characteristics: [ip]}
`,
		"bad.yaml": `rate_limits:
  user_sign_in:
    - name: distinct
      limit: 5
      period_s: 60
      action: limit
      characteristics: [ip]
      count_distinct: ip
      algorithm: token_bucket
    - name: burst
      limit: 5
      period_s: 60
      action: limit
      burst: 3
    - name: typo
      limit: 5
      period_s: 60
      action: limit
      algorithm: sliding
`,
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "good.yaml")
	if code != 0 || stderr != "" || !strings.HasSuffix(stdout, "OK\n") {
		t.Fatalf("good.yaml: exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "bad.yaml")
	want := `bad.yaml:3:7: user_sign_in/distinct: count_distinct counts in fixed windows only
bad.yaml:10:7: user_sign_in/burst: burst is valid with algorithm token_bucket only
bad.yaml:19:18: user_sign_in/typo: algorithm must be one of fixed_window, sliding_window, token_bucket, got the value "sliding"
`
	if code != 1 || stderr != want {
		t.Fatalf("bad.yaml: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", code, stderr, want)
	}
}

func TestUsageAndUnreadable(t *testing.T) {
	dir := writeFiles(t, map[string]string{"available_limiters.yaml": readFixture(t, "available_limiters.yaml")})
	if err := os.Mkdir(filepath.Join(dir, "a_directory"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantStderr string // a line the diagnostics must contain
	}{
		{"no command", nil, "usage: ratekit COMMAND"},
		{"unknown command", []string{"frobnicate"}, `ratekit: unknown command "frobnicate"` + "\n"},
		{"help for an unknown command", []string{"help", "frobnicate"}, `ratekit help: unknown command "frobnicate"` + "\n"},
		// A typo of a command, a subcommand or a flag gets the name meant.
		{"misspelt command", []string{"valdate"}, `ratekit: unknown command "valdate"; did you mean "validate"?` + "\n"},
		{"help for a misspelt command", []string{"help", "rlues"}, `ratekit help: unknown command "rlues"; did you mean "rules"?` + "\n"},
		{"misspelt rules command", []string{"rules", "pubish"}, `ratekit: unknown rules command "pubish"; did you mean "publish"?` + "\n"},
		{"misspelt rollout command", []string{"rollout", "gaet"}, `ratekit: unknown rollout command "gaet"; did you mean "gate"?` + "\n"},
		{"misspelt flag", []string{"validate", "--availble-limiters", "x"}, `ratekit: flag provided but not defined: -availble-limiters; did you mean "--available-limiters"?` + "\n"},
		{"misspelt flag with one dash", []string{"rules", "list", "-rules-prefx", "x"}, `; did you mean "--rules-prefix"?` + "\n"},
		{"missing flag", []string{"validate"}, "ratekit: validate needs --available-limiters FILE"},
		{"unknown flag", []string{"validate", "--available", "x"}, "ratekit: flag provided but not defined: -available\n"},
		{"positional argument", []string{"validate", "--available-limiters", "available_limiters.yaml", "rate_limits.yaml"}, `validate takes no arguments, got ["rate_limits.yaml"]`},
		{"missing available limiters", []string{"validate", "--available-limiters", "nope.yaml"}, "open nope.yaml: no such file or directory"},
		{"missing rate limits", []string{"validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "nope.yaml"}, "open nope.yaml: no such file or directory"},
		{"a directory", []string{"validate", "--available-limiters", "a_directory"}, "ratekit validate: read a_directory: is a directory\n"},
		{"admin, a listen address without a port", []string{"admin", "--redis", "redis://127.0.0.1:1", "--available-limiters", "available_limiters.yaml", "--listen", "bogus"}, "--listen bogus: address bogus: missing port in address"},
		// An unreadable file is reported under the command that read it.
		{"explain, unreadable file", []string{"explain", "--redis", "redis://127.0.0.1:1", "--limiter", "x", "--available-limiters", "nope.yaml", "a=1"}, "ratekit explain: open nope.yaml: no such file or directory"},
		{"clear, unreadable file", []string{"clear", "--redis", "redis://127.0.0.1:1", "--limiter", "x", "--available-limiters", "nope.yaml", "a=1"}, "ratekit clear: open nope.yaml: no such file or directory"},
		{"rules, unreadable file", []string{"rules", "gc", "--redis", "redis://127.0.0.1:1", "--available-limiters", "nope.yaml"}, "ratekit rules: open nope.yaml: no such file or directory"},
		{"admin, unreadable file", []string{"admin", "--redis", "redis://127.0.0.1:1", "--available-limiters", "nope.yaml"}, "ratekit admin: load available limiters: open nope.yaml: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := ratekit(t, dir, tt.args...)
			if code != 2 || stdout != "" || !strings.Contains(stderr, tt.wantStderr) {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and stderr containing %q", code, stdout, stderr, tt.wantStderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	// help lists itself among the commands (and completion offers it after
	// help): help help is the overview too.
	// -h asks for help, there too: it was an unknown command (exit 2).
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"help", "-h"}, {"help", "--help"}} {
		code, stdout, stderr := ratekit(t, t.TempDir(), args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "\n  validate    check available_limiters.yaml and rate_limits.yaml (for CI)\n") {
			t.Fatalf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
	// A command with subcommands takes help as a subcommand, as help takes it.
	for _, name := range []string{"rules", "rollout"} {
		code, stdout, stderr := ratekit(t, t.TempDir(), name, "help")
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: ratekit "+name) {
			t.Fatalf("%s help: exit %d, stdout:\n%s\nstderr:\n%s", name, code, stdout, stderr)
		}
	}
	// help takes a subcommand's name to reach it; a word that names none is
	// refused, not ignored.
	if code, stdout, stderr := ratekit(t, t.TempDir(), "help", "rules", "publish"); code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: ratekit rules") {
		t.Fatalf("help rules publish: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "rules", "publsh"}, `ratekit help: rules has no subcommand "publsh"; did you mean "publish"?`},
		{[]string{"help", "rules", "publish", "x"}, `ratekit help: rules has no subcommand "publish x"`},
		{[]string{"help", "validate", "rules"}, "ratekit help: validate has no subcommands; run ratekit help validate"},
		{[]string{"help", "help", "publsh"}, "ratekit help: help has no subcommands; run ratekit help"},
	} {
		code, stdout, stderr := ratekit(t, t.TempDir(), c.args...)
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", c.args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "validate"}, {"validate", "-h"}, {"help", "validate", "-h"}} {
		code, stdout, _ := ratekit(t, t.TempDir(), args...)
		if code != 0 || !strings.HasPrefix(stdout, "usage: ratekit validate --available-limiters FILE [--rate-limits FILE] [--json]\n") {
			t.Fatalf("%v: exit %d, stdout:\n%s", args, code, stdout)
		}
	}
}

// Every registered command has a summary, a usage text and a run function.
func TestRegistry(t *testing.T) {
	if len(commands) == 0 {
		t.Fatal("no commands registered")
	}
	for name, c := range commands {
		if c.summary == "" || !strings.HasPrefix(c.usage, "usage: ratekit "+name) || c.run == nil {
			t.Errorf("command %q is incomplete: %+v", name, c)
		}
	}
}

// TestRedisURLErrorHidesPassword: a malformed --redis URL is reported without
// the URL, which may carry a password.
func TestRedisURLErrorHidesPassword(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		_, err := redisClient("redis://user:s3cret-pw@127.0.0.1:notaport/0", cluster, time.Second)
		if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
			t.Fatalf("cluster=%v: error %v must exist and not show the password", cluster, err)
		}
	}
}

// A usage error is the problem and one line naming the command's help, not
// the whole help; a Redis address without its scheme gets the URL to write.
func TestUsageErrorIsShort(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "publish", "--redis", "redis://127.0.0.1:1"}, "ratekit: rules publish needs --file FILE\nrun 'ratekit rules publish --help' for usage\n"},
		{[]string{"rules", "publish", "--redis", "127.0.0.1:6379", "--file", "x.yaml"}, "ratekit: --redis: \"127.0.0.1:6379\" is not a URL: did you mean redis://127.0.0.1:6379?\nrun 'ratekit rules publish --help' for usage\n"},
		{[]string{"rules", "list", "--redis", "alice:secret@127.0.0.1:6379"}, "ratekit: --redis: not a URL: write it redis://[user:pass@]host:port[/db] (rediss:// for TLS)\nrun 'ratekit rules list --help' for usage\n"},
		{[]string{"clear", "--bogus"}, "ratekit: flag provided but not defined: -bogus\nrun 'ratekit clear --help' for usage\n"},
		{[]string{"rollout", "gate"}, "run 'ratekit rollout gate --help' for usage\n"},
		{[]string{"explain", "--redis", "127.0.0.1:6379", "--limiter", "x", "a=b"}, "did you mean redis://127.0.0.1:6379?"},
	} {
		code, _, stderr := ratekit(t, dir, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || strings.Count(stderr, "\n") > 2 {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit 2 and %q in at most two lines", tt.args, code, stderr, tt.want)
		}
	}
	for usage, want := range map[string]string{rulesUsage: "ratekit rules", rolloutUsage: "ratekit rollout gate", clearUsage: "ratekit clear", "": "ratekit"} {
		if got := usageName(usage); got != want {
			t.Errorf("usageName(%.30q) = %q, want %q", usage, got, want)
		}
	}
}

// TestValidateSummaryNamesMode: the summary of a rate_limits.yaml that sets
// a limiter's mode says so. A file listing a limiter for its mode alone (the
// README's shadow step, {mode: shadow, rules: []}) printed "0 rules  ()".
func TestValidateSummaryNamesMode(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"rate_limits.yaml": "rate_limits:\n  user_sign_in: {mode: shadow, rules: []}\n" +
			"  pipelines_create:\n    mode: enforce\n    rules: [{name: per_user, characteristics: [username], limit: 1, period_s: 60, action: limit}]\n" +
			"  rack_request: []\n",
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	want := `rate_limits.yaml: 1 rule for 3 limiters
  pipelines_create  1 rule  (1 limit; mode enforce)
  rack_request      0 rules
  user_sign_in      0 rules  (mode shadow)
`
	if !strings.Contains(stdout, want) {
		t.Fatalf("stdout:\n%s\nwant it to hold:\n%s", stdout, want)
	}

	// --json gives the same modes, and none for a limiter whose list sets none.
	code, stdout, stderr = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	if code != 0 || stderr != "" {
		t.Fatalf("--json: exit %d, stderr:\n%s", code, stderr)
	}
	var res struct {
		Limiters []struct {
			Name string  `json:"name"`
			Mode *string `json:"rate_limits_mode"`
		} `json:"limiters"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	modes := map[string]string{}
	for _, l := range res.Limiters {
		if l.Mode != nil {
			modes[l.Name] = *l.Mode
		}
	}
	if want := map[string]string{"user_sign_in": "shadow", "pipelines_create": "enforce"}; !maps.Equal(modes, want) {
		t.Fatalf("--json modes %v, want %v:\n%s", modes, want, stdout)
	}
}
