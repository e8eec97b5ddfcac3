package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/pages/admin"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The page never wedges on a stored document no process would load: it
// renders such a document without reading it whole (an 11.6 MB one costs
// the page a few kB), refuses a save with 422 and says why, offers to
// remove it, and saves work again after the removal. A save that would take
// the published tier past ratelimit.MaxRulesPerTier is refused with 422
// before anything is written.
func TestInvalidDocumentNeverWedgesThePage(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	key := f.store.Key("api")

	if err := f.client.Set(ctx, key, `{"pad":"`+strings.Repeat("x", 11_600_000)+`"}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, body := b.get("?limiter=api")
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("rendering the page of an 11.6 MB document allocated %d bytes", alloc)
	}
	for _, want := range []string{`id="document-error"`, "holds 11600010 bytes, at most 1048576", `id="remove-form"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("page of an oversized document lacks %s (status %d)\n%s", want, code, body)
		}
	}
	resp, body := b.post("?limiter=api", saveForm(token, "", "per_user_strict"), f.srv.URL)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "a remove takes it away") {
		t.Fatalf("save onto an invalid document: %d\n%s", resp.StatusCode, body)
	}
	// The index page lists it as invalid instead of failing.
	if code, body := b.get(""); code != http.StatusOK || !strings.Contains(body, "document invalid") {
		t.Fatalf("index: %d\n%s", code, body)
	}
	// Remove needs its confirmation, then takes the document away.
	remove := url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"api"}}
	if resp, body := b.post("?limiter=api", remove, f.srv.URL); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("remove without confirm: %d\n%s", resp.StatusCode, body)
	}
	remove.Set("confirm", "yes")
	if resp, body := b.post("?limiter=api", remove, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %d\n%s", resp.StatusCode, body)
	}
	if n, _ := f.client.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("the document is still there")
	}
	if !strings.Contains(f.audit.String(), `"op":"remove","limiter":"api"`) {
		t.Fatalf("no audit line for the removal:\n%s", f.audit.String())
	}
	// A valid document is not removed from the page.
	if resp, body := b.post("?limiter=api", remove, f.srv.URL); resp.StatusCode != http.StatusConflict {
		t.Fatalf("remove of a valid (absent) document: %d\n%s", resp.StatusCode, body)
	}
	if resp, body := b.post("?limiter=api", saveForm(token, "", "per_user_strict"), f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("save after the removal: %d\n%s", resp.StatusCode, body)
	}

	// Fill the published tier to its bound; one more rule is refused.
	list := &configv1.RuleList{}
	for i := range ratelimit.MaxRulesPerTier - 1 {
		limit, period := uint32(5), uint32(60)
		list.Rules = append(list.Rules, &configv1.Rule{Name: fmt.Sprintf("r%d", i), Action: configv1.Action_ACTION_LIMIT, Limit: &limit, PeriodS: &period})
	}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": list}}); err != nil {
		t.Fatal(err)
	}
	_, v, _ := f.store.VersionedDocument(ctx, "api")
	resp, body = b.post("?limiter=api", saveForm(token, v, "one_too_many"), f.srv.URL)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "tier published holds 257 rules, at most 256") {
		t.Fatalf("save over the tier bound: %d\n%s", resp.StatusCode, body)
	}
	if _, v2, _ := f.store.VersionedDocument(ctx, "api"); v2 != v {
		t.Fatal("a refused save changed the document")
	}
	// Rules saved one by one cannot add up past the byte bound either: the
	// save that would is refused with 422, and the document stays readable.
	values := make([]string, 1000)
	for i := range values {
		values[i] = fmt.Sprintf("project_%040d", i)
	}
	refused := false
	for i := 0; i < 40 && !refused; i++ {
		_, jv, err := f.store.VersionedDocument(ctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		big := url.Values{"csrf": {token}, "op": {"save"}, "limiter": {"jobs"}, "version": {jv}, "mode": {"add"},
			"name": {fmt.Sprintf("big%d", i)}, "action": {"limit"}, "limit": {"100"}, "period_s": {"1"},
			"match_kind.queue": {"one_of"}, "match_value.queue": {strings.Join(values, "\n")}}
		resp, body := b.post("?limiter=jobs", big, f.srv.URL)
		switch resp.StatusCode {
		case http.StatusSeeOther:
		case http.StatusUnprocessableEntity:
			if !strings.Contains(body, "bytes, at most 1048576") {
				t.Fatalf("save %d refused for another reason:\n%s", i+1, body)
			}
			refused = true
		default:
			t.Fatalf("save %d: %d\n%s", i+1, resp.StatusCode, body)
		}
	}
	if !refused {
		t.Fatal("40 saves of 50 kB rules were all accepted")
	}
	if _, err := f.store.Document(ctx, "jobs"); err != nil {
		t.Fatalf("the document at the byte bound must stay readable: %v", err)
	}
	// Editing a published rule keeps the count: saved.
	edit := saveForm(token, v, "per_user_strict")
	edit.Set("mode", "edit")
	edit.Set("limit", "3")
	if resp, body := b.post("?limiter=api", edit, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("edit at the bound: %d\n%s", resp.StatusCode, body)
	}
}

// The index page tells a document that one list of the store left unread
// (past rulestore.MaxReadBytes) from an invalid one: it used to call it
// "document invalid".
func TestIndexSaysWhichDocumentsWereNotRead(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	index := strings.TrimSuffix(f.store.Key("x"), "x") + "@index"
	// Twenty documents of 1 MiB each, more than one list reads.
	doc := `{"pad":"` + strings.Repeat("x", ratelimit.MaxDocumentBytes-16) + `"}`
	for i := range 20 {
		name := fmt.Sprintf("l%02d", i)
		if err := f.client.Set(ctx, f.store.Key(name), doc, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.client.SAdd(ctx, index, name).Err(); err != nil {
			t.Fatal(err)
		}
	}
	code, body := b.get("")
	if code != http.StatusOK || !strings.Contains(body, "document not read in this list") ||
		strings.Contains(body, "document invalid: rulestore: document not read") {
		t.Fatalf("index: %d, want documents past the read bound shown as not read\n%.2000s", code, body)
	}
}

// What the page names back from a request (an operation, a limiter or rule
// name, a form field) is quoted at most 80 characters long: the page and
// its audit line stay small whatever a client sends.
func TestEchoesQuotedShort(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	huge := strings.Repeat("Z", 20_000)
	short := "&#34;" + strings.Repeat("Z", 80) + "&#34;" // as html/template escapes it
	for _, tc := range []struct {
		name  string
		form  url.Values
		field bool // the form shows the value back in its field, whole, to be fixed
	}{
		{"operation", url.Values{"csrf": {token}, "op": {huge}, "limiter": {"api"}}, false},
		{"rule name", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "rule": {huge}}, false},
		{"limit", func() url.Values { v := saveForm(token, "", "echo"); v.Set("limit", huge); return v }(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := b.post("?limiter=api", tc.form, f.srv.URL)
			if resp.StatusCode < 400 || !tc.field && strings.Contains(body, strings.Repeat("Z", 81)) || !strings.Contains(body, short) {
				t.Fatalf("%s of %d bytes: status %d, want a refusal quoting it at most 80 characters long; page of %d bytes", tc.name, len(huge), resp.StatusCode, len(body))
			}
		})
	}
}

// A cross-site refusal quotes the Origin, Sec-Fetch-Site and Host headers it
// names at most 80 characters long, in the answer and in the audit line:
// the headers are the client's, whatever their length.
func TestCSRFRefusalQuotesHeadersShort(t *testing.T) {
	f := newFixtureOn(t, newFixture(t, nil).client, allowAll, func(o *admin.Options) { o.AllowedHosts = []string{"*"} })
	b := newBrowser(t, f)
	token := b.csrf()
	huge := strings.Repeat("Z", 32<<10)
	for _, tc := range []struct {
		name, host string
		header     map[string]string
	}{
		{"origin", "", map[string]string{"Origin": "https://" + huge + ".example"}},
		{"fetch metadata", "", map[string]string{"Sec-Fetch-Site": huge}},
		{"host", huge + ".example", map[string]string{"Origin": "https://evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.audit.Reset()
			req, _ := http.NewRequest(http.MethodPost, f.url()+"?limiter=api", strings.NewReader(saveForm(token, "", "cross_site").Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := b.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			code, body := readBody(t, resp)
			if code != http.StatusForbidden || !strings.Contains(body, "another site") || strings.Contains(body, strings.Repeat("Z", 81)) {
				t.Fatalf("status %d, page of %d bytes; want 403 saying another site, quoting at most 80 characters of the header", code, len(body))
			}
			if a := f.audit.String(); !strings.Contains(a, "rate_limit_admin_refused") || strings.Contains(a, strings.Repeat("Z", 81)) {
				t.Fatalf("audit of %d bytes: want one refusal quoting at most 80 characters of the header", len(a))
			}
		})
	}
}

// The audit lines quote what a client sent at most 80 characters long, as
// the page's answers do: a refused POST logged its op and limiter whole, up
// to MaxBodyBytes each, and a save, delete or remove based on a version
// that is none (no SHA-1 in hex) was sent to the store, whose conflict
// quoted it whole, twice with based_on_version; it is refused (400) and
// nothing is written.
func TestAuditQuotesRequestShort(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	token := b.csrf()
	huge := strings.Repeat("Z", 20_000)
	for _, tc := range []struct {
		name string
		form url.Values
		msg  string // the audit record
	}{
		{"refused operation", url.Values{"csrf": {"forged"}, "op": {huge}, "limiter": {"api"}}, "rate_limit_admin_refused"},
		{"refused limiter", url.Values{"csrf": {"forged"}, "op": {"save"}, "limiter": {huge}}, "rate_limit_admin_refused"},
		{"delete version", url.Values{"csrf": {token}, "op": {"delete"}, "limiter": {"api"}, "rule": {"per_ip"}, "version": {huge}}, "rate_limit_admin_refused"},
		{"save version", saveForm(token, huge, "huge_version"), "rate_limit_admin_refused"},
		{"remove version", url.Values{"csrf": {token}, "op": {"remove"}, "limiter": {"api"}, "confirm": {"yes"}, "version": {huge}}, "rate_limit_admin_refused"},
		{"unknown limiter", url.Values{"csrf": {token}, "op": {"save"}, "limiter": {huge}}, "rate_limit_admin_refused"},
		{"unknown operation", url.Values{"csrf": {token}, "op": {huge}, "limiter": {"api"}}, "rate_limit_admin_refused"},
		{"invalid save", func() url.Values { v := saveForm(token, "", "z"); v.Set("limit", huge); return v }(), "rate_limit_admin_refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.audit.Reset()
			if resp, _ := b.post("?limiter=api", tc.form, f.srv.URL); resp.StatusCode < 400 {
				t.Fatalf("status %d, want a refusal", resp.StatusCode)
			}
			if a := f.audit.String(); !strings.Contains(a, tc.msg) || strings.Contains(a, strings.Repeat("Z", 81)) {
				t.Fatalf("audit of %d bytes: want a %s record quoting at most 80 characters of a value of %d bytes", len(a), tc.msg, len(huge))
			}
		})
	}
}

// A form's characteristics that are not the limiter's properties are
// reported once, with at most 16 of its properties named, as the config
// checks list names: each value was its own error listing every property,
// so a 40 kB form of "characteristics=zz" on a limiter of 256 properties
// made a page of 51 MB. The 404 of an unknown limiter lists 16 of those
// declared so too (it listed them all).
func TestUnknownCharacteristicsBounded(t *testing.T) {
	var props []string
	for i := range 256 {
		props = append(props, fmt.Sprintf("p%03d_%s", i, strings.Repeat("x", 59)))
	}
	yaml := "available_limiters:\n  wide:\n    description: wide\n    available_properties: [" + strings.Join(props, ", ") + "]\n"
	for i := range 100 {
		yaml += fmt.Sprintf("  narrow%03d:\n    description: narrow\n    available_properties: [ip]\n", i)
	}
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureOn(t, newFixture(t, nil).client, allowAll, func(o *admin.Options) { o.Available, o.RateLimits = available, nil })
	b := newBrowser(t, f)
	token := b.csrf()
	form := url.Values{"csrf": {token}, "op": {"save"}, "limiter": {"wide"}, "mode": {"add"}, "name": {"wide_rule"},
		"action": {"limit"}, "limit": {"1"}, "period_s": {"60"}}
	for range 3000 {
		form.Add("characteristics", "zz")
	}
	form.Add("characteristics", "yy")
	resp, body := b.post("?limiter=wide", form, f.srv.URL)
	if resp.StatusCode != http.StatusUnprocessableEntity || strings.Count(body, "not one of the limiter") != 1 ||
		strings.Contains(body, props[16]+", ") || len(body) > 512<<10 {
		t.Fatalf("save with 3001 unknown characteristics: status %d, %d errors, page of %d bytes; want 422, one error naming 16 properties",
			resp.StatusCode, strings.Count(body, "not one of the limiter"), len(body))
	}
	if !strings.Contains(body, "zz") || !strings.Contains(body, "yy") {
		t.Fatalf("the error does not name the unknown values:\n%.3000s", body)
	}
	// The limiters declared are listed so too.
	if code, body := b.get("?limiter=nope"); code != http.StatusNotFound || strings.Contains(body, "narrow050") || !strings.Contains(body, "101 in all") {
		t.Fatalf("?limiter=nope: status %d; want 404 naming 16 of the 101 limiters declared\n%.3000s", code, body)
	}
}
