package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/core/rulestore"
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
		if code != 0 || stderr != "" || !strings.Contains(stdout, "  removed ban "+banKey+"\n") || !strings.HasSuffix(stdout, "cleared 3 keys\n") {
			t.Fatalf("clear: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
		if r := e.limiter.Peek(ctx, bob); r.Blocked() || r.Err != nil {
			t.Fatalf("after clear bob is still blocked: %+v", r)
		}
		// Nothing left: a second clear removes nothing and says so.
		stdout, _, code = clear("ip=10.0.0.2", "path=/login", "user=bob", "request_type=web")
		if code != 0 || !strings.HasSuffix(stdout, "cleared 0 keys\n") {
			t.Fatalf("second clear: exit %d\n%s", code, stdout)
		}

		// A typo in a key clears nothing: the warning names the key.
		_, stderr, code = clear("ipp=10.0.0.2", "--dry-run")
		if code != 0 || !strings.Contains(stderr, `warning: identifier key "ipp" is not one of the limiter's available_properties (ip, user, path, request_type)`) {
			t.Fatalf("typo: exit %d, stderr %s", code, stderr)
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
	args := append([]string{"explain", "user=alice", "usernme=alice", "--json"}, e.flags()[1:]...)
	stdout, stderr, code := e.run(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	var ex explanation
	if err := json.Unmarshal([]byte(stdout), &ex); err != nil {
		t.Fatalf("not JSON (--json after the identifier was not read as a flag?): %v\n%s", err, stdout)
	}
	want := `identifier key "usernme" is not one of the limiter's available_properties (ip, user, path, request_type): no rule may use it`
	if len(ex.Warnings) != 1 || ex.Warnings[0] != want || stderr != "warning: "+want+"\n" {
		t.Fatalf("warnings %q, stderr %q", ex.Warnings, stderr)
	}
	// Without the file, a key that no rule reads is named.
	docless := []string{"explain", "--redis", e.redisURL, "--limiter", "api_request", "--key-prefix", e.prefix, "--rules-prefix", e.rulesPrefix}
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: e.rulesPrefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(context.Background(), map[string]rulestore.Tiers{"api_request": e.local}); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = e.run(t, append(docless, "usernme=alice", "user=alice")...)
	if code != 0 || stderr != `warning: identifier key "usernme" is used by none of the limiter's rules (pass --available-limiters to check it against available_properties)`+"\n" {
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
		rule := ratelimit.Rule{Name: "per_user", Characteristics: []string{"user"}, Limit: ratelimit.Static(5),
			Period: ratelimit.StaticPeriod(time.Minute), Action: ratelimit.ActionLimit}
		if _, err := store.Seed(ctx, map[string]rulestore.Tiers{"api_request": {Defaults: []ratelimit.Rule{rule}}}); err != nil {
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
		if code != 0 || !strings.HasPrefix(stdout, "LIMITER") || !strings.Contains(stdout, "0 limiters") ||
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
