package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestExplainRemoteTier: with --rules-service, the rules service's answer
// (the JSON form of GetRules, as ratekit-rules serves it on POST /v1/rules)
// is the highest tier; a rule of the same name replaces the file's and
// reads its counter; an invalid answer is shown and left out, as the services
// leave it out.
func TestExplainRemoteTier(t *testing.T) {
	client := redistest.Client(t)
	e := newExplainEnv(t, client, redistest.URL(t), false)
	var mu sync.Mutex
	var asked []map[string]any
	answer := `{"rules": {"rules": [{"name": "per_user", "action": "ACTION_LIMIT", "characteristics": ["user"], "limit": 10, "period_s": 60}]}, "vary": ["user"]}`
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/rules" {
			http.NotFound(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(b, &req)
		mu.Lock()
		asked = append(asked, req)
		body := answer
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(rs.Close)

	alice := ratelimit.Identifier{"user": "alice", "ip": "10.0.0.1", "request_type": "api", "path": "/api/a"}
	e.check(t, 3, alice) // the file's per_user (limit 3) counts 3
	id := []string{"user=alice", "ip=10.0.0.1", "request_type=api", "path=/api/a"}
	remoteFlags := []string{"--rules-service", rs.URL, "--service", "web"}

	ex := e.expectRules(t, []string{
		"1 file skip_health no_match",  // a skip opening the local rules holds against the remote tier
		"2 remote per_user allow 3/10", // the file's counter, the service's limit
		"3 file distinct_paths allow 1/2",
		"4 default login_by_ip no_match",
		"5 default per_ip allow 3/1000",
	}, append(remoteFlags, id...)...)
	if !slices.Contains(ex.Overridden, overriddenRule{Tier: "file", Name: "per_user", OverriddenBy: "remote"}) {
		t.Fatalf("overridden %+v", ex.Overridden)
	}
	if ex.Tiers[0] != (tierSummary{"remote", "rules service " + rs.URL, 1}) || ex.Remote == nil || ex.Remote.Error != "" || ex.Verdict.Action != "allow" {
		t.Fatalf("tiers %+v, rules service %+v, verdict %+v", ex.Tiers, ex.Remote, ex.Verdict)
	}
	mu.Lock()
	got := asked[0]
	mu.Unlock()
	if got["service"] != "web" || got["limiter"] != "api_request" || got["identifier"].(map[string]any)["user"] != "alice" {
		t.Fatalf("the rules service was asked %v", got)
	}

	// A property that available_limiters.yaml does not declare: rejected whole.
	mu.Lock()
	answer = strings.Replace(answer, `"characteristics": ["user"]`, `"characteristics": ["plan"]`, 1)
	mu.Unlock()
	ex = e.expectRules(t, []string{
		"1 file skip_health no_match",
		"2 file per_user block 3/3",
		"3 file distinct_paths not_evaluated",
		"4 default login_by_ip no_match",
		"5 default per_ip not_evaluated",
	}, append(remoteFlags, id...)...)
	if ex.Remote == nil || !strings.Contains(ex.Remote.Error, `characteristic "plan" is not one of the limiter's available_properties`) {
		t.Fatalf("rules service %+v", ex.Remote)
	}

	if _, stderr, code := e.run(t, e.flags("--rules-service", rs.URL, "user=alice")...); code != 2 || !strings.Contains(stderr, "--rules-service needs the calling service") {
		t.Fatalf("--rules-service without a service: exit %d %s", code, stderr)
	}
}

// The --rules-service URL's password appears nowhere in the explanation:
// not in its source, not in an error (url.Parse's quotes the URL whole).
func TestExplainRemoteHidesPassword(t *testing.T) {
	e := newExplainEnv(t, redistest.Client(t), redistest.URL(t), false)
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"rules": {"rules": []}}`)
	}))
	t.Cleanup(rs.Close)
	for _, url := range []string{strings.Replace(rs.URL, "http://", "http://u:s3cret@", 1), "http://u:s3cret@127.0.0.1:90x0"} {
		for _, format := range []string{"--json", "--cost=1"} {
			stdout, stderr, code := e.run(t, e.flags("--rules-service", url, "--service", "web", format, "user=alice")...)
			if code != 0 || !strings.Contains(stdout, "rules service") || strings.Contains(stdout+stderr, "s3cret") {
				t.Errorf("%s %s: exit %d, want 0 and the rules service without the password:\n%s%s", url, format, code, stdout, stderr)
			}
		}
	}
}

// An answer that breaks a bound of GetRulesResponse is rejected whole, as
// the services' client rejects it: explain does not show rules that no
// service applies.
func TestRemoteAnswerChecked(t *testing.T) {
	const rules = `"rules": {"rules": [{"name": "per_user", "action": "ACTION_LIMIT", "characteristics": ["user"], "limit": 10, "period_s": 60}]}`
	for _, c := range []struct {
		name, answer, want string // want "": applied
	}{
		{"valid", `{` + rules + `, "vary": ["user", "ip"], "cache_for_s": 86400, "stale_for_s": 604800, "revision": "r1"}`, ""},
		{"no rules", `{}`, ""},
		{"cache_for_s over the bound", `{` + rules + `, "cache_for_s": 86401}`, "cache_for_s 86401 is over 86400"},
		{"stale_for_s over the bound", `{` + rules + `, "stale_for_s": 604801}`, "stale_for_s 604801 is over 604800"},
		{"long revision", `{` + rules + `, "revision": "` + strings.Repeat("r", 129) + `"}`, "revision of 129 bytes"},
		{"too many vary", `{` + rules + `, "vary": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, "vary lists 17 properties"},
		{"vary twice", `{` + rules + `, "vary": ["user", "user"]}`, `vary "user" is not a property name`},
		{"vary not a name", `{` + rules + `, "vary": ["User"]}`, `vary "User" is not a property name`},
		{"not_modified", `{"not_modified": true}`, "not_modified"},
		{"negative lifetime", `{` + rules + `, "cache_for_s": -1}`, "decode answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, c.answer)
			}))
			defer rs.Close()
			got, err := fetchRemoteRules(t.Context(), rs.URL, "web", "api_request", ratelimit.Identifier{"user": "alice"}, nil, 10*time.Second)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("a valid answer was rejected: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("answer %s: rules %v, error %v; want an error with %q", c.answer, got, err, c.want)
			}
		})
	}
}

// TestClearRemoteTier: a ban of a rule that only the rules service answers
// (the remote tier) is lifted by clear with --rules-service, as the
// services' Limiter.Clear asks their RuleSource; the local tiers' keys go
// with it. A rules service that cannot answer clears nothing.
func TestClearRemoteTier(t *testing.T) {
	client := redistest.Client(t)
	e := newExplainEnv(t, client, redistest.URL(t), false)
	ctx := context.Background()
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/rules" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"rules": {"rules": [{"name": "remote_ban", "action": "ACTION_LIMIT", "characteristics": ["user"], "limit": 1, "period_s": 60, "ban_for_s": 900}]}, "vary": ["user"]}`)
	}))
	t.Cleanup(rs.Close)
	remote, err := ratelimit.CompileRules(tiers.Remote, []ratelimit.Rule{
		{Name: "remote_ban", Characteristics: []string{"user"}, Limit: 1, Period: time.Minute, BanFor: 15 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	bob := ratelimit.Identifier{"user": "bob", "ip": "10.0.0.7", "request_type": "web", "path": "/x"}
	for range 2 { // the second check passes remote_ban's limit of 1 and bans bob
		e.limiter.Check(ctx, bob, ratelimit.WithRules(remote))
	}
	if r := e.limiter.Peek(ctx, bob, ratelimit.WithRules(remote)); !r.Blocked() || !r.Info.Banned || r.Rule.Name != "remote_ban" {
		t.Fatalf("setup: bob is not banned by remote_ban: %+v", r)
	}
	banKey := ""
	for _, k := range e.limiter.Keys(bob) {
		if strings.HasSuffix(k, "{api_request:per_ip:ip=10.0.0.7}") {
			banKey = strings.Replace(k, "{api_request:per_ip:ip=10.0.0.7}", "{api_request:remote_ban:user=bob}:ban", 1)
		}
	}
	clear := func(extra ...string) (string, string, int) {
		args := append([]string{"clear"}, e.flags()[1:]...)
		args = append(args, "user=bob", "ip=10.0.0.7", "request_type=web", "path=/x")
		return e.run(t, append(args, extra...)...)
	}

	// An answer the CLI cannot get: nothing cleared, and it says why.
	_, stderr, code := clear("--rules-service", "http://"+redistest.UnusedAddr(t), "--service", "web")
	if code != 1 || !strings.Contains(stderr, "ratekit clear: rules service:") {
		t.Fatalf("rules service down: exit %d\n%s", code, stderr)
	}
	if n, err := client.Exists(ctx, banKey).Result(); err != nil || n != 1 {
		t.Fatalf("the ban %s is gone after a failed clear: %d %v", banKey, n, err)
	}

	stdout, stderr, code := clear("--rules-service", rs.URL, "--service", "web")
	if code != 0 || !strings.Contains(stdout, "  removed ban "+banKey+"\n") {
		t.Fatalf("clear with --rules-service: exit %d\nstdout %s\nstderr %s\nwant removed ban %s", code, stdout, stderr, banKey)
	}
	oneAudit(t, stderr, map[string]any{"op": "clear", "remote_rules": true, "service": "web", "outcome": "ok"})
	if n, err := client.Exists(ctx, banKey).Result(); err != nil || n != 0 {
		t.Fatalf("the ban %s is still there: %d %v", banKey, n, err)
	}
	if _, stderr, code := clear("--rules-service", rs.URL); code != 2 || !strings.Contains(stderr, "--rules-service needs the calling service") {
		t.Fatalf("--rules-service without a service: exit %d %s", code, stderr)
	}
}

// explain asks the rules service with the identifier the services' client
// sends (remoterules: at most 64 properties with names of the protocol,
// values of at most 4096 bytes, the answer's vary properties first), so the
// server answers it as it answers the services: the whole identifier was
// sent, and the server refuses a request beyond the protocol (400), which
// explain showed as an error where the services get rules.
func TestRemoteIdentifierAsTheServicesSend(t *testing.T) {
	var mu sync.Mutex
	var asked []map[string]string
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Identifier map[string]string }
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		mu.Lock()
		asked = append(asked, req.Identifier)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		rules := `{"rules": [{"name": "per_user", "action": "ACTION_LIMIT", "characteristics": ["user"], "limit": 10, "period_s": 60}]}`
		if req.Identifier["plan"] != "premium" {
			rules = `{}`
		}
		_, _ = io.WriteString(w, `{"rules": `+rules+`, "vary": ["plan"]}`)
	}))
	t.Cleanup(rs.Close)
	long := strings.Repeat("x", 4097)
	many := ratelimit.Identifier{"plan": "premium"}
	for i := range 70 { // sorted before plan
		many[fmt.Sprintf("a%02d", i)] = i
	}
	tests := []struct {
		name  string
		id    ratelimit.Identifier
		calls int
		check func(sent map[string]string) bool
	}{
		{"names and values beyond the protocol left out", ratelimit.Identifier{"plan": "premium", "User-Agent": "curl", "path": long},
			1, func(sent map[string]string) bool { return len(sent) == 1 && sent["plan"] == "premium" }},
		{"at most 64 properties, the vary ones asked again", many,
			2, func(sent map[string]string) bool { return len(sent) == 64 && sent["plan"] == "premium" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			asked = nil
			mu.Unlock()
			got, err := fetchRemoteRules(t.Context(), rs.URL, "web", "api_request", tt.id, nil, 10*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || len(got) != 1 || len(asked) != tt.calls || !tt.check(asked[len(asked)-1]) {
				t.Fatalf("rules %v, error %v; asked %d times, last with %d properties (plan %q); want the premium rule after %d",
					got, err, len(asked), len(asked[len(asked)-1]), asked[len(asked)-1]["plan"], tt.calls)
			}
		})
	}
}

// TestRemoteErrorAnswerBounded: an error answer's body is quoted in the
// error at most maxErrorBody (512) bytes long, with its length: explain printed
// (and put in its --json) the whole body, as long as maxRemoteAnswer.
func TestRemoteErrorAnswerBounded(t *testing.T) {
	for _, tt := range []struct {
		name, body, want string
	}{
		{"short", " no such service \n", "rules service: 404 Not Found: no such service"},
		{"long", strings.Repeat("é", 300000), "rules service: 404 Not Found: " + strings.Repeat("é", 256) + "... (600000 bytes)"},
		{"cut in a character", "x" + strings.Repeat("é", 300), "rules service: 404 Not Found: x" + strings.Repeat("é", 255) + "... (601 bytes)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer rs.Close()
			_, err := fetchRemoteRules(t.Context(), rs.URL, "web", "api_request", ratelimit.Identifier{"user": "alice"}, nil, 10*time.Second)
			if err == nil || err.Error() != tt.want {
				got := fmt.Sprint(err)
				t.Fatalf("error of %d bytes: %.200q..., want %.200q...", len(got), got, tt.want)
			}
		})
	}
}
