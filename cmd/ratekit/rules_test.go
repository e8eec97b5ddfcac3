package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// rulesCLI runs `ratekit rules` against one Redis deployment with a key
// prefix of its own.
type rulesCLI struct {
	dir    string
	flags  []string // --redis ... --prefix ...
	prefix string
	client redis.UniversalClient
}

func newRulesCLI(t *testing.T, cluster bool) *rulesCLI {
	t.Helper()
	e := &rulesCLI{prefix: redistest.Prefix(t) + "{rules}:"}
	if cluster {
		addrs := redistest.ClusterAddrs(t)
		e.client = redistest.ClusterClient(t)
		e.flags = []string{"--redis", "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr="), "--cluster"}
	} else {
		e.flags = []string{"--redis", redistest.URL(t)}
		e.client = redistest.Client(t)
	}
	// gc's scan covers the server's whole keyspace in one run, whatever the
	// tests sharing it hold.
	e.flags = append(e.flags, "--rules-prefix", e.prefix, "--scan-keys", strconv.Itoa(rulestore.MaxGCScanKeys))
	e.dir = writeFiles(t, map[string]string{
		"available_limiters.yaml": readFixture(t, "available_limiters.yaml"),
		"publish.yaml": `rate_limits:
  user_sign_in:
    - name: limit_user_sign_ins_by_username   # replaces the default
      characteristics: [username]
      limit: 3
      period_s: 600
      action: limit
    - name: per_ip
      characteristics: [ip]
      limit: 50
      period_s: 60
      action: limit
  pipelines_create:
    - name: per_user
      characteristics: [username]
      limit: 7
      period_s: 60
      action: limit
      match:
        root_namespace_plan: {one_of: [free, premium]}
`,
		"invalid.yaml": `rate_limits:
  user_sign_in:
    - name: good
      characteristics: [ip]
      limit: 3
      period_s: 60
      action: limit
  pipelines_create:
    - name: bad
      characteristics: [ip]
      limit: 0
      period_s: 60
      action: limit
`,
	})
	return e
}

func (e *rulesCLI) run(t *testing.T, sub string, args ...string) (int, string, string) {
	t.Helper()
	return ratekit(t, e.dir, append(append([]string{"rules", sub}, e.flags...), args...)...)
}

func (e *rulesCLI) raw(t *testing.T, limiter string) (string, bool) {
	t.Helper()
	v, err := e.client.Get(context.Background(), e.prefix+limiter).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

func TestRulesCLI(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := map[bool]string{false: "standalone", true: "cluster"}[cluster]
		t.Run(name, func(t *testing.T) { testRulesCLI(t, newRulesCLI(t, cluster)) })
	}
}

func testRulesCLI(t *testing.T, e *rulesCLI) {
	ctx := context.Background()
	// The service seeds its tiers, as at start-up (through the library).
	store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(ctx, map[string]tiers.Set{"user_sign_in": {Defaults: []ratelimit.Rule{{
		Name: "limit_user_sign_ins_by_username", Characteristics: []string{"username"},
		Limit: 5, Period: 10 * time.Minute, BanFor: 15 * time.Minute,
	}}}}); err != nil {
		t.Fatal(err)
	}

	// An invalid file writes nothing and names file, line and rule.
	code, stdout, stderr := e.run(t, "publish", "--file", "invalid.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "invalid.yaml:11:14: pipelines_create/bad: limit must be at least 1, got 0") ||
		!strings.Contains(stderr, `invalid.yaml:10:25: pipelines_create/bad: characteristic "ip" is not one of the limiter's available_properties`) {
		t.Fatalf("invalid publish: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	if _, ok := e.raw(t, "pipelines_create"); ok {
		t.Fatal("a rejected file wrote a document")
	}

	code, stdout, stderr = e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || stdout != "published 3 rules for 2 limiters; changed: pipelines_create, user_sign_in (revision 2)\n" {
		t.Fatalf("publish: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	// Only user_sign_in was seeded: the publish says so of pipelines_create.
	oneAudit(t, cutUnseededNote(t, stderr, e.prefix, "pipelines_create"), map[string]any{"op": "publish", "revision": 2, "outcome": "ok"})
	want := `{"default_rules":{"rules":[{"name":"limit_user_sign_ins_by_username","limit":5,"period_s":600,"action":"limit","characteristics":["username"],"ban_for_s":900,"match":{}}]},"file_rules":{"rules":[]},` +
		`"published_rules":{"rules":[{"name":"limit_user_sign_ins_by_username","limit":3,"period_s":600,"action":"limit","characteristics":["username"],"match":{}},` +
		`{"name":"per_ip","limit":50,"period_s":60,"action":"limit","characteristics":["ip"],"match":{}}]}}`
	if got, _ := e.raw(t, "user_sign_in"); got != want {
		t.Fatalf("stored\n got %s\nwant %s", got, want)
	}
	// Publishing the same file again changes nothing.
	code, stdout, _ = e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, "nothing changed") {
		t.Fatalf("republish: exit %d, %s", code, stdout)
	}

	code, stdout, _ = e.run(t, "list")
	wantList := `LIMITER           FILE  PUBLISHED  DEFAULT  NOTE
pipelines_create  -     1          -        
user_sign_in      0     2          1        
2 limiters, revision 2
`
	if code != 0 || stdout != wantList {
		t.Fatalf("list: exit %d\n%s\nwant\n%s", code, stdout, wantList)
	}

	// Flags after the argument work too.
	code, stdout, _ = ratekit(t, e.dir, append([]string{"rules", "show", "user_sign_in"}, e.flags...)...)
	wantShow := `limiter user_sign_in (key ` + e.prefix + `user_sign_in)

file_rules (rate_limits.yaml): 0 rules

published_rules (publish API): 2 rules
  limit_user_sign_ins_by_username  limit 3 per 10m0s by username, match {} (every request)
  per_ip                           limit 50 per 1m0s by ip, match {} (every request)

default_rules (application): 1 rule
  limit_user_sign_ins_by_username  limit 5 per 10m0s by username, ban 15m0s, match {} (every request)  overridden by the published rule of the same name

effective, in evaluation order: 2 rules
  1.  limit_user_sign_ins_by_username  published  limit 3 per 10m0s by username, match {} (every request)
  2.  per_ip                           published  limit 50 per 1m0s by ip, match {} (every request)
`
	if code != 0 || stdout != wantShow {
		t.Fatalf("show: exit %d\n%s\nwant\n%s", code, stdout, wantShow)
	}
	code, stdout, _ = e.run(t, "show", "--json", "user_sign_in")
	if code != 0 || stdout != want+"\n" {
		t.Fatalf("show --json: exit %d, %s", code, stdout)
	}
	code, _, stderr = e.run(t, "show", "nothing_here")
	if code != 1 || !strings.Contains(stderr, "limiter nothing_here has no document") {
		t.Fatalf("show of a missing document: exit %d, %s", code, stderr)
	}
	code, _, stderr = e.run(t, "show", "user_sign_ni")
	if code != 1 || !strings.Contains(stderr, `did you mean "user_sign_in"?`) {
		t.Fatalf("show of a misspelt limiter: exit %d, %s", code, stderr)
	}

	// Delete is all or nothing.
	code, _, stderr = e.run(t, "delete", "user_sign_in", "per_ip", "typo")
	if code != 1 || !strings.Contains(stderr, "rule typo is not published") {
		t.Fatalf("delete with a typo: exit %d, %s", code, stderr)
	}
	if got, _ := e.raw(t, "user_sign_in"); got != want {
		t.Fatal("a failed delete changed the document")
	}
	// A rule named twice is deleted, and told, once (as the dry run tells it).
	code, stdout, _ = e.run(t, "delete", "user_sign_in", "per_ip", "limit_user_sign_ins_by_username", "per_ip")
	if code != 0 || stdout != "deleted from user_sign_in: per_ip, limit_user_sign_ins_by_username (revision 3)\n" {
		t.Fatalf("delete: exit %d, %s", code, stdout)
	}
	if got, _ := e.raw(t, "user_sign_in"); strings.Contains(got, "published_rules") {
		t.Fatalf("published tier left: %s", got)
	}

	// GC: a limiter the list no longer declares is marked, not deleted.
	retired := &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: proto.Uint32(1), PeriodS: proto.Uint32(60)}
	if _, err := store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"retired": {Rules: []*configv1.Rule{retired}}}}); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = e.run(t, "gc", "--available-limiters", "available_limiters.yaml", "--grace", "2d")
	if code != 0 || !strings.Contains(stdout, "grace 48h0m0s\n  marked as orphans: retired\n") {
		t.Fatalf("gc: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = e.run(t, "gc", "--available-limiters", "available_limiters.yaml")
	if code != 0 || !strings.Contains(stdout, "  orphan retired: since ") {
		t.Fatalf("second gc: exit %d\n%s", code, stdout)
	}
	if _, ok := e.raw(t, "retired"); !ok {
		t.Fatal("deleted within the grace period")
	}
	code, stdout, _ = e.run(t, "list", "--json")
	var listed struct {
		Revision int64
		Limiters []listEntry
	}
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil || code != 0 {
		t.Fatalf("list --json: exit %d, %v\n%s", code, err, stdout)
	}
	if len(listed.Limiters) != 3 || listed.Limiters[1].Limiter != "retired" || listed.Limiters[1].OrphanSince == nil || listed.Limiters[2].Published != nil {
		t.Fatalf("list --json: %+v", listed.Limiters)
	}
}

func TestRulesCLIUsage(t *testing.T) {
	dir := writeFiles(t, map[string]string{"rules.yaml": "rate_limits: {}\n"})
	unused := "redis://" + redistest.UnusedAddr(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"rules"}, 2, "rules needs a command"},
		{[]string{"rules", "frob", "--redis", unused}, 2, `unknown rules command "frob"`},
		{[]string{"rules", "list"}, 2, "rules list: no Redis: give --redis URL or set RATEKIT_REDIS_URL"},
		{[]string{"rules", "show", "--redis", unused}, 2, "rules show: wrong arguments"},
		{[]string{"rules", "delete", "--redis", unused, "lim"}, 2, "rules delete: wrong arguments"},
		{[]string{"rules", "publish", "--redis", unused}, 2, "rules publish needs --file FILE"},
		{[]string{"rules", "publish", "--redis", unused, "--file", "nope.yaml", "--skip-available-check"}, 2, "nope.yaml: no such file"},
		{[]string{"rules", "publish", "--redis", unused, "--file", "rules.yaml"}, 2, "rules publish needs --available-limiters FILE"},
		{[]string{"rules", "show", "--redis", unused, "--dry-run", "lim"}, 2, "--dry-run is for publish, delete, remove and gc"},
		// --json on a write printed text, exit 0, after writing.
		{[]string{"rules", "publish", "--redis", unused, "--file", "rules.yaml", "--skip-available-check", "--json"}, 2, "rules publish prints text: --json is for list and show"},
		{[]string{"rules", "delete", "--redis", unused, "lim", "r", "--json"}, 2, "rules delete prints text: --json is for list and show"},
		{[]string{"rules", "remove", "--redis", unused, "lim", "--json"}, 2, "rules remove prints text: --json is for list and show"},
		{[]string{"rules", "gc", "--redis", unused, "--available-limiters", "nope.yaml", "--json"}, 2, "rules gc prints text: --json is for list and show"},
		{[]string{"rules", "gc", "--redis", unused}, 2, "rules gc needs --available-limiters FILE"},
		{[]string{"rules", "gc", "--redis", unused, "--available-limiters", "nope.yaml"}, 2, "nope.yaml: no such file"},
		{[]string{"rules", "gc", "--redis", unused, "--grace", "soon"}, 2, `--grace: "soon" is not a positive duration`},
		{[]string{"rules", "gc", "--redis", unused, "--available-limiters", "nope.yaml", "--scan-keys", "0"}, 2, "--scan-keys 0: want 1 to 1099511627776"},
		{[]string{"rules", "gc", "--redis", unused, "--available-limiters", "nope.yaml", "--scan-keys", "1099511627777"}, 2, "--scan-keys 1099511627777: want 1 to"},
		{[]string{"rules", "list", "--redis", unused, "--cluster", "--prefix", "labkit:ratelimit:rules:"}, 2, "has no {hash tag}"},
		{[]string{"rules", "list", "--redis", unused}, 1, "connection refused"},
		// A limiter or rule name no document can have is a usage error,
		// refused before Redis is asked, and quoted at most 80 bytes long.
		{[]string{"rules", "delete", "--redis", unused, "lim", "ok", "Bad-Name"}, 2, `rules delete: rule name "Bad-Name" must match ^[a-z0-9_]{1,64}$`},
		{[]string{"rules", "delete", "--redis", unused, "--dry-run", "lim", "Bad-Name"}, 2, `rules delete: rule name "Bad-Name" must match`},
		{[]string{"rules", "delete", "--redis", unused, "lim", strings.Repeat("b", 100000)}, 2, `rule name "` + strings.Repeat("b", 80) + `" must match`},
		{[]string{"rules", "show", "--redis", unused, "Bad Name"}, 2, `rules show: limiter name "Bad Name" must match ^[a-z0-9_]{1,64}$`},
		{[]string{"rules", "remove", "--redis", unused, "Bad Name"}, 2, `rules remove: limiter name "Bad Name" must match`},
		{[]string{"rules", "show", "--redis", unused, "HTTP_request"}, 2, `must match ^[a-z0-9_]{1,64}$; did you mean http_request?`},
		{[]string{"rules", "delete", "--redis", unused, "Bad Name", "r"}, 2, `rules delete: limiter name "Bad Name" must match`},
		{[]string{"rules", "show", "--redis", unused, strings.Repeat("a", 100000)}, 2, `limiter name "` + strings.Repeat("a", 80) + `" must match`},
	} {
		code, _, stderr := ratekit(t, dir, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, stderr, tc.code, tc.msg)
		}
	}
	code, stdout, _ := ratekit(t, dir, "help", "rules")
	if code != 0 || !strings.HasPrefix(stdout, "usage: ratekit rules COMMAND") {
		t.Fatalf("help rules: exit %d, %s", code, stdout)
	}
}

// TestRulesListPastMaxReadBytes: with more than rulestore.MaxReadBytes of
// documents, list shows the limiters it did not read as NOT READ, not as
// invalid, says the listing is partial and exits 1; --json marks them
// not_read; show still reads each.
func TestRulesListPastMaxReadBytes(t *testing.T) {
	e := newRulesCLI(t, false)
	ctx := context.Background()
	doc := `{"published_rules":{"rules":[{"name":"r","characteristics":["user"],"limit":1,"period_s":60,"action":"limit"}]}}`
	doc += strings.Repeat(" ", ratelimit.MaxDocumentBytes-len(doc)) // valid, 1 MiB
	n := rulestore.MaxReadBytes/ratelimit.MaxDocumentBytes + 1
	for i := range n {
		name := fmt.Sprintf("l%02d", i)
		if err := e.client.Set(ctx, e.prefix+name, doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.client.SAdd(ctx, e.prefix+"@index", name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("l%02d", n-1)
	code, stdout, stderr := e.run(t, "list")
	lines := strings.Split(stdout, "\n")
	if code != 1 || !strings.HasPrefix(strings.Join(strings.Fields(lines[n]), " "), last+" - - - NOT READ: ") || strings.Contains(stdout, "INVALID") ||
		!strings.Contains(lines[n], "(ratekit rules show --rules-prefix '"+e.prefix+"' "+last+" reads it)") ||
		!strings.Contains(stderr, "the list is partial: 1 document not read") || strings.Contains(stderr, "cannot be read by the services") {
		t.Fatalf("list: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := strings.Join(strings.Fields(lines[n-1]), " "); got != fmt.Sprintf("l%02d - 1 -", n-2) {
		t.Fatalf("list: the entry before the bound is %q, want its document read", lines[n-1])
	}
	code, stdout, _ = e.run(t, "list", "--json")
	var res struct{ Limiters []listEntry }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || len(res.Limiters) != n ||
		!res.Limiters[n-1].NotRead || res.Limiters[n-2].NotRead || res.Limiters[n-2].Published == nil {
		t.Fatalf("list --json: exit %d, %v\n%.2000s", code, err, stdout)
	}
	if code, stdout, stderr := e.run(t, "show", last); code != 0 {
		t.Fatalf("show %s: exit %d\n%.500s%s", last, code, stdout, stderr)
	}
	// The gc dry run cannot tell whether an unread document holds published
	// rules: it says so instead of saying nothing.
	if err := e.client.HSet(ctx, e.prefix+"@orphans", last, "1").Err(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = e.run(t, "gc", "--dry-run", "--available-limiters", "available_limiters.yaml")
	// The show it names reads this prefix (--rules-prefix, as the test's
	// commands are run), not the default one, where it would find nothing.
	want := fmt.Sprintf("its document %s%s would be deleted (not read here, past rulestore.MaxReadBytes: ratekit rules show --rules-prefix '%s' %s tells whether it holds published rules)", e.prefix, last, e.prefix, last)
	if code != 0 || !strings.Contains(stdout, want) {
		t.Fatalf("gc --dry-run: exit %d\n%s%s\nwant a line containing %s", code, stdout, stderr, want)
	}
}

// TestRulesListEmptyPrefixFails: the drill's `rules list --service shopp`
// (a typo) exited 0 with "0 limiters" and a note, a success for nothing: a
// list of a prefix that holds no document exits 1, in text and JSON, and
// names where a service's documents are; the service's own prefix lists.
func TestRulesListEmptyPrefixFails(t *testing.T) {
	url := redistest.URL(t)
	service := "shop" + strings.Split(redistest.Prefix(t), ":")[2] // of this test alone
	store, err := rulestore.New(redistest.Client(t), rulestore.Options{Prefix: "ratekit:rules:{" + service + "}:"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Seed(context.Background(), map[string]tiers.Set{"user_sign_in": {File: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 5, Period: time.Minute}}}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, asJSON := range [][]string{nil, {"--json"}} {
		code, stdout, stderr := ratekit(t, dir, append([]string{"rules", "list", "--redis", url, "--service", service + "p"}, asJSON...)...)
		want := fmt.Sprintf("ratekit rules: no rule documents under the prefix %q; a service made from the copier template keeps them under \"ratekit:rules:{SERVICE}:\" (--service SERVICE)\n", "ratekit:rules:{"+service+"p}:")
		if code != exitInvalid || stderr != want {
			t.Fatalf("list %q of a mistyped service: exit %d, want 1\nstdout:\n%s\nstderr %q\nwant %q", asJSON, code, stdout, stderr, want)
		}
		if code, stdout, stderr := ratekit(t, dir, append([]string{"rules", "list", "--redis", url, "--service", service}, asJSON...)...); code != exitOK || !strings.Contains(stdout, "user_sign_in") {
			t.Fatalf("list %q of the service: exit %d\n%s%s", asJSON, code, stdout, stderr)
		}
	}
}

// A number of days past the longest time.Duration is refused, not wrapped
// around to a short grace that would delete every orphan at once.
func TestParseDays(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"7d", 7 * 24 * time.Hour, ""},
		{"36h", 36 * time.Hour, ""},
		{"106751d", 106751 * 24 * time.Hour, ""},
		{"106752d", 0, `"106752d" is more than 106751d`},
		{"213504d", 0, `"213504d" is more than 106751d`}, // wrapped to 25 minutes
		{"99999999999999999999d", 0, "is more than 106751d"},
		{"0d", 0, "is not a positive number of days"},
		{"-3d", 0, "is not a positive number of days"},
		{"-99999999999999999999d", 0, "is not a positive number of days"},
		{"xd", 0, "is not a positive number of days"},
		{"-1h", 0, "is not a positive duration"},
	} {
		got, err := parseDays(tt.in)
		if tt.err == "" && (err != nil || got != tt.want) || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("parseDays(%q) = %v, %v; want %v, %q", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// gc --dry-run says what gc then does, and writes nothing. It read the
// store with List, which refuses an index member longer than a name and an
// index of another Redis type (both of which gc removes or replaces, and
// whose error names gc), and parsed marks with strconv, which reads "+1" as
// a time long past where gc reads no time and marks the limiter again.
func TestGCDryRunIsTheRun(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("x", 65)
	for _, tt := range []struct {
		name    string
		setup   func(t *testing.T, e *rulesCLI)
		dry, gc []string // lines each prints
	}{
		{"a member longer than a name", func(t *testing.T, e *rulesCLI) {
			for _, cmd := range [][]any{{"sadd", e.prefix + "@index", long}, {"set", e.prefix + long, "{}"}} {
				if err := e.client.Do(ctx, cmd...).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}, []string{
			"  - 1 index member longer than any limiter name would be removed, with the documents they name",
			"  ~ retired: not declared, would be marked as an orphan (deleted from ",
			"dry run: 2 changes, nothing written",
		}, []string{
			"  marked as orphans: retired",
			"  removed 1 index member(s) longer than any limiter name, with their documents",
		}},
		{"a mark that is no time", func(t *testing.T, e *rulesCLI) {
			if err := e.client.HSet(ctx, e.prefix+"@orphans", "retired", "+1").Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ retired: not declared, would be marked as an orphan (deleted from ",
			"dry run: 1 change, nothing written",
		}, []string{
			"  marked as orphans: retired",
		}},
		{"an index of another type", func(t *testing.T, e *rulesCLI) {
			if err := e.client.Del(ctx, e.prefix+"@index").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.client.RPush(ctx, e.prefix+"@index", "retired").Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ the index " + "PREFIX@index is a Redis list, not a set: it would be replaced, the limiters written from then on are indexed",
			"  ~ retired: the scan found its document PREFIXretired unindexed: it would be indexed, and marked as an orphan (deleted from ",
			"dry run: 2 changes, nothing written",
		}, []string{
			"  replaced the index PREFIX@index, a Redis list, not a set: the limiters written from then on are indexed",
			"  found unindexed by the scan, indexed: retired",
			"  marked as orphans: retired",
		}},
		{"a document without its index entry", func(t *testing.T, e *rulesCLI) {
			if err := e.client.SRem(ctx, e.prefix+"@index", "retired").Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ retired: the scan found its document PREFIXretired unindexed: it would be indexed, and marked as an orphan (deleted from ",
			"  scan for unindexed documents: this gc would end a pass over the keyspace",
			"dry run: 1 change, nothing written",
		}, []string{
			"  found unindexed by the scan, indexed: retired",
			"  marked as orphans: retired",
			"  scan for unindexed documents: a pass over the keyspace ended",
		}},
		{"orphan marks of another type", func(t *testing.T, e *rulesCLI) {
			if err := e.client.Set(ctx, e.prefix+"@orphans", "hand written", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ the orphan marks PREFIX@orphans are a Redis string, not a hash: they would be replaced, each orphan is marked again",
			"  ~ retired: not declared, would be marked as an orphan",
			"dry run: 2 changes, nothing written",
		}, []string{
			"  replaced the orphan marks PREFIX@orphans, which are a Redis string, not a hash: each orphan is marked again",
			"  marked as orphans: retired",
		}},
		{"orphan marks over their bound", func(t *testing.T, e *rulesCLI) {
			fields := make([]any, 0, 2*(2*1024+1))
			for i := range 2*1024 + 1 {
				fields = append(fields, fmt.Sprintf("h%04d", i), "1")
			}
			if err := e.client.HSet(ctx, e.prefix+"@orphans", fields...).Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ the orphan marks PREFIX@orphans hold 2049 fields, more than gc keeps (docs/limits.md): they would be replaced, each orphan is marked again",
			"  ~ retired: not declared, would be marked as an orphan",
			"dry run: 2 changes, nothing written",
		}, []string{
			"  replaced the orphan marks PREFIX@orphans, which hold 2049 fields, more than gc keeps (docs/limits.md): each orphan is marked again",
			"  marked as orphans: retired",
		}},
		{"a marked document the index lost", func(t *testing.T, e *rulesCLI) {
			if err := e.client.HSet(ctx, e.prefix+"@orphans", "retired", "1").Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.client.SRem(ctx, e.prefix+"@index", "retired").Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  ~ retired: its document and orphan mark remain, unindexed: it would be indexed again, and collected after its grace",
			"dry run: 1 change, nothing written",
		}, []string{
			"  indexed again (a document and an orphan mark, unindexed): retired",
		}},
		{"marks of limiters no longer indexed", func(t *testing.T, e *rulesCLI) {
			if err := e.client.HSet(ctx, e.prefix+"@orphans", "removed", "1", "also_removed", "2").Err(); err != nil {
				t.Fatal(err)
			}
		}, []string{
			"  - 2 orphan marks of limiters no longer indexed would be removed",
			"  ~ retired: not declared, would be marked as an orphan",
			"dry run: 3 changes, nothing written",
		}, []string{
			"  removed 2 orphan marks of limiters no longer indexed",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newRulesCLI(t, false)
			store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
			if err != nil {
				t.Fatal(err)
			}
			retired := ratelimit.Rule{Name: "r", Action: ratelimit.ActionLimit, Limit: 1, Period: time.Minute}
			if _, err := store.Seed(ctx, map[string]tiers.Set{"retired": {Defaults: []ratelimit.Rule{retired}}}); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, e)
			keys := []string{e.prefix + "@index", e.prefix + "@orphans", e.prefix + "@rev", e.prefix + "@scan", e.prefix + "retired", e.prefix + long}
			dump := func() string {
				var b strings.Builder
				for _, k := range keys {
					v, _ := e.client.Dump(ctx, k).Result()
					fmt.Fprintf(&b, "%s=%q\n", k, v)
				}
				return b.String()
			}
			before := dump()
			code, stdout, stderr := e.run(t, "gc", "--dry-run", "--available-limiters", "available_limiters.yaml")
			lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			if code != 0 || !containsLines(stdout, tt.dry, e.prefix) || !strings.HasPrefix(lines[0], "gc dry run at ") {
				t.Fatalf("gc --dry-run: exit %d\n%s%s\nwant lines starting with %q", code, stdout, stderr, tt.dry)
			}
			for _, l := range lines[1 : len(lines)-1] { // a dry run never says it did something
				if !strings.Contains(l, " would ") && !strings.Contains(l, " kept until ") {
					t.Errorf("gc --dry-run printed %q, which says no 'would'", l)
				}
			}
			if after := dump(); after != before {
				t.Fatalf("gc --dry-run wrote:\n%s->\n%s", before, after)
			}
			code, stdout, stderr = e.run(t, "gc", "--available-limiters", "available_limiters.yaml")
			if code != 0 || !containsLines(stdout, tt.gc, e.prefix) || strings.Contains(stdout, "no orphans") {
				t.Fatalf("gc: exit %d\n%s%s\nwant lines starting with %q", code, stdout, stderr, tt.gc)
			}
		})
	}
}

// containsLines reports whether out has a line starting with each of want,
// PREFIX in it standing for prefix.
func containsLines(out string, want []string, prefix string) bool {
	for _, w := range want {
		w = strings.ReplaceAll(w, "PREFIX", prefix)
		if !strings.HasPrefix(out, w) && !strings.Contains(out, "\n"+w) {
			return false
		}
	}
	return true
}

// TestRulesDeleteDryRunUnderAFileRule: the delete of a published rule that a
// file rule of the same name overrides changes nothing in force: the file
// rule was and stays the one the services evaluate, whatever default_rules
// holds. The dry run said the default rule of the name applied again.
func TestRulesDeleteDryRunUnderAFileRule(t *testing.T) {
	e := newRulesCLI(t, false)
	ctx := context.Background()
	store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	rule := func(limit int64) ratelimit.Rule {
		return ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Action: ratelimit.ActionLimit, Limit: limit, Period: time.Minute}
	}
	if _, err := store.Seed(ctx, map[string]tiers.Set{"user_sign_in": {File: []ratelimit.Rule{rule(1)}, Defaults: []ratelimit.Rule{rule(3)}}}); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"); code != 0 {
		t.Fatalf("publish: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr := e.run(t, "delete", "user_sign_in", "per_ip", "--dry-run")
	want := "limiter user_sign_in (key " + e.prefix + "user_sign_in), published_rules:\n" +
		"  - per_ip: limit 50 per 1m0s by ip, match {} (every request)\n" +
		"      the file rule of this name stays in force, as it was: limit 1 per 1m0s by ip, match {} (every request)\n" +
		"dry run: 1 change, nothing written\n"
	if code != 0 || stdout != want {
		t.Fatalf("delete --dry-run: exit %d\nstdout\n%s\nwant\n%s\nstderr %s", code, stdout, want, stderr)
	}
}

// TestRulesPublishUnseeded: a publish under a prefix where no service seeded
// the limiter (a mistyped or forgotten --service: the incident rule lands
// where no service reads) succeeds, as after Redis lost its data, but says
// so, naming the limiters and the prefix; a gc that finds nothing under a
// prefix never written says so too. Under the services' prefix, seeded,
// neither says anything. Before, both reported plain success.
func TestRulesPublishUnseeded(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			e := newRulesCLI(t, cluster)
			note := `note: no service has seeded pipelines_create, user_sign_in under the prefix "` + e.prefix + `"`
			for _, step := range []string{"first publish", "dry run", "second publish"} {
				args := []string{"--file", "publish.yaml", "--available-limiters", "available_limiters.yaml"}
				if step == "dry run" {
					args = append(args, "--dry-run")
				}
				// The second publish finds the documents of the first: published
				// rules alone, which no service seeded either.
				code, stdout, stderr := e.run(t, "publish", args...)
				if code != 0 || !strings.Contains(stderr, note) || !strings.Contains(stderr, "(--service SERVICE)") {
					t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", step, code, stdout, stderr)
				}
			}
			empty := newRulesCLI(t, cluster)
			code, stdout, stderr := empty.run(t, "gc", "--available-limiters", "available_limiters.yaml")
			if code != 0 || !strings.Contains(stdout, "no orphans") || !strings.Contains(stderr, `note: no rule documents under the prefix "`+empty.prefix+`"`) {
				t.Fatalf("gc of an empty prefix: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			code, stdout, stderr = empty.run(t, "gc", "--available-limiters", "available_limiters.yaml", "--dry-run")
			if code != 0 || !strings.Contains(stderr, `note: no rule documents under the prefix "`+empty.prefix+`"`) {
				t.Fatalf("gc --dry-run of an empty prefix: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}

			// The services seed their tiers: the same publish says nothing more.
			store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Seed(context.Background(), map[string]tiers.Set{"user_sign_in": {}, "pipelines_create": {}}); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr = e.run(t, "publish", "--file", "publish.yaml", "--available-limiters", "available_limiters.yaml", "--dry-run")
			if code != 0 || stderr != "" {
				t.Fatalf("dry run after the seed: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			code, stdout, stderr = e.run(t, "gc", "--available-limiters", "available_limiters.yaml")
			if code != 0 || strings.Contains(stderr, "note:") {
				t.Fatalf("gc of a seeded prefix: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
		})
	}
}

// TestRulesPublishLimiterTypo: a publish with --skip-available-check to a
// mistyped limiter (http_requst) lands where no service reads; it names the
// seeded limiter it is a typo of, dry run or not. Before, a note said only
// that no service seeded http_requst, and the publish reported success.
func TestRulesPublishLimiterTypo(t *testing.T) {
	const typo = "rate_limits:\n  http_requst:\n    - {name: incident_block_all, characteristics: [ip], limit: 1, period_s: 3600, action: limit}\n"
	const want = "warning: http_requst: did you mean http_request? A service seeded http_request under this prefix; none reads http_requst\n"
	for _, cluster := range []bool{false, true} {
		e := newRulesCLI(t, cluster)
		if err := os.WriteFile(filepath.Join(e.dir, "typo.yaml"), []byte(typo), 0o644); err != nil {
			t.Fatal(err)
		}
		store, err := rulestore.New(e.client, rulestore.Options{Prefix: e.prefix})
		if err != nil {
			t.Fatal(err)
		}
		// A limiter seeded with no tier gets no document: give it a default.
		seed := tiers.Set{Defaults: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 5, Period: time.Minute}}}
		if _, err := store.Seed(context.Background(), map[string]tiers.Set{"http_request": seed}); err != nil {
			t.Fatal(err)
		}
		for _, dry := range []bool{true, false} {
			t.Run(fmt.Sprintf("cluster=%v/dry-run=%v", cluster, dry), func(t *testing.T) {
				args := []string{"--file", "typo.yaml", "--skip-available-check"}
				if dry {
					args = append(args, "--dry-run")
				}
				code, stdout, stderr := e.run(t, "publish", args...)
				if code != 0 || !strings.Contains(stderr, want) {
					t.Fatalf("exit %d, want %q\nstdout %s\nstderr %s", code, want, stdout, stderr)
				}
			})
		}
	}
}

// cutUnseededNote returns stderr without the note a publish prints of the
// limiters (names, comma-separated) no service seeded under prefix,
// failing unless it is there.
func cutUnseededNote(t *testing.T, stderr, prefix, names string) string {
	t.Helper()
	note := fmt.Sprintf("note: no service has seeded %s under the prefix %q ", names, prefix)
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(line, note) {
			return strings.Replace(stderr, line, "", 1)
		}
	}
	t.Fatalf("no note %q in stderr %q", note, stderr)
	return ""
}

// TestRulesShowRemoveHint: the remove command that show and a delete's dry
// run suggest for a document no service loads names the prefix they read,
// so that running it removes that document. Before, the hint was `ratekit
// rules remove LIMITER`, which under the default prefix found no document
// and removed nothing.
func TestRulesShowRemoveHint(t *testing.T) {
	ctx := context.Background()
	url := redistest.URL(t)
	client := redistest.Client(t)
	svc := fmt.Sprintf("svc_%d", time.Now().UnixNano()%1e12)
	for _, tc := range []struct {
		flags []string // how the operator names the prefix
		hint  string   // the flags the hint must carry
	}{
		{[]string{"--service", svc}, "--service " + svc},
		{[]string{"--rules-prefix", "ratekit:rules:{" + svc + "}:"}, "--rules-prefix 'ratekit:rules:{" + svc + "}:'"},
	} {
		key := "ratekit:rules:{" + svc + "}:api_request"
		if err := client.HSet(ctx, key, "a", "b").Err(); err != nil { // a key no service loads
			t.Fatal(err)
		}
		t.Cleanup(func() {
			client.Del(context.Background(), key, "ratekit:rules:{"+svc+"}:@rev", "ratekit:rules:{"+svc+"}:@index")
		})
		args := append([]string{"--redis", url}, tc.flags...)
		want := "ratekit rules remove " + tc.hint + " api_request"
		for _, sub := range [][]string{{"show", "api_request"}, {"delete", "--dry-run", "api_request", "r"}} {
			code, _, stderr := ratekit(t, "", append(append([]string{"rules"}, sub...), args...)...)
			if code != 1 || !strings.Contains(stderr, "("+want+" deletes ") {
				t.Fatalf("rules %v %v: exit %d, want the hint %q in\n%s", sub, tc.flags, code, want, stderr)
			}
		}
		hinted := append(strings.Fields(strings.TrimPrefix(want, "ratekit ")), "--redis", url)
		for i, f := range hinted {
			hinted[i] = strings.Trim(f, "'") // the shell's quotes
		}
		if code, stdout, stderr := ratekit(t, "", hinted...); code != 0 || !strings.Contains(stdout, "removed "+key) {
			t.Fatalf("the hinted %v: exit %d\n%s%s", hinted, code, stdout, stderr)
		}
	}
}
