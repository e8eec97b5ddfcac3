package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const explainAvailable = `available_limiters:
  api_request:
    description: "every API request"
    available_properties: [ip, user, path, request_type]
    allowed_skip_rules: [skip_health]
    default_rules:
      - name: per_user
        characteristics: [user]
        limit: 200
        period_s: 60
        action: limit
      - name: login_by_ip
        characteristics: [ip]
        limit: 2
        period_s: 60
        ban_for_s: 900
        action: limit
        match:
          path: /login
      - name: per_ip
        characteristics: [ip]
        limit: 1000
        period_s: 60
        action: limit
`

const explainRateLimits = `rate_limits:
  api_request:
    - name: skip_health
      action: skip
      match:
        path: {one_of: [/-/health, /-/readiness]}
    - name: per_user          # replaces the default of 200
      characteristics: [user]
      limit: 3
      period_s: 60
      action: limit
      match:
        request_type: api
    - name: distinct_paths
      action: log
      characteristics: [user]
      count_distinct: path
      limit: 2
      period_s: 3600
      match:
        request_type: api
        user: {regex: "^[a-z]+$"}
`

// explainEnv is a built ratekit binary, the two config files, a real Redis
// and an in-process limiter over the same files and counters, which makes the
// traffic that explain then reads.
type explainEnv struct {
	available, rateLimits, prefix string
	rulesPrefix                   string // the rule store's, with a hash tag for Redis Cluster
	redisURL                      string
	cluster                       bool
	limiter                       *ratelimit.Limiter
	local                         tiers.Set // the files' tiers
}

func newExplainEnv(t *testing.T, client redisstore.Client, redisURL string, cluster bool) *explainEnv {
	t.Helper()
	return newExplainEnvWith(t, client, redisURL, cluster, explainRateLimits)
}

// newExplainEnvWith is newExplainEnv with rate_limits.yaml of its own.
func newExplainEnvWith(t *testing.T, client redisstore.Client, redisURL string, cluster bool, explainRateLimits string) *explainEnv {
	t.Helper()
	dir := t.TempDir()
	e := &explainEnv{available: filepath.Join(dir, "available_limiters.yaml"),
		rateLimits: filepath.Join(dir, "rate_limits.yaml"), prefix: redistest.Prefix(t), redisURL: redisURL, cluster: cluster}
	e.rulesPrefix = e.prefix + "{rules}:"
	for path, body := range map[string]string{e.available: explainAvailable, e.rateLimits: explainRateLimits} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	available, err := config.LoadAvailableLimiters(e.available)
	if err != nil {
		t.Fatal(err)
	}
	rateLimits, err := config.LoadRateLimits(e.rateLimits, available)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := config.Rules(available, rateLimits, "api_request")
	if err != nil {
		t.Fatal(err)
	}
	e.local = tiers.Set{File: must(rateLimits.Rules("api_request")), Defaults: must(available.DefaultRules("api_request"))}
	e.limiter, err = ratelimit.New(ratelimit.Config{Name: "api_request", Store: redisstore.New(client), KeyPrefix: e.prefix,
		Rules: rules, Logger: slog.New(slog.DiscardHandler), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run executes the built binary (see binary in main_test.go) and returns
// stdout, stderr and the exit code.
func (e *explainEnv) run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	code, stdout, stderr := ratekit(t, "", args...)
	return stdout, stderr, code
}

func (e *explainEnv) flags(extra ...string) []string {
	args := []string{"explain", "--redis", e.redisURL, "--limiter", "api_request", "--key-prefix", e.prefix,
		"--rules-prefix", e.rulesPrefix, "--available-limiters", e.available, "--rate-limits", e.rateLimits}
	if e.cluster {
		args = append(args, "--cluster")
	}
	return append(args, extra...)
}

// explainJSON runs explain --json for the identifier and decodes the result.
func (e *explainEnv) explainJSON(t *testing.T, id ...string) explanation {
	t.Helper()
	stdout, stderr, code := e.run(t, e.flags(append([]string{"--json"}, id...)...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	var ex explanation
	if err := json.Unmarshal([]byte(stdout), &ex); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	return ex
}

func (e *explainEnv) check(t *testing.T, n int, id ratelimit.Identifier) {
	t.Helper()
	for range n {
		if r := e.limiter.Check(context.Background(), id); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// expectRules runs explain --json for the identifier and fails unless the
// rules' compact lines (see ruleLines) are want.
func (e *explainEnv) expectRules(t *testing.T, want []string, id ...string) explanation {
	t.Helper()
	ex := e.explainJSON(t, id...)
	if got := ruleLines(ex); !slices.Equal(got, want) {
		t.Fatalf("explain %q: rules\n got %q\nwant %q", id, got, want)
	}
	return ex
}

// ruleLines is the compact form the tests compare: name, state and, for
// counted rules, count/limit.
func ruleLines(ex explanation) []string {
	var out []string
	for _, r := range ex.Rules {
		s := fmt.Sprintf("%d %s %s %s", r.Position, r.Tier, r.Name, r.State)
		if r.Count != nil {
			s += fmt.Sprintf(" %g/%d", *r.Count, *r.Limit)
		}
		out = append(out, s)
	}
	return out
}

func TestExplain(t *testing.T) {
	t.Parallel() // its own key prefix and files
	client := redistest.Client(t)
	e := newExplainEnv(t, client, redistest.URL(t), false)
	ctx := context.Background()
	alice := ratelimit.Identifier{"user": "alice", "ip": "10.0.0.1", "request_type": "api"}
	for _, p := range []string{"/api/a", "/api/b", "/api/c"} {
		id := ratelimit.Identifier{"path": p}
		for k, v := range alice {
			id[k] = v
		}
		e.check(t, 1, id)
	}
	bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.2", "request_type": "web", "path": "/login"}
	e.check(t, 3, bob) // login_by_ip: the third exceeds and bans for 900s

	t.Run("block", func(t *testing.T) {
		ex := e.expectRules(t, []string{
			"1 file skip_health no_match",
			"2 file per_user block 3/3", // a fourth request exceeds
			"3 file distinct_paths not_evaluated",
			"4 default login_by_ip no_match",
			"5 default per_ip not_evaluated",
		}, "user=alice", "ip=10.0.0.1", "request_type=api", "path=/api/d")
		if got := ex.Rules[0].Mismatches; !slices.Equal(got, []string{`path: "/api/d" is not in {one_of: ["/-/health" "/-/readiness"]}`}) {
			t.Fatalf("skip_health mismatches %q", got)
		}
		if got := ex.Rules[3].Mismatches; !slices.Equal(got, []string{`path: "/api/d" is not "/login"`}) {
			t.Fatalf("login_by_ip mismatches %q", got)
		}
		if ex.Rules[2].Reason != "after the blocking rule per_user" {
			t.Fatalf("distinct_paths reason %q", ex.Rules[2].Reason)
		}
		if ex.Verdict.Action != "block" || ex.Verdict.Rule != "per_user" || ex.Verdict.RetryAfter < 1 || ex.Verdict.RetryAfter > 60 {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
		if !slices.Equal(ex.Overridden, []overriddenRule{{Tier: "default", Name: "per_user", OverriddenBy: "file"}}) {
			t.Fatalf("overridden %+v", ex.Overridden)
		}
		if !slices.Equal(ex.Tiers, []tierSummary{{"file", e.rateLimits, 3}, {"default", e.available, 3}}) {
			t.Fatalf("tiers %+v", ex.Tiers)
		}
	})

	t.Run("shadow and counts", func(t *testing.T) {
		// carol has no counts yet; alice's distinct paths are over the log rule's limit.
		ex := e.expectRules(t, []string{
			"1 file skip_health no_match",
			"2 file per_user allow 0/3",
			"3 file distinct_paths allow 0/2",
			"4 default login_by_ip no_match",
			"5 default per_ip allow 0/1000",
		}, "user=carol", "ip=10.0.0.3", "request_type=api", "path=/api/x")
		if ex.Verdict.Action != "allow" || ex.Verdict.Exceeded {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
		// With cost 0 nothing would be added: alice's per_user (3/3) is not
		// exceeded, and her 3 distinct paths exceed the log rule's 2.
		ex = e.expectRules(t, []string{
			"1 file skip_health no_match",
			"2 file per_user allow 3/3",
			"3 file distinct_paths exceeded 3/2",
			"4 default login_by_ip no_match",
			"5 default per_ip allow 3/1000",
		}, "--cost", "0", "user=alice", "ip=10.0.0.1", "request_type=api", "path=/api/a")
		if ex.Verdict.Action != "allow" || !ex.Verdict.Exceeded || ex.Verdict.Rule != "distinct_paths" {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
	})

	t.Run("ban", func(t *testing.T) {
		ex := e.expectRules(t, []string{
			"1 file skip_health no_match",
			"2 file per_user no_match",
			"3 file distinct_paths no_match",
			"4 default login_by_ip banned 3/2",
			"5 default per_ip not_evaluated",
		}, "user=bob", "ip=10.0.0.2", "request_type=web", "path=/login")
		if got := ex.Rules[2].Mismatches; !slices.Equal(got, []string{`request_type: "web" is not "api"`}) {
			t.Fatalf("distinct_paths mismatches %q", got)
		}
		ban := ex.Rules[3]
		if left := time.Until(*ban.ResetAt); !ban.Banned || left < 800*time.Second || left > 900*time.Second {
			t.Fatalf("ban until %v (in %v)", ban.ResetAt, left)
		}
		if ex.Verdict.Action != "block" || ex.Verdict.Rule != "login_by_ip" || ex.Verdict.RetryAfter < 800 {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
	})

	t.Run("skip", func(t *testing.T) {
		ex := e.expectRules(t, []string{
			"1 file skip_health skip",
			"2 file per_user no_match",
			"3 file distinct_paths no_match",
			"4 default login_by_ip no_match",
			"5 default per_ip not_evaluated",
		}, "ip=10.0.0.1", "path=/-/health")
		if got := ex.Rules[1].Mismatches; !slices.Equal(got, []string{`request_type: not in the identifier (want "api")`}) {
			t.Fatalf("per_user mismatches %q", got)
		}
		if ex.Verdict.Action != "allow" || ex.Verdict.Rule != "skip_health" {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
	})

	t.Run("degraded", func(t *testing.T) {
		ex := e.explainJSON(t, "user=dave", "ip=10.0.0.4", "request_type=api")
		if got := ruleLines(ex)[2]; got != "3 file distinct_paths degraded" {
			t.Fatalf("distinct_paths: %s", got)
		}
		if !ex.Verdict.Degraded || ex.Verdict.Action != "allow" {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
	})

	// A rule whose characteristic the identifier lacks is left out, as a
	// check leaves it out: the explanation names the characteristic.
	t.Run("missing characteristic", func(t *testing.T) {
		ex := e.expectRules(t, []string{
			"1 file skip_health no_match",
			"2 file per_user degraded",
			"3 file distinct_paths no_match", // it matches on user
			"4 default login_by_ip no_match",
			"5 default per_ip allow 0/1000",
		}, "ip=10.0.0.5", "request_type=api", "path=/api/z")
		if want := `characteristic "user" is not in the identifier: the rule is left out`; ex.Rules[1].Reason != want {
			t.Fatalf("per_user reason %q, want %q", ex.Rules[1].Reason, want)
		}
		if !ex.Verdict.Degraded || ex.Verdict.Action != "allow" {
			t.Fatalf("verdict %+v", ex.Verdict)
		}
		stdout, stderr, code := e.run(t, e.flags("ip=10.0.0.5", "request_type=api", "path=/api/z")...)
		if code != 0 || !regexp.MustCompile(`(?m)^2 +file +per_user +limit +degraded: characteristic "user" is not in the identifier: the rule is left out$`).MatchString(stdout) ||
			!strings.Contains(stdout, "\ndegraded: a counting rule was left out (the identifier lacks one of its characteristics or its count_distinct property)\n") {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
	})

	t.Run("text", func(t *testing.T) {
		stdout, stderr, code := e.run(t, e.flags("user=bob", "ip=10.0.0.2", "request_type=web", "path=/login")...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, re := range []string{
			`(?m)^limiter api_request, counters under "` + regexp.QuoteMeta(e.prefix) + `", cost 1$`,
			`(?m)^identifier: ip=10\.0\.0\.2 path=/login request_type=web user=bob$`,
			`(?m)^tiers, highest first: file 3 rules \(.*rate_limits\.yaml\), default 3 rules \(.*available_limiters\.yaml\)$`,
			`(?m)^2 +file +per_user +limit +no match: request_type: "web" is not "api"$`,
			`(?m)^4 +default +login_by_ip +limit +BANNED until \S+Z \(in 1[45]m\d+s\): exceeded without counting; count 3 of 2, remaining 0$`,
			`(?m)^5 +default +per_ip +limit +not evaluated: after the blocking rule login_by_ip$`,
			`(?m)^- +default +per_user +overridden by the file tier's rule of the same name$`,
			`(?m)^verdict: block by login_by_ip, retry after 1[45]m\d+s$`,
		} {
			if !regexp.MustCompile(re).MatchString(stdout) {
				t.Errorf("output does not match %s\n%s", re, stdout)
			}
		}
	})

	t.Run("never counts", func(t *testing.T) {
		id := ratelimit.Identifier{"user": "erin", "ip": "10.0.0.5", "request_type": "api", "path": "/api/a"}
		e.check(t, 1, id)
		before := dumpKeys(t, ctx, client, e.limiter.Keys(id))
		for range 3 {
			e.explainJSON(t, "user=erin", "ip=10.0.0.5", "request_type=api", "path=/api/b")
		}
		after := dumpKeys(t, ctx, client, e.limiter.Keys(id))
		if len(after) != len(before) {
			t.Fatalf("explain changed the keys:\nbefore %v\nafter  %v", before, after)
		}
		for k, b := range before {
			a := after[k]
			// Same value, and the window was not extended (the TTL only ran down).
			if a.value != b.value || a.ttl > b.ttl || a.ttl < b.ttl-30*time.Second {
				t.Errorf("%s: before %+v, after %+v", k, b, a)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			msg  string
		}{
			{[]string{"explain", "--limiter", "api_request", "--available-limiters", e.available}, 2, "no Redis: give --redis URL or set RATEKIT_REDIS_URL"},
			{e.flags("user"), 2, `identifier argument "user" is not PROPERTY=VALUE`},
			{e.flags("user=a", "user=b"), 2, `identifier property "user" is given twice`},
			{e.flags("--cost", "-1"), 2, "--cost must be a finite number >= 0"},
			{[]string{"explain", "--redis", e.redisURL, "--limiter", "nope", "--available-limiters", e.available}, 1, `limiter "nope" is not declared in`},
			{[]string{"explain", "--redis", "redis://" + redistest.UnusedAddr(t), "--limiter", "api_request", "--available-limiters", e.available, "--timeout", "2s", "user=a"},
				1, "connection refused"},
		} {
			stdout, stderr, code := e.run(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.msg) {
				t.Errorf("%q: exit %d, stderr %q; want exit %d with %q\n%s", tc.args, code, stderr, tc.code, tc.msg, stdout)
			}
		}
	})
}

type keyState struct {
	value string
	ttl   time.Duration
}

// dumpKeys reads the value and TTL of each key that exists.
func dumpKeys(t *testing.T, ctx context.Context, c redis.Cmdable, keys []string) map[string]keyState {
	t.Helper()
	out := map[string]keyState{}
	for _, k := range keys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var v string
		switch typ {
		case "none":
			continue
		case "string":
			v = c.Get(ctx, k).Val()
		case "set":
			m := c.SMembers(ctx, k).Val()
			slices.Sort(m)
			v = strings.Join(m, ",")
		}
		out[k] = keyState{v, c.PTTL(ctx, k).Val()}
	}
	if len(out) == 0 {
		t.Fatal("no counter keys: the check did not count")
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// With a document in the rule store, explain shows the tiers the services
// enforce: the stored file and default tiers and the published one, even
// without the files; an invalid document leaves the local tiers in force.
// explain tells a token bucket's verdict in its own terms: tokens in use,
// and when a blocked check passes again (the exact GCRA retry, not a window
// end). The bucket refills while the test runs (one token per 30 minutes), so
// the figures are read with that margin.
func TestExplainAlgorithms(t *testing.T) {
	t.Parallel()
	e := newExplainEnvWith(t, redistest.Client(t), redistest.URL(t), false, `rate_limits:
  api_request:
    - {name: per_user, action: limit, characteristics: [user], limit: 2, period_s: 3600, algorithm: token_bucket}
    - {name: per_ip, action: log, characteristics: [ip], limit: 100, period_s: 3600, algorithm: sliding_window}
`)
	e.check(t, 2, ratelimit.Identifier{"user": "dora", "ip": "10.0.0.9"})
	ex := e.explainJSON(t, "user=dora", "ip=10.0.0.9")
	r := ex.Rules[0]
	if r.Name != "per_user" || r.State != stateBlock || r.Algorithm != "token_bucket" || *r.Count < 1.9 || *r.Count > 2 {
		t.Fatalf("per_user %+v (count %v): want a token bucket blocking with about 2 tokens in use", r, *r.Count)
	}
	if ex.Verdict.Action != "block" || ex.Verdict.RetryAfter < 1700 || ex.Verdict.RetryAfter > 1800 {
		t.Fatalf("verdict %+v: want retry in just under 30 minutes (the next token)", ex.Verdict)
	}
	stdout, stderr, code := e.run(t, e.flags("user=dora", "ip=10.0.0.9")...)
	if code != 0 || !regexp.MustCompile(`token bucket: tokens in use [0-9.e+-]+ of 2, remaining [0-9.e+-]+, a check passes again in (29m\d+s|30m0s)`).MatchString(stdout) {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, _, _ = e.run(t, e.flags("user=erin", "ip=10.0.0.9")...)
	if !regexp.MustCompile(`allow: sliding window estimate: count 2 of 100, remaining 98, window ends in (5\dm\d+s|1h0m0s)`).MatchString(stdout) {
		t.Fatalf("sliding window line:\n%s", stdout)
	}
	// A cost over the burst never passes, however long one waits: explain
	// says so rather than when to retry, as the adapters do.
	ex = e.explainJSON(t, "--cost", "3", "user=fred", "ip=10.0.0.9")
	if !ex.Verdict.Never || ex.Verdict.RetryAfter != 0 || !ex.Rules[0].Never {
		t.Fatalf("cost 3, burst 2: verdict %+v, rule %+v: want never, no retry_after_s", ex.Verdict, ex.Rules[0])
	}
	stdout, _, _ = e.run(t, e.flags("--cost", "3", "user=fred", "ip=10.0.0.9")...)
	for _, re := range []string{
		`(?m)^1 +file +per_user +limit +BLOCK: the cost alone is over the rule, a check of this cost never passes; token bucket: `,
		`(?m)^verdict: block by per_user: the cost alone is over the rule, a check of this cost never passes \(no wait helps\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("output does not match %s\n%s", re, stdout)
		}
	}
}

// A token bucket's tokens in use are counted against its burst, its
// capacity, not its limit (the refill per period): with a burst of 10 and a
// limit of 2, 4 tokens in use leave 6, and explain says "4 of 10", and the
// burst in --json.
func TestExplainTokenBucketBurst(t *testing.T) {
	t.Parallel()
	e := newExplainEnvWith(t, redistest.Client(t), redistest.URL(t), false, `rate_limits:
  api_request:
    - {name: per_user, action: limit, characteristics: [user], limit: 2, period_s: 3600, algorithm: token_bucket, burst: 10}
`)
	e.check(t, 4, ratelimit.Identifier{"user": "gus"})
	ex := e.explainJSON(t, "user=gus")
	r := ex.Rules[0]
	if r.Name != "per_user" || r.State != stateAllow || r.Burst == nil || *r.Burst != 10 || *r.Count < 3.9 || *r.Count > 4 {
		t.Fatalf("per_user %+v: want a token bucket allowing, burst 10, about 4 tokens in use", r)
	}
	stdout, stderr, code := e.run(t, e.flags("user=gus")...)
	if code != 0 || !regexp.MustCompile(`allow: token bucket: tokens in use [0-9.e+-]+ of 10, remaining [0-9.e+-]+, bucket full in `).MatchString(stdout) {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestExplainVerdictSkipped: a skip rule that ends the evaluation is the
// result's Rule (ratelimit.Result.Skipped), so the verdict named it as the
// most constraining rule, or as the shadow rule exceeded when a log rule
// before it was: it names the skip as such, and the log rules exceeded.
func TestExplainVerdictSkipped(t *testing.T) {
	t.Parallel()
	e := newExplainEnvWith(t, redistest.Client(t), redistest.URL(t), false, `rate_limits:
  api_request:
    - {name: watch_ip, action: log, characteristics: [ip], limit: 1, period_s: 3600}
    - {name: skip_health, action: skip, match: {path: /-/health}}
`)
	tests := []struct {
		name, cost string
		want       string
	}{
		{"under the log rule", "1", "verdict: allow: skip rule skip_health ends the evaluation (the rules after it are not evaluated)\n"},
		{"log rule exceeded", "2", "verdict: allow: skip rule skip_health ends the evaluation (the rules after it are not evaluated); shadow rule watch_ip exceeded before it: logged, not enforced\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := e.run(t, e.flags("--cost", tt.cost, "ip=10.0.0.9", "path=/-/health")...)
			if code != 0 || !strings.HasSuffix(stdout, tt.want) {
				t.Fatalf("exit %d, want the verdict %q\n%s%s", code, tt.want, stdout, stderr)
			}
			ex := e.explainJSON(t, "--cost", tt.cost, "ip=10.0.0.9", "path=/-/health")
			if v := ex.Verdict; v.Action != "allow" || v.Rule != "skip_health" || !v.Skipped {
				t.Fatalf("verdict %+v, want allow, skipped by skip_health", v)
			}
		})
	}
}

func TestExplainRuleStore(t *testing.T) {
	client := redistest.Client(t)
	e := newExplainEnv(t, client, redistest.URL(t), false)
	ctx := context.Background()
	store, err := rulestore.New(client, rulestore.Options{Prefix: e.rulesPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(ctx, map[string]tiers.Set{"api_request": e.local}); err != nil {
		t.Fatal(err)
	}
	published := must(config.RulesToProto([]ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"},
		Limit: 5, Period: time.Minute}}))
	if _, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api_request": published}}); err != nil {
		t.Fatal(err)
	}
	// The service: its limiter follows the document.
	if err := store.Bind(e.limiter, e.local); err != nil {
		t.Fatal(err)
	}
	if err := store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	e.check(t, 5, ratelimit.Identifier{"ip": "10.0.0.9", "user": "zed", "request_type": "web", "path": "/x"})

	key := store.Key("api_request")
	id := []string{"ip=10.0.0.9", "user=zed", "request_type=web", "path=/x"}
	stdout, stderr, code := e.run(t, append([]string{"explain", "--json", "--redis", e.redisURL, "--limiter", "api_request",
		"--key-prefix", e.prefix, "--rules-prefix", e.rulesPrefix}, id...)...) // no files: all from the document
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var ex explanation
	if err := json.Unmarshal([]byte(stdout), &ex); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"1 file skip_health no_match",
		"2 file per_user no_match",
		"3 file distinct_paths no_match",
		"4 published per_ip block 5/5",
		"5 default login_by_ip no_match",
	}
	if got := ruleLines(ex); !slices.Equal(got, want) {
		t.Fatalf("rules\n got %q\nwant %q", got, want)
	}
	src := "rule store " + key
	if !slices.Equal(ex.Tiers, []tierSummary{{"file", src, 3}, {"published", src, 1}, {"default", src, 3}}) {
		t.Fatalf("tiers %+v", ex.Tiers)
	}
	if !slices.Equal(ex.Overridden, []overriddenRule{{"default", "per_user", "file"}, {"default", "per_ip", "published"}}) {
		t.Fatalf("overridden %+v", ex.Overridden)
	}
	if *ex.RuleStore != (ruleStoreState{Key: key, Document: true}) || ex.Verdict.Rule != "per_ip" || ex.Verdict.Action != "block" {
		t.Fatalf("rule store %+v, verdict %+v", ex.RuleStore, ex.Verdict)
	}

	// An invalid document: the services skip it, and so does explain.
	if err := client.Set(ctx, key, `{"published_rules":{"rules":[{"name":"Bad Name"}]}}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	ex = e.expectRules(t, []string{
		"1 file skip_health no_match",
		"2 file per_user no_match",
		"3 file distinct_paths no_match",
		"4 default login_by_ip no_match",
		"5 default per_ip allow 5/1000",
	}, id...)
	if rs := ex.RuleStore; !rs.Document || !strings.Contains(rs.Error, "is invalid") {
		t.Fatalf("rule store %+v", rs)
	}
	if !slices.Equal(ex.Tiers, []tierSummary{{"file", e.rateLimits, 3}, {"default", e.available, 3}}) {
		t.Fatalf("tiers %+v", ex.Tiers)
	}

	// No document and no files: nothing to explain. The message names the
	// limiters the store holds and the one a typo meant, or says that the
	// prefix holds none (a mistyped --service).
	for _, c := range []struct{ limiter, prefix, want string }{
		{"other", e.rulesPrefix, "limiter other has no document in the rule store (key " + e.rulesPrefix + "other) and no --available-limiters was given: it has no rules here; the rule store holds api_request\n"},
		{"api_requst", e.rulesPrefix, `the rule store holds api_request; did you mean "api_request"?`},
		{"api_request", e.rulesPrefix + "typo:", `no rule documents under the prefix "` + e.rulesPrefix + `typo:"`},
	} {
		_, stderr, code = e.run(t, "explain", "--redis", e.redisURL, "--limiter", c.limiter, "--rules-prefix", c.prefix, "x=1")
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("explain --limiter %s --rules-prefix %s: exit %d: %s, want %q", c.limiter, c.prefix, code, stderr, c.want)
		}
	}
}

// A document without the default tier (a publish before any service seeded
// it) leaves the services on their own defaults, which only
// available_limiters.yaml knows: explain and clear refuse to go on without
// it, rather than give a verdict, or clear counters, from the published
// rules alone (the services' per_ip and login_by_ip still count).
func TestExplainDocumentWithoutDefaults(t *testing.T) {
	client := redistest.Client(t)
	e := newExplainEnv(t, client, redistest.URL(t), false)
	ctx := context.Background()
	store, err := rulestore.New(client, rulestore.Options{Prefix: e.rulesPrefix})
	if err != nil {
		t.Fatal(err)
	}
	published := must(config.RulesToProto([]ratelimit.Rule{{Name: "incident", Characteristics: []string{"ip"},
		Limit: 1, Period: time.Minute}}))
	if _, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api_request": published}}); err != nil {
		t.Fatal(err)
	}
	// The service counts one request under the published rule and its own
	// defaults.
	if err := store.Bind(e.limiter, e.local); err != nil {
		t.Fatal(err)
	}
	if err := store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	e.check(t, 1, ratelimit.Identifier{"ip": "10.0.0.9", "path": "/login"})
	id := []string{"ip=10.0.0.9", "path=/login"}
	for _, cmd := range []string{"explain", "clear"} {
		_, stderr, code := e.run(t, append([]string{cmd, "--redis", e.redisURL, "--limiter", "api_request",
			"--key-prefix", e.prefix, "--rules-prefix", e.rulesPrefix}, id...)...)
		if code != 1 || !strings.Contains(stderr, "has no default_rules tier") || !strings.Contains(stderr, "--available-limiters") {
			t.Errorf("%s without available_limiters.yaml: exit %d, want 1 naming the missing tier\n%s", cmd, code, stderr)
		}
	}
	// Given the file, the explanation holds the services' defaults.
	ex := e.expectRules(t, []string{
		"1 file skip_health no_match",
		"2 file per_user no_match",
		"3 file distinct_paths no_match",
		"4 published incident block 1/1",
		"5 default login_by_ip not_evaluated",
		"6 default per_ip not_evaluated",
	}, id...)
	key := store.Key("api_request")
	if !slices.Equal(ex.Tiers, []tierSummary{{"file", e.rateLimits, 3}, {"published", "rule store " + key, 1}, {"default", e.available, 3}}) {
		t.Fatalf("tiers %+v", ex.Tiers)
	}
	// And the clear removes the defaults' counters too.
	stdout, stderr, code := e.run(t, append([]string{"clear", "--redis", e.redisURL, "--limiter", "api_request",
		"--key-prefix", e.prefix, "--rules-prefix", e.rulesPrefix, "--available-limiters", e.available}, id...)...)
	if code != 0 || !strings.Contains(stdout, "cleared 3 keys") {
		t.Fatalf("clear with available_limiters.yaml: exit %d\n%s%s", code, stdout, stderr)
	}
}

// The same explanation on a Redis Cluster, where the rules' counters live in
// different slots.
func TestExplainCluster(t *testing.T) {
	addrs := redistest.ClusterAddrs(t)
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	e := newExplainEnv(t, redistest.ClusterClient(t), url, true)
	e.check(t, 4, ratelimit.Identifier{"user": "bob", "ip": "10.0.0.2", "request_type": "web", "path": "/login"})
	ex := e.explainJSON(t, "user=bob", "ip=10.0.0.2", "request_type=web", "path=/login")
	if got := ruleLines(ex)[3]; got != "4 default login_by_ip banned 3/2" {
		t.Fatalf("login_by_ip: %s", got)
	}
	e.expectRules(t, []string{
		"1 file skip_health no_match",
		"2 file per_user allow 0/3",
		"3 file distinct_paths allow 0/2",
		"4 default login_by_ip no_match",
		"5 default per_ip allow 2/1000", // bob's two checks before the ban; banned checks never count
	}, "user=alice", "ip=10.0.0.2", "request_type=api", "path=/api/a")
}
