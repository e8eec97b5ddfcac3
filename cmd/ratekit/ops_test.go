package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
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
)

// deployment is one real Redis deployment as the CLI reaches it.
type deployment struct {
	name    string
	cluster bool
	client  redis.UniversalClient
	url     string
}

func deployments(t *testing.T) []func(t *testing.T) deployment {
	return []func(t *testing.T) deployment{
		func(t *testing.T) deployment {
			return deployment{"standalone", false, redistest.Client(t), redistest.URL(t)}
		},
		func(t *testing.T) deployment {
			addrs := redistest.ClusterAddrs(t)
			return deployment{"cluster", true, redistest.ClusterClient(t), "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")}
		},
	}
}

func forEachDeployment(t *testing.T, f func(t *testing.T, d deployment)) {
	for i, mk := range deployments(t) {
		t.Run([]string{"standalone", "cluster"}[i], func(t *testing.T) { f(t, mk(t)) })
	}
}

// TestClear bans an identifier through the library, lifts the ban with
// `ratekit clear` and checks through the library that it is gone.
func TestClear(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, d deployment) {
		e := newExplainEnv(t, d.client, d.url, d.cluster)
		ctx := context.Background()
		bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.2", "request_type": "web", "path": "/login"}
		e.check(t, 3, bob) // login_by_ip: limit 2, the third bans for 900s
		if r := e.limiter.Peek(ctx, bob); !r.Blocked() || !r.Info.Banned {
			t.Fatalf("setup: bob is not banned: %+v", r)
		}
		clear := func(extra ...string) (string, string, int) {
			args := append([]string{"clear"}, e.flags()[1:]...)
			return e.run(t, append(args, extra...)...)
		}
		// The identifier first, flags after it; a dry run removes nothing.
		stdout, stderr, code := clear("ip=10.0.0.2", "path=/login", "user=bob", "request_type=web", "--dry-run")
		banKey := ""
		for _, k := range e.limiter.Keys(bob) {
			if strings.HasSuffix(k, ":ban") && strings.Contains(k, "login_by_ip") {
				banKey = k
			}
		}
		if code != 0 || stderr != "" || !strings.Contains(stdout, "  would remove ban "+banKey+"\n") ||
			!strings.HasSuffix(stdout, "dry run: 3 keys would be removed, nothing written\n") {
			t.Fatalf("dry run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		if n, err := d.client.Exists(ctx, banKey).Result(); err != nil || n != 1 {
			t.Fatalf("the dry run removed the ban: exists %d, %v", n, err)
		}

		stdout, stderr, code = clear("ip=10.0.0.2", "path=/login", "user=bob", "request_type=web")
		if code != 0 || !strings.Contains(stdout, "  removed ban "+banKey+"\n") || !strings.HasSuffix(stdout, "cleared 3 keys\n") {
			t.Fatalf("clear: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		oneAudit(t, stderr, map[string]any{"op": "clear", "limiter": "api_request", "keys_deleted": 3, "outcome": "ok",
			"identifier": "ip=10.0.0.2 path=/login request_type=web user=bob"})
		// `ratekit clear` is another process: the library's limiter sees it once
		// its cached ban ages out (ratelimit.BlockedCacheConfig.MaxAge, 1s).
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r := e.limiter.Peek(ctx, bob)
			if !r.Blocked() && r.Err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("15s after clear bob is still blocked: %+v", r)
			}
		}
		// Nothing left: a second clear removes nothing, says so and fails.
		_, stderr, code = clear("ip=10.0.0.2", "path=/login", "user=bob", "request_type=web")
		// (Other tests' clients named bob may hold keys under their prefixes.)
		if code != 1 || !strings.Contains(stderr, "no counter or ban of this identifier under "+fmt.Sprintf("%q", e.prefix)) || strings.Contains(stderr, "under "+fmt.Sprintf("%q", e.prefix)+" (") {
			t.Fatalf("second clear: exit %d\n%s", code, stderr)
		}

		// A typo in a key clears nothing: the warning names the key, the
		// exit code says nothing was found.
		_, stderr, code = clear("ipp=10.0.0.2", "--dry-run")
		if code != 1 || !strings.Contains(stderr, `warning: identifier key "ipp" is not one of the limiter's available_properties (ip, user, path, request_type): no rule may use it; did you mean "ip"?`) {
			t.Fatalf("typo: exit %d, stderr %s", code, stderr)
		}
		// A limiter without a document or files has no rules, so no keys.
		args := []string{"clear", "--redis", d.url, "--limiter", "other", "--rules-prefix", e.rulesPrefix, "x=1"}
		if d.cluster {
			args = append(args, "--cluster")
		}
		_, stderr, code = e.run(t, args...)
		if code != 1 || !strings.Contains(stderr, "ratekit clear: limiter other has no document in the rule store") {
			t.Fatalf("no rules: exit %d, stderr %s", code, stderr)
		}
		// An identifier is required.
		_, stderr, code = clear()
		if code != 2 || !strings.Contains(stderr, "clear needs the identifier") {
			t.Fatalf("no identifier: exit %d, stderr %s", code, stderr)
		}
	})
}

// TestExplainFlagsAfterIdentifier runs explain with --json after the
// identifier, and warns about a key outside available_properties.
func TestExplainFlagsAfterIdentifier(t *testing.T) {
	e := newExplainEnv(t, redistest.Client(t), redistest.URL(t), false)
	args := append([]string{"explain", "user=alice", "pth=/x", "--json"}, e.flags()[1:]...)
	stdout, stderr, code := e.run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	var ex explanation
	if err := json.Unmarshal([]byte(stdout), &ex); err != nil {
		t.Fatalf("not JSON (--json after the identifier was not read as a flag?): %v\n%s", err, stdout)
	}
	want := `identifier key "pth" is not one of the limiter's available_properties (ip, user, path, request_type): no rule may use it; did you mean "path"?`
	// (Other tests' counters of alice, under their own prefixes, may add a
	// warning naming them: explain says where an identifier's keys are.)
	if len(ex.Warnings) == 0 || ex.Warnings[0] != want || !strings.HasPrefix(stderr, "warning: "+want+"\n") {
		t.Fatalf("warnings %q, stderr %q", ex.Warnings, stderr)
	}
	// Without the file, a key that no rule reads is named.
	docless := []string{"explain", "--redis", e.redisURL, "--limiter", "api_request", "--key-prefix", e.prefix, "--rules-prefix", e.rulesPrefix}
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: e.rulesPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(context.Background(), map[string]tiers.Set{"api_request": e.local}); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = e.run(t, append(docless, "usr=alice", "user=alice", "zzzzzz=1")...)
	if code != 0 || !strings.HasPrefix(stderr, `warning: identifier key "usr" is used by none of the limiter's rules (pass --available-limiters to check it against available_properties); did you mean "user"?`+"\n"+
		`warning: identifier key "zzzzzz" is used by none of the limiter's rules (pass --available-limiters to check it against available_properties)`+"\n") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestServicePrefixes reads the Redis of a service made from the copier
// template (its prefixes, written here through the library as the template's
// internal/ratelimits does) with RATEKIT_REDIS_URL and RATEKIT_SERVICE only.
func TestServicePrefixes(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, d deployment) {
		ctx := context.Background()
		svc := fmt.Sprintf("svc_%d", time.Now().UnixNano()%1e12)
		store, err := rulestore.New(d.client, rulestore.Options{Prefix: "ratekit:rules:{" + svc + "}:"})
		if err != nil {
			t.Fatal(err)
		}
		rule := ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: 5,
			Period: time.Minute, Action: ratelimit.ActionLimit}
		if _, err := store.Seed(ctx, map[string]tiers.Set{"api_request": {Defaults: []ratelimit.Rule{rule}}}); err != nil {
			t.Fatal(err)
		}
		l, err := ratelimit.New(ratelimit.Config{Name: "api_request", Store: redisstore.New(d.client), KeyPrefix: "ratekit:" + svc + ":rl:",
			Rules: []ratelimit.Rule{rule}, Logger: slog.New(slog.DiscardHandler), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if r := l.Check(ctx, ratelimit.Identifier{"user": "alice"}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		env := []string{"RATEKIT_REDIS_URL=" + d.url, "RATEKIT_SERVICE=" + svc}
		var cluster []string
		if d.cluster {
			cluster = []string{"--cluster"}
		}
		code, stdout, stderr := ratekitEnv(t, "", env, append([]string{"rules", "list"}, cluster...)...)
		if code != 0 || !strings.Contains(stdout, "\napi_request  0     -          1 ") || !strings.Contains(stdout, "1 limiter, revision") {
			t.Fatalf("rules list: exit %d\n%s%s", code, stdout, stderr)
		}
		code, stdout, stderr = ratekitEnv(t, "", env, append([]string{"explain", "user=alice", "--limiter", "api_request", "--json"}, cluster...)...)
		var ex explanation
		if code != 0 || json.Unmarshal([]byte(stdout), &ex) != nil {
			t.Fatalf("explain: exit %d\n%s%s", code, stdout, stderr)
		}
		if len(ex.Rules) != 1 || ex.Rules[0].Count == nil || *ex.Rules[0].Count != 2 || ex.KeyPrefix != "ratekit:"+svc+":rl:" {
			t.Fatalf("explain did not read the service's counter: %s", stdout)
		}
		// A prefix on the command line wins over the environment's service.
		code, stdout, stderr = ratekitEnv(t, "", env, append([]string{"rules", "list", "--rules-prefix", "other:{x}:"}, cluster...)...)
		if code != exitInvalid || !strings.HasPrefix(stdout, "LIMITER") || !strings.Contains(stdout, "0 limiters") ||
			!strings.Contains(stderr, `no rule documents under the prefix "other:{x}:"`) {
			t.Fatalf("rules list with another prefix: exit %d\n%s%s", code, stdout, stderr)
		}
		// The former flag name still works.
		code, stdout, _ = ratekitEnv(t, "", []string{"RATEKIT_REDIS_URL=" + d.url}, append([]string{"rules", "list", "--prefix", "ratekit:rules:{" + svc + "}:"}, cluster...)...)
		if code != 0 || !strings.Contains(stdout, "1 limiter, revision") {
			t.Fatalf("rules list --prefix: exit %d\n%s", code, stdout)
		}
	})
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := ratekit(t, t.TempDir(), args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "ratekit ") || !strings.Contains(stdout, "("+runtime.Version()) {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	code, _, stderr := ratekit(t, t.TempDir(), "version", "extra")
	if code != 2 || !strings.Contains(stderr, "version takes no arguments") {
		t.Fatalf("version extra: exit %d, %s", code, stderr)
	}
}

// TestRulesDryRun runs publish, delete and gc with --dry-run: each prints the
// change rule by rule and writes nothing (the documents and the store's
// revision are the same before and after).
func TestRulesDryRun(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) { testRulesDryRun(t, newRulesCLI(t, cluster)) })
	}
}

// TestRulesDeleteDryRunNamesTier: a delete's dry run names a file or default
// rule as such, as the delete's error does (it said "not published" alone).
func TestRulesDeleteDryRunNamesTier(t *testing.T) {
	e := newRulesCLI(t, false)
	store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(context.Background(), map[string]tiers.Set{"pipelines_create": {
		File:     []ratelimit.Rule{{Name: "f", Characteristics: []string{"username"}, Action: ratelimit.ActionLimit, Limit: 5, Period: time.Minute}},
		Defaults: []ratelimit.Rule{{Name: "d", Characteristics: []string{"username"}, Action: ratelimit.ActionLimit, Limit: 5, Period: time.Minute}},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, dry := range [][]string{{"--dry-run"}, nil} {
		code, _, stderr := e.run(t, "delete", append([]string{"pipelines_create", "f", "d"}, dry...)...)
		want := "limiter pipelines_create: rule d is not published: it is in default_rules (the application's own); rule f is not published: it is in file_rules (edit rate_limits.yaml)"
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("delete %v of a default and a file rule: exit %d, %s\nwant %s", dry, code, stderr, want)
		}
	}
}

func testRulesDryRun(t *testing.T, e *rulesCLI) {
	ctx := context.Background()
	store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(ctx, map[string]tiers.Set{"user_sign_in": {Defaults: []ratelimit.Rule{{
		Name: "limit_user_sign_ins_by_username", Characteristics: []string{"username"}, Action: ratelimit.ActionLimit,
		Limit: 5, Period: 10 * time.Minute, BanFor: 15 * time.Minute,
	}}}}); err != nil {
		t.Fatal(err)
	}
	unchanged := func(step string) func() {
		rev, _ := store.Revision(ctx)
		docs := func() string {
			a, _ := e.raw(t, "user_sign_in")
			b, _ := e.raw(t, "pipelines_create")
			return a + "\n" + b
		}
		before := docs()
		return func() {
			t.Helper()
			if r, _ := store.Revision(ctx); r != rev || docs() != before {
				t.Fatalf("%s wrote: revision %d -> %d, documents\n%s\n->\n%s", step, rev, r, before, docs())
			}
		}
	}

	check := unchanged("publish --dry-run")
	code, stdout, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml", "--dry-run")
	want := `limiter pipelines_create (key ` + e.prefix + `pipelines_create), published_rules:
  (no document yet: it would be created)
  + per_user: limit 7 per 1m0s by username, match {root_namespace_plan: {one_of: ["free" "premium"]}}
limiter user_sign_in (key ` + e.prefix + `user_sign_in), published_rules:
  + limit_user_sign_ins_by_username: limit 3 per 10m0s by username, match {} (every request) (overrides the default rule of this name, inheriting its counter)
  + per_ip: limit 50 per 1m0s by ip, match {} (every request)
dry run: 3 changes, nothing written
`
	if code != 0 || stdout != want || cutUnseededNote(t, stderr, e.prefix, "pipelines_create") != "" {
		t.Fatalf("publish --dry-run: exit %d\nstdout\n%s\nwant\n%s\nstderr %s", code, stdout, want, stderr)
	}
	check()

	if code, stdout, stderr = e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish: exit %d\n%s%s", code, stdout, stderr)
	}
	changed := strings.Replace(readFile(t, e.dir, "publish.yaml"), "limit: 50", "limit: 60", 1)
	writeFile(t, e.dir, "publish2.yaml", changed)
	check = unchanged("publish --dry-run of a change")
	code, stdout, _ = e.run(t, "publish", "--dry-run", "--file", "publish2.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, `  = per_user: unchanged
`) || !strings.Contains(stdout, `  = limit_user_sign_ins_by_username: unchanged
  ~ per_ip:
      - limit 50 per 1m0s by ip, match {} (every request)
      + limit 60 per 1m0s by ip, match {} (every request)
dry run: 1 change, nothing written
`) {
		t.Fatalf("publish --dry-run of a change: exit %d\n%s", code, stdout)
	}
	check()

	check = unchanged("delete --dry-run")
	code, stdout, _ = e.run(t, "delete", "user_sign_in", "per_ip", "limit_user_sign_ins_by_username", "--dry-run")
	want = `limiter user_sign_in (key ` + e.prefix + `user_sign_in), published_rules:
  - limit_user_sign_ins_by_username: limit 3 per 10m0s by username, match {} (every request)
      the default rule of this name applies again: limit 5 per 10m0s by username, ban 15m0s, match {} (every request)
  - per_ip: limit 50 per 1m0s by ip, match {} (every request)
dry run: 2 changes, nothing written
`
	if code != 0 || stdout != want {
		t.Fatalf("delete --dry-run: exit %d\n%s\nwant\n%s", code, stdout, want)
	}
	code, _, stderr = e.run(t, "delete", "user_sign_in", "per_ip", "typo", "--dry-run")
	if code != 1 || !strings.Contains(stderr, "limiter user_sign_in: rule typo is not published; the delete would remove nothing") {
		t.Fatalf("delete --dry-run with a typo: exit %d, %s", code, stderr)
	}
	check()

	// gc: a limiter the list does not declare would be marked; no mark is written.
	retired := ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit, Limit: 1, Period: time.Minute}
	if _, err := store.Seed(ctx, map[string]tiers.Set{"retired": {Defaults: []ratelimit.Rule{retired}}}); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = e.run(t, "gc", "--dry-run", "--available-limiters", "available_limiters.yaml", "--grace", "2d")
	if code != 0 || !strings.Contains(stdout, "  ~ retired: not declared, would be marked as an orphan (deleted from ") ||
		!strings.HasSuffix(stdout, "dry run: 1 change, nothing written\n") {
		t.Fatalf("gc --dry-run: exit %d\n%s", code, stdout)
	}
	entries, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if !en.OrphanSince.IsZero() {
			t.Fatalf("gc --dry-run marked %s", en.Limiter)
		}
	}
	// After a real run the mark exists; within the grace the dry run keeps it.
	if code, stdout, _ = e.run(t, "gc", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("gc: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = e.run(t, "gc", "--dry-run", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, "  = retired: orphan since ") || !strings.HasSuffix(stdout, "dry run: 0 changes, nothing written\n") {
		t.Fatalf("gc --dry-run within the grace: exit %d\n%s", code, stdout)
	}
}

// TestPublishAvailableCheck: publish refuses a limiter or property that
// available_limiters.yaml does not declare; only --skip-available-check
// publishes without that check.
func TestPublishAvailableCheck(t *testing.T) {
	e := newRulesCLI(t, false)
	writeFile(t, e.dir, "undeclared.yaml", `rate_limits:
  not_declared:
    - name: per_ip
      characteristics: [ip]
      limit: 5
      period_s: 60
      action: limit
`)
	writeFile(t, e.dir, "typo.yaml", `rate_limits:
  user_sign_in:
    - name: per_user
      characteristics: [usernme]
      limit: 5
      period_s: 60
      action: limit
`)
	code, _, stderr := e.run(t, "publish", "--file", "undeclared.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || !strings.Contains(stderr, "undeclared.yaml:2:3") || !strings.Contains(stderr, "not_declared") {
		t.Fatalf("undeclared limiter: exit %d, %s", code, stderr)
	}
	code, _, stderr = e.run(t, "publish", "--file", "typo.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || !strings.Contains(stderr, `typo.yaml:4:25: user_sign_in/per_user: characteristic "usernme" is not one of the limiter's available_properties`) {
		t.Fatalf("undeclared property: exit %d, %s", code, stderr)
	}
	code, _, stderr = e.run(t, "publish", "--file", "undeclared.yaml")
	if code != 2 || !strings.Contains(stderr, "rules publish needs --available-limiters FILE") {
		t.Fatalf("no list: exit %d, %s", code, stderr)
	}
	if _, ok := e.raw(t, "not_declared"); ok {
		t.Fatal("a refused publish wrote")
	}
	// The dry run promises what the write does, the note included.
	code, stdout, stderr := e.run(t, "publish", "--file", "undeclared.yaml", "--skip-available-check", "--dry-run")
	if code != 0 || !strings.Contains(stderr, "--skip-available-check: checked against the schema only") {
		t.Fatalf("--skip-available-check --dry-run: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, ok := e.raw(t, "not_declared"); ok {
		t.Fatal("a dry run wrote")
	}
	code, stdout, stderr = e.run(t, "publish", "--file", "undeclared.yaml", "--skip-available-check")
	if code != 0 || !strings.HasPrefix(stdout, "published 1 rule for 1 limiter") || !strings.Contains(stderr, "--skip-available-check: checked against the schema only") {
		t.Fatalf("--skip-available-check: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, ok := e.raw(t, "not_declared"); !ok {
		t.Fatal("--skip-available-check did not publish")
	}
}

// TestConflictMarkers: a file left with merge conflict markers is refused
// with its file and line, by validate and by publish.
func TestConflictMarkers(t *testing.T) {
	conflicted := `rate_limits:
  user_sign_in:
<<<<<<< HEAD
    - name: per_ip
      characteristics: [ip]
=======
    - name: per_ip_v2
      characteristics: [ip]
>>>>>>> feature
      limit: 5
      period_s: 60
      action: limit
`
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"rate_limits.yaml":        conflicted,
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	want := `rate_limits.yaml:3: unresolved merge conflict (line "<<<<<<< HEAD"): resolve it and remove the conflict markers` + "\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml")
	var res validateResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || res.Valid || len(res.Errors) != 1 ||
		res.Errors[0] != (validateError{File: "rate_limits.yaml", Line: 3, Message: `unresolved merge conflict (line "<<<<<<< HEAD"): resolve it and remove the conflict markers`}) {
		t.Fatalf("validate --json: exit %d, %v\n%s", code, err, stdout)
	}
	// The check is not fooled by markers that are not at the start of a line.
	writeFile(t, dir, "fine.yaml", "rate_limits:\n  user_sign_in:\n    - name: a  # ======= not a marker\n      characteristics: [ip]\n      limit: 5\n      period_s: 60\n      action: limit\n")
	if code, _, stderr = ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "fine.yaml"); code != 0 {
		t.Fatalf("a file without markers: exit %d, %s", code, stderr)
	}

	e := newRulesCLI(t, false)
	writeFile(t, e.dir, "conflicted.yaml", conflicted)
	code, _, stderr = e.run(t, "publish", "--file", "conflicted.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || stderr != `conflicted.yaml:3: unresolved merge conflict (line "<<<<<<< HEAD"): resolve it and remove the conflict markers`+"\n" {
		t.Fatalf("publish: exit %d, %q", code, stderr)
	}
}

// TestValidateJSON: the machine-readable form of a valid and an invalid run.
func TestValidateJSON(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"rate_limits.yaml":        readFixture(t, "rate_limits.yaml"),
		"typo.yaml":               "rate_limits:\n  user_sign_in:\n    - name: per_user\n      characteristics: [usernme]\n      limit: 5\n      period_s: 60\n      action: limit\n",
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "rate_limits.yaml", "--json")
	var res validateResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 0 || stderr != "" {
		t.Fatalf("valid: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	if !res.Valid || len(res.Errors) != 0 || len(res.Limiters) != 3 || res.Limiters[0].Name != "pipelines_create" ||
		res.Limiters[0].RateLimitsRules == nil || *res.Limiters[0].RateLimitsRules != 4 || len(res.SkipRules) != 1 ||
		res.SkipRules[0].Rule != "pipelines_create_skip_app_defaults" || res.SkipRules[0].Match != "{} (every request)" {
		t.Fatalf("valid: %+v", res)
	}

	code, _, _ = ratekit(t, dir, "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "typo.yaml")
	if code != 2 { // "--json" is not a command
		t.Fatalf("flags before the command: exit %d", code)
	}
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "typo.yaml")
	res = validateResult{}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || res.Valid || len(res.Errors) != 1 {
		t.Fatalf("invalid: exit %d, %v\n%s", code, err, stdout)
	}
	got := res.Errors[0]
	if got.File != "typo.yaml" || got.Line != 4 || got.Column != 25 || got.Limiter != "user_sign_in" || got.Rule != "per_user" ||
		!strings.Contains(got.Message, `characteristic "usernme" is not one of the limiter's available_properties`) {
		t.Fatalf("invalid: %+v", got)
	}
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClearUnderTheWrongPrefix: a ban kept under one prefix, cleared and
// explained with another. clear removes nothing, names the prefix holding
// the keys and exits 1; explain warns that its zero counts are not the
// service's.
func TestClearUnderTheWrongPrefix(t *testing.T) {
	forEachDeployment(t, func(t *testing.T, d deployment) {
		e := newExplainEnv(t, d.client, d.url, d.cluster)
		ctx := context.Background()
		// An identifier of this run alone: other runs' keys are elsewhere too.
		ip := fmt.Sprintf("10.%d.%d.%d", time.Now().UnixNano()%250, os.Getpid()%250, len(d.name))
		bob := ratelimit.Identifier{"user": "bob", "ip": ip, "request_type": "web", "path": "/login"}
		e.check(t, 3, bob)
		t.Cleanup(func() { _, _ = e.limiter.Clear(ctx, bob) })
		if r := e.limiter.Peek(ctx, bob); !r.Blocked() {
			t.Fatalf("setup: bob is not banned: %+v", r)
		}
		wrong := e.prefix + "wrong:"
		args := func(cmd string, extra ...string) []string {
			a := append([]string{cmd}, e.flags()[1:]...)
			a = append(a, "--key-prefix", wrong, "ip="+ip, "path=/login", "user=bob", "request_type=web")
			return append(a, extra...)
		}
		for _, dry := range [][]string{{"--dry-run"}, nil} {
			stdout, stderr, code := e.run(t, args("clear", dry...)...)
			want := fmt.Sprintf("nothing cleared: no counter or ban of this identifier under %q, but its keys exist under another prefix: %q (3 keys); rerun with --key-prefix '%s'", wrong, e.prefix, e.prefix)
			if code != 1 || !strings.Contains(stderr, want) || strings.Contains(stdout, "cleared") {
				t.Fatalf("clear %v under the wrong prefix: exit %d\nstdout %s\nstderr %s\nwant %s", dry, code, stdout, stderr, want)
			}
		}
		if r := e.limiter.Peek(ctx, bob); !r.Blocked() {
			t.Fatalf("a clear under the wrong prefix lifted the ban: %+v", r)
		}
		stdout, stderr, code := e.run(t, args("explain")...)
		if code != 0 || !strings.Contains(stderr, fmt.Sprintf("warning: no counter of this identifier under %q, so the counts below are zero, but its keys exist under another prefix: %q", wrong, e.prefix)) {
			t.Fatalf("explain under the wrong prefix: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
	})
}

func TestServiceOf(t *testing.T) {
	for _, tt := range []struct {
		prefix, name string
		ok           bool
	}{
		{"ratekit:examples:rl:", "examples", true},
		{"ratekit:rl:", "", false},
		{"ratekit:a:b:rl:", "", false},
		{"other:x:rl:", "", false},
	} {
		if name, ok := serviceOf(tt.prefix); name != tt.name || ok != tt.ok {
			t.Errorf("serviceOf(%q) = %q, %v", tt.prefix, name, ok)
		}
	}
}

// TestValidateReportsTheFirstProblems: a file with more problems than
// config.MaxReportedErrors prints the first ones and a line with the count of
// the others, and --json gives that count as errors_omitted.
func TestValidateReportsTheFirstProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("rate_limits:\n  user_sign_in:\n")
	const n = config.MaxReportedErrors + 20
	for i := range n {
		fmt.Fprintf(&b, "    - {name: r%d, characteristics: [ip], limit: 5, period_s: 60, action: limit, bogus: 1}\n", i)
	}
	dir := writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"many.yaml":               b.String(),
	})
	code, stdout, stderr := ratekit(t, dir, "validate", "--available-limiters", "available_limiters.yaml", "--rate-limits", "many.yaml")
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if code != 1 || stdout != "" || len(lines) != config.MaxReportedErrors+1 ||
		!strings.HasPrefix(lines[0], "many.yaml:3:") ||
		lines[len(lines)-1] != fmt.Sprintf("... and 20 more (only the first %d problems are reported)", config.MaxReportedErrors) {
		t.Fatalf("validate: exit %d, stdout %q, %d lines of stderr, the last %q", code, stdout, len(lines), lines[len(lines)-1])
	}
	code, stdout, _ = ratekit(t, dir, "validate", "--json", "--available-limiters", "available_limiters.yaml", "--rate-limits", "many.yaml")
	var res validateResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || res.Valid ||
		len(res.Errors) != config.MaxReportedErrors || res.ErrorsOmitted != 20 || res.Errors[0].Rule != "r0" {
		t.Fatalf("validate --json: exit %d, %v: %d errors, %d omitted", code, err, len(res.Errors), res.ErrorsOmitted)
	}
}

// TestPublishDryRunOfADocumentRewritten: a document written by hand in
// another layout holds the very rules of the file, yet the publish rewrites
// it (its bytes differ) and raises the revision; the dry run says so rather
// than "0 changes".
func TestPublishDryRunOfADocumentRewritten(t *testing.T) {
	e := newRulesCLI(t, false)
	writeFile(t, e.dir, "one.yaml", `rate_limits:
  user_sign_in:
    - name: per_ip
      characteristics: [ip]
      limit: 50
      period_s: 60
      action: limit
`)
	spaced := `{"published_rules": {"rules": [{"name": "per_ip", "limit": 50, "period_s": 60, "action": "limit", "characteristics": ["ip"], "match": {}}]}}`
	if err := e.client.Set(context.Background(), e.prefix+"user_sign_in", spaced, 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.run(t, "publish", "--dry-run", "--file", "one.yaml", "--available-limiters", "available_limiters.yaml")
	want := `limiter user_sign_in (key ` + e.prefix + `user_sign_in), published_rules:
  = per_ip: unchanged
  ~ the stored document's bytes are not those the publish writes: it would be rewritten, its rules as they are
dry run: 1 change, nothing written
`
	if code != 0 || stdout != want {
		t.Fatalf("publish --dry-run: exit %d\nstdout\n%s\nwant\n%s\nstderr %s", code, stdout, want, stderr)
	}
	if got, _ := e.raw(t, "user_sign_in"); got != spaced {
		t.Fatalf("the dry run wrote %s", got)
	}
	code, stdout, stderr = e.run(t, "publish", "--file", "one.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, "; changed: user_sign_in (revision 1)") {
		t.Fatalf("publish: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// Now stored as the publish writes it, the dry run finds nothing to do.
	code, stdout, _ = e.run(t, "publish", "--dry-run", "--file", "one.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.HasSuffix(stdout, "  = per_ip: unchanged\ndry run: 0 changes, nothing written\n") {
		t.Fatalf("publish --dry-run after the publish: exit %d\n%s", code, stdout)
	}
}

// TestClearLeavesSharedCounters: clearing one client never resets a counter
// other clients share. An incident rule without characteristics blocked
// everyone on /hello; `ratekit clear ip=OTHER` (a client with no counter of
// its own) deleted that shared counter, said "cleared 1 key" and exited 0,
// and every client passed again. It clears nothing now, names the rule and
// why, and exits 1; the block stays.
func TestClearLeavesSharedCounters(t *testing.T) {
	e := newExplainEnvWith(t, redistest.Client(t), redistest.URL(t), false, `rate_limits:
  api_request:
    - name: block_hello_path
      match: {path: /hello}
      limit: 1
      period_s: 600
      action: limit
`)
	ctx := context.Background()
	abuser := ratelimit.Identifier{"ip": "10.7.7.7", "path": "/hello"}
	e.check(t, 2, abuser)
	if r := e.limiter.Peek(ctx, abuser); !r.Blocked() || r.Rule == nil || r.Rule.Name != "block_hello_path" {
		t.Fatalf("setup: not blocked by block_hello_path: %+v", r)
	}
	args := append([]string{"clear"}, e.flags()[1:]...)
	stdout, stderr, code := e.run(t, append(args, "ip=10.8.8.8")...)
	note := "note: rule block_hello_path left: its counter is shared with other clients (it has no characteristics: one counter for every client); to lift its block, delete or change the rule"
	if code != 1 || !strings.Contains(stderr, note) || strings.Contains(stdout, "cleared") {
		t.Fatalf("clear of another client: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// per_user is shared too for an identifier without a user.
	if !strings.Contains(stderr, `note: rule per_user left: its counter is shared with other clients (the identifier has no "user": the counter of every client without it)`) {
		t.Fatalf("no note for per_user:\n%s", stderr)
	}
	if r := e.limiter.Peek(ctx, ratelimit.Identifier{"ip": "10.9.9.9", "path": "/hello"}); !r.Blocked() {
		t.Fatalf("the shared block was lifted by clearing another client: %+v", r)
	}
	// The abuser's own counters go; the shared one stays.
	stdout, _, code = e.run(t, append(args, "ip=10.7.7.7", "path=/hello")...)
	if code != 0 || strings.Contains(stdout, "block_hello_path") || !strings.Contains(stdout, "per_ip") {
		t.Fatalf("clear of the abuser: exit %d\nstdout %s", code, stdout)
	}
	if r := e.limiter.Peek(ctx, abuser); !r.Blocked() {
		t.Fatalf("the shared block was lifted by clearing the abuser: %+v", r)
	}
}
