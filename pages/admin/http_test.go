package admin_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/redistest"
	"github.com/ratekit/ratekit/pages/admin"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The limiter page lists every tier and the effective list in evaluation
// order, says which rule replaces which, and marks every skip rule; the
// index lists the declared limiters.
func TestPageRendersTiers(t *testing.T) {
	f := newFixture(t, nil)
	lim, per := uint32(10), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{
		{Name: "per_ip", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"ip"}},
		{Name: "per_user", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"user"}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, f)
	code, body := b.get("?limiter=api")
	if code != http.StatusOK {
		t.Fatalf("status %d\n%s", code, body)
	}
	effective := body[strings.Index(body, "<h2>Effective rules"):strings.Index(body, "<h2>Tiers")]
	if got := attrs(effective, `<tr data-rule="([a-z_]+)" data-tier="([a-z]+)" data-action="([a-z]+)"`); !slices.Equal(got, []string{
		"per_user file log", "per_ip published limit", "trusted_ip default skip"}) {
		t.Fatalf("effective rules %v", got)
	}
	for _, want := range []string{
		`<li data-overridden="default/per_ip">published <code>per_ip</code> replaces default <code>per_ip</code></li>`,
		`<li data-overridden="published/per_user">file <code>per_user</code> replaces published <code>per_user</code></li>`,
		`<span class="bypass" title="a skip rule bypasses the limiter for every request it matches">skip (bypass)</span>`,
		`<section class="box tier" data-tier="file">`, `<section class="box tier" data-tier="published">`, `<section class="box tier" data-tier="default">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	_, index := b.get("")
	if got := attrs(index, `<tr data-limiter="([a-z_]+)">`); !slices.Equal(got, []string{"api", "jobs"}) {
		t.Fatalf("index lists %v\n%s", got, index)
	}
	if code, body := b.get("?limiter=nope"); code != http.StatusNotFound || !strings.Contains(body, `No limiter &#34;nope&#34;`) {
		t.Fatalf("unknown limiter: %d\n%s", code, body)
	}
}

// remoteTiers is an admin.TierSource holding a remote tier, as a process
// with a rules service has.
type remoteTiers []ratelimit.Rule

var _ admin.TierSource = remoteTiers(nil)

func (r remoteTiers) Tiers(string) (tiers.Set, bool) { return tiers.Set{Remote: r}, true }

// The remote tier a process holds is shown above the others, and its rule
// replaces the same-named rule below it.
func TestRemoteTier(t *testing.T) {
	remote := remoteTiers{{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 1, Period: time.Second}}
	f := newFixtureOn(t, redistest.Client(t), nil, func(o *admin.Options) { o.Tiers = remote })
	_, body := newBrowser(t, f).get("?limiter=api")
	effective := body[strings.Index(body, "<h2>Effective rules"):strings.Index(body, "<h2>Tiers")]
	if got := attrs(effective, `<tr data-rule="([a-z_]+)" data-tier="([a-z]+)"`); !slices.Equal(got, []string{
		"per_ip remote", "per_user file", "trusted_ip default"}) {
		t.Fatalf("effective rules %v", got)
	}
	for _, want := range []string{`<section class="box tier" data-tier="remote">`,
		`<li data-overridden="default/per_ip">remote <code>per_ip</code> replaces default <code>per_ip</code></li>`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}

// attrs returns the submatches of re in s, each match's groups joined by spaces.
func attrs(s, re string) []string {
	var out []string
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Join(m[1:], " "))
	}
	return out
}

// A POST that another site could have made is refused and writes nothing;
// the same form from the page's origin with the browser's token publishes.
func TestCSRF(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	before := f.storeState(t)
	stranger := newBrowser(t, f) // another browser: its own cookie, not b's token
	strangerToken := stranger.csrf()

	tests := []struct {
		name    string
		browser *browser
		token   string
		origin  string
		header  map[string]string
		want    string
	}{
		{"no origin", b, token, "", nil, "no Origin header"},
		{"other origin", b, token, "https://evil.example", nil, "another site"},
		{"cross-site fetch metadata", b, token, "", map[string]string{"Sec-Fetch-Site": "cross-site"}, "another site"},
		{"no token", b, "", f.srv.URL, nil, "does not match"},
		{"another browser's token", b, strangerToken, f.srv.URL, nil, "does not match"},
		{"token without the cookie", newBrowser(t, f), token, f.srv.URL, nil, "cookie is missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			form := saveForm(tt.token, version, "blocked_rule")
			req, _ := http.NewRequest(http.MethodPost, f.url()+"?limiter=api", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := tt.browser.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			code, body := readBody(t, resp)
			if code != http.StatusForbidden || !strings.Contains(body, tt.want) {
				t.Fatalf("status %d, want 403 saying %q:\n%s", code, tt.want, body)
			}
			if after := f.storeState(t); !maps.Equal(before, after) {
				t.Fatalf("a refused POST wrote to Redis:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	if strings.Contains(f.audit.String(), "rate_limit_admin_write") {
		t.Fatalf("audit lines for refused writes: %s", f.audit)
	}
	if n := strings.Count(f.audit.String(), `"msg":"rate_limit_admin_refused"`); n != len(tests) {
		t.Fatalf("%d refusal lines, want %d:\n%s", n, len(tests), f.audit)
	}
	f.audit.Reset()

	resp, body := b.post("?limiter=api", saveForm(token, version, "per_user_strict"), f.srv.URL)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "?limiter=api&saved=per_user_strict" {
		t.Fatalf("valid save: %d %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	doc, _ := f.store.Document(ctx, "api")
	if got := doc.GetPublishedRules().GetRules(); len(got) != 1 || got[0].GetName() != "per_user_strict" || got[0].GetLimit() != 2 {
		t.Fatalf("published tier after the save: %v", got)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(f.audit.String())), &line); err != nil {
		t.Fatalf("one audit line expected: %v\n%s", err, f.audit)
	}
	rev, _ := f.store.Revision(ctx)
	for k, want := range map[string]any{"msg": "rate_limit_admin_write", "who": "alice", "op": "publish", "limiter": "api",
		"rule": "per_user_strict", "revision": float64(rev), "based_on_version": version, "changed": true} {
		if line[k] != want {
			t.Errorf("audit %s = %v, want %v (line %v)", k, line[k], want, line)
		}
	}
}

// No GET changes anything, whatever its query says, including the clear
// confirmation page.
func TestGetNeverWrites(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	limiter := f.serviceLimiter(t, f.client, ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: 60e9})
	limiter.Check(ctx, ratelimit.Identifier{"ip": "1.2.3.4"}) // a counter the GETs must leave alone
	token := b.csrf()
	before := f.storeState(t)
	for _, q := range []string{
		"", "?limiter=api", "?limiter=jobs", "?limiter=api&edit=per_ip",
		"?limiter=api&explain=1&id.ip=1.2.3.4",
		"?limiter=api&clear=1&id.ip=1.2.3.4",
		"?limiter=api&clear=1&confirm=yes&op=clear&id.ip=1.2.3.4&csrf=" + token,
		"?limiter=api&op=save&name=x&action=limit&limit=1&period_s=1&csrf=" + token,
		"?limiter=api&op=delete&rule=per_ip&csrf=" + token,
	} {
		code, body := b.get(q)
		if code >= 500 {
			t.Fatalf("GET %s: %d\n%s", q, code, body)
		}
		if after := f.storeState(t); !maps.Equal(before, after) {
			t.Fatalf("GET %s wrote to Redis:\nbefore %v\nafter  %v", q, before, after)
		}
	}
	if strings.Contains(f.audit.String(), "rate_limit_admin_write") {
		t.Fatalf("audit lines after GETs: %s", f.audit)
	}
	// The confirmation page is where a clear starts, and only a POST clears.
	if _, body := b.get("?limiter=api&clear=1&id.ip=1.2.3.4"); !strings.Contains(body, `id="confirm-clear"`) {
		t.Fatalf("no confirmation form:\n%s", body)
	}
}

// Without the authorization hook the page shows everything and offers no
// change, and a well-formed POST is refused; a hook that says no refuses too.
func TestReadOnly(t *testing.T) {
	tests := []struct {
		name      string
		authorize func(*http.Request) (string, bool)
		want      string
	}{
		{"no hook", nil, "no authorization hook"},
		{"hook refuses", func(*http.Request) (string, bool) { return "mallory", false }, "not authorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.authorize)
			b := newBrowser(t, f)
			code, body := b.get("?limiter=api")
			if code != http.StatusOK || !strings.Contains(body, `id="read-only"`) || !strings.Contains(body, `data-rule="per_ip"`) {
				t.Fatalf("read-only page: %d\n%s", code, body)
			}
			for _, offered := range []string{`id="rule-form"`, `data-delete=`, `id="clear"`, `method="post"`} {
				if strings.Contains(body, offered) {
					t.Errorf("a read-only page offers %s", offered)
				}
			}
			token := b.csrf()
			_, version, _ := f.store.VersionedDocument(ctx, "api")
			before := f.storeState(t)
			for _, form := range []url.Values{
				saveForm(token, version, "x"),
				{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "version": {version}, "rule": {"x"}},
				{"csrf": {token}, "op": {"clear"}, "limiter": {"api"}, "confirm": {"yes"}, "id.ip": {"1.2.3.4"}},
			} {
				resp, body := b.post("?limiter=api", form, f.srv.URL)
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, tt.want) {
					t.Fatalf("op %s: %d, want 403 saying %q\n%s", form.Get("op"), resp.StatusCode, tt.want, body)
				}
			}
			if after := f.storeState(t); !maps.Equal(before, after) {
				t.Fatalf("a read-only page wrote:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// Hostile text in a stored rule's description and in identifier values is
// shown as text, never as markup.
func TestEscaping(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	hostile := `<script>alert(1)</script>"><img src=x onerror=alert(2)>`
	lim, per := uint32(5), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{{
		Name: "hostile", Description: hostile, Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per,
		Characteristics: []string{"user"},
		Match:           map[string]*configv1.MatchValue{"path": {Kind: &configv1.MatchValue_Equality{Equality: hostile}}},
	}}}}}); err != nil {
		t.Fatal(err)
	}
	// A crafted link cannot put words in the page's status line.
	if _, body := b.get("?limiter=api&saved=" + url.QueryEscape("x. Your session expired, log in at evil.example") + "&cleared=lots"); strings.Contains(body, `id="message"`) {
		t.Error("the page shows a message a crafted link wrote")
	}
	for _, q := range []string{
		"?limiter=api",
		"?limiter=api&edit=hostile",
		"?limiter=api&clear=1&id.user=" + url.QueryEscape(hostile) + "&id.path=" + url.QueryEscape(hostile),
		"?limiter=" + url.QueryEscape(hostile),
	} {
		_, body := b.get(q)
		for _, bad := range []string{"<script", "<img"} {
			if strings.Contains(body, bad) {
				t.Errorf("GET %s: the page holds %s unescaped", q, bad)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the hostile text is not shown escaped:\n%s", q, body)
		}
	}
}

// A published rule that matches what a default exemption skips is named in
// a warning on the limiter's page; one that cannot match it is not.
func TestExemptionWarnings(t *testing.T) {
	f := newFixture(t, nil)
	lim, per := uint32(2), uint32(60)
	b := newBrowser(t, f)
	publish := func(name string, match map[string]*configv1.MatchValue) {
		t.Helper()
		if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"jobs": {Rules: []*configv1.Rule{
			{Name: name, Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Match: match},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	publish("mail_only", map[string]*configv1.MatchValue{"queue": {Kind: &configv1.MatchValue_Equality{Equality: "mail"}}})
	if _, body := b.get("?limiter=jobs"); strings.Contains(body, `id="exemption-warnings"`) {
		t.Fatalf("a warning for a rule that cannot match the exemption:\n%s", body)
	}
	publish("incident", nil)
	_, body := b.get("?limiter=jobs")
	if !strings.Contains(body, `id="exemption-warnings"`) || !strings.Contains(body, `rule &#34;incident&#34; matches requests that the default exemption &#34;skip_health_checks&#34; skips`) {
		t.Fatalf("no warning for a match-all rule:\n%s", body)
	}
	if strings.Contains(body, `id="exemption-warnings-omitted"`) {
		t.Fatalf("one warning, and some said omitted:\n%s", body)
	}

	// The page shows as many warnings as ratekit validate reports, and
	// counts the others: 20 more rules than it shows, and incident (a
	// publish upserts).
	var many []*configv1.Rule
	for i := range config.MaxReportedErrors + 20 {
		many = append(many, &configv1.Rule{Name: fmt.Sprintf("incident_%d", i), Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per})
	}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"jobs": {Rules: many}}}); err != nil {
		t.Fatal(err)
	}
	_, body = b.get("?limiter=jobs")
	if n := strings.Count(body, "matches requests that the default exemption"); n != config.MaxReportedErrors || !strings.Contains(body, `<p id="exemption-warnings-omitted">and 21 more warnings</p>`) {
		t.Fatalf("%d warnings shown, want %d and 21 counted:\n%s", n, config.MaxReportedErrors, body)
	}
}

// An error page answers a writer's request too: it does not call the page
// read-only ("you can look, not change"), which would tell an authorized
// operator whose write was refused for another reason that they may not
// write at all.
func TestErrorPageNotReadOnly(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	orphanSave := saveForm(token, "", "new_rule")
	orphanSave.Set("limiter", "undeclared")
	if err := f.client.Set(ctx, f.store.Key("undeclared"), "not json", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	for _, tc := range []struct {
		name string
		form url.Values
		want int
	}{
		{"unknown operation", url.Values{"csrf": {token}, "op": {"bogus"}, "limiter": {"api"}}, http.StatusBadRequest},
		{"remove of a valid document", url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"api"}, "version": {version}, "confirm": {"yes"}}, http.StatusConflict},
		{"save onto an orphan", orphanSave, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := b.post("?limiter="+tc.form.Get("limiter"), tc.form, f.srv.URL)
			if resp.StatusCode != tc.want || !strings.Contains(body, `id="error"`) {
				t.Fatalf("status %d, want %d with an error page\n%s", resp.StatusCode, tc.want, body)
			}
			if strings.Contains(body, `id="read-only"`) {
				t.Fatalf("the error page tells a writer the page is read-only\n%s", body)
			}
		})
	}
}

// A save to a limiter whose document no service seeded under the page's
// prefix (no file or default tier: the page pointed at another service's
// prefix, or Redis lost the document) is not reported as applied by the
// services: the message warns, naming the key. Under a seeded document the
// message is the plain success. Before, both said "the services apply it at
// their next refresh".
func TestSaveUnseededWarns(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	doc, version, err := f.store.VersionedDocument(ctx, "api")
	if err != nil || doc.GetDefaultRules() == nil {
		t.Fatalf("the fixture did not seed api: %v %v", doc, err)
	}
	resp, body := b.post("?limiter=api", saveForm(token, version, "seeded_rule"), f.srv.URL)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	if _, body := b.get(resp.Header.Get("Location")); !strings.Contains(body, "Published rule seeded_rule: the services apply it at their next refresh.") ||
		strings.Contains(body, "no service has seeded") {
		t.Fatalf("the save to a seeded document is not the plain success:\n%s", body)
	}

	if err := f.client.Del(ctx, f.store.Key("api")).Err(); err != nil { // as after a flush, or under a prefix no service uses
		t.Fatal(err)
	}
	resp, body = b.post("?limiter=api", saveForm(token, "", "unseeded_rule"), f.srv.URL)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", resp.StatusCode, body)
	}
	_, body = b.get(resp.Header.Get("Location"))
	want := "Published rule unseeded_rule under " + f.store.Key("api") + ", but no service has seeded this limiter&#39;s document there"
	if !strings.Contains(body, want) || !strings.Contains(body, `class="notice warn"`) {
		t.Fatalf("no warning %q:\n%s", want, body)
	}
}

// A skip rule without a match ahead of every counting rule turns the
// limiter off (a published skip_health_checks whose match was emptied): the
// limiter's page says so; with the exemption's own match it does not.
func TestSkipsAllWarned(t *testing.T) {
	f := newFixture(t, nil)
	b := newBrowser(t, f)
	if _, body := b.get("?limiter=jobs"); strings.Contains(body, `id="skips-all"`) {
		t.Fatalf("a skips-all warning for the default exemption:\n%s", body)
	}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"jobs": {Rules: []*configv1.Rule{
		{Name: "skip_health_checks", Action: configv1.Action_ACTION_SKIP},
	}}}}); err != nil {
		t.Fatal(err)
	}
	_, body := b.get("?limiter=jobs")
	if !strings.Contains(body, `<p class="notice warn" id="skips-all" role="note">Rule <code>skip_health_checks</code> is a skip rule without a match ahead of every counting rule`) {
		t.Fatalf("no warning that the limiter counts nothing:\n%s", body)
	}
}
