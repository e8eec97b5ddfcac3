package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/pages/admin"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// A limiter whose published tier sets shadow mode counts and never blocks
// (the services' replicas apply the mode): the page says so, and the explain
// box's verdict is the shadow one, not a block no service would give.
func TestShadowModeShown(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	lim, per := uint32(1), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {
		Mode: configv1.Mode_MODE_SHADOW, Rules: []*configv1.Rule{
			{Name: "tight", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"ip"}}}}}}); err != nil {
		t.Fatal(err)
	}
	// Two checks of the same rule, counted as a service would count them.
	l := f.serviceLimiter(t, f.client, ratelimit.Rule{Name: "tight", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute})
	id := ratelimit.Identifier{"ip": "192.0.2.9"}
	for range 2 {
		if res := l.Check(ctx, id); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	code, body := b.get("?limiter=api&explain=1&id.ip=192.0.2.9")
	if code != http.StatusOK {
		t.Fatalf("explain: %d\n%s", code, body)
	}
	mode := regexp.MustCompile(`id="mode"[^>]*>([^<]*)`).FindStringSubmatch(body)
	if mode == nil || !strings.Contains(mode[1], "shadow") {
		t.Fatalf("the page does not show the shadow mode: %q\n%s", mode, body)
	}
	verdict := regexp.MustCompile(`(?s)id="verdict"[^>]*>(.*?)</p>`).FindStringSubmatch(body)
	if verdict == nil || strings.Contains(verdict[0], `data-blocked="true"`) || !strings.Contains(verdict[1], "shadow mode") || !strings.Contains(verdict[1], "tight") {
		t.Fatalf("explain verdict of a shadow-mode limiter: %q, want an allow that names the shadow mode and the rule", verdict)
	}
}

// A token bucket's tokens in use are shown against its burst, the bucket's
// capacity: with a limit of 1 an hour and a burst of 10, four checks showed
// "4 / 1".
func TestExplainTokenBucketBurst(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	lim, per, burst := uint32(1), uint32(3600), uint32(10)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {
		Rules: []*configv1.Rule{{Name: "bucket", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Burst: &burst,
			Algorithm: configv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Characteristics: []string{"ip"}}}}}}); err != nil {
		t.Fatal(err)
	}
	l := f.serviceLimiter(t, f.client, ratelimit.Rule{Name: "bucket", Characteristics: []string{"ip"}, Limit: 1, Period: time.Hour,
		Algorithm: ratelimit.TokenBucket, Burst: 10})
	id := ratelimit.Identifier{"ip": "192.0.2.9"}
	for range 4 {
		if res := l.Check(ctx, id); res.Err != nil || res.Blocked() {
			t.Fatalf("check: %+v", res)
		}
	}
	code, body := b.get("?limiter=api&explain=1&id.ip=192.0.2.9")
	row := regexp.MustCompile(`<tr data-rule="bucket" data-state="allow">.*?</tr>`).FindString(body)
	if code != http.StatusOK || !strings.Contains(row, ">4 / 10<") {
		t.Fatalf("explain of a token bucket: %d, row %q; want about 4 tokens in use of the burst 10", code, row)
	}
}

// A peek that a skip rule ends names the skip in its verdict, and the log
// rule exceeded before it: the result's rule is then the skip, which the
// verdict called the most constraining rule, or an exceeded log rule.
func TestExplainVerdictSkipped(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	verdict := func(ip string) string {
		t.Helper()
		code, body := b.get("?limiter=api&explain=1&id.ip=" + ip)
		v := regexp.MustCompile(`(?s)id="verdict"[^>]*>(.*?)</p>`).FindStringSubmatch(body)
		if code != http.StatusOK || v == nil {
			t.Fatalf("explain: %d, no verdict\n%s", code, body)
		}
		return strings.TrimPrefix(v[1], "Verdict: ")
	}
	const skip = "allow: skip rule trusted_ip ends the evaluation (the rules after it are not evaluated)"
	if got := verdict("10.0.0.1"); got != skip {
		t.Fatalf("verdict %q, want %q", got, skip)
	}

	lim, per := uint32(1), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {
		Rules: []*configv1.Rule{{Name: "watch", Action: configv1.Action_ACTION_LOG, Limit: &lim, PeriodS: &per, Characteristics: []string{"ip"}}}}}}); err != nil {
		t.Fatal(err)
	}
	l := f.serviceLimiter(t, f.client, ratelimit.Rule{Name: "watch", Action: ratelimit.ActionLog, Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute})
	for range 2 {
		if res := l.Check(ctx, ratelimit.Identifier{"ip": "10.0.0.1"}); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if got, want := verdict("10.0.0.1"), skip+"; log rule watch exceeded before it: reported, not enforced"; got != want {
		t.Fatalf("verdict %q, want %q", got, want)
	}
}

// The explain box's page does not grow with the identifier times the rules:
// each rule's mismatches quoted the identifier's value, so a limiter of 256
// published rules explained for values of 4096 bytes made a page of 18 MB
// from a query of 37 kB. A rule's detail is cut in the middle, and still
// names the property that failed.
func TestExplainDetailBounded(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	lim, per := uint32(1), uint32(60)
	list := &configv1.RuleList{}
	for i := range ratelimit.MaxRulesPerTier {
		list.Rules = append(list.Rules, &configv1.Rule{Name: fmt.Sprintf("r%d", i), Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per,
			Match: map[string]*configv1.MatchValue{
				"ip":   {Kind: &configv1.MatchValue_Equality{Equality: "192.0.2.1"}},
				"user": {Kind: &configv1.MatchValue_Equality{Equality: "alice"}},
				"path": {Kind: &configv1.MatchValue_Equality{Equality: "/login"}}}})
	}
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": list}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat(`"`, admin.MaxIdentifierValue)
	q := url.Values{"limiter": {"api"}, "explain": {"1"}, "id.ip": {long}, "id.user": {long}, "id.path": {long}}
	code, body := b.get("?" + q.Encode())
	if code != http.StatusOK || len(body) > 2<<20 {
		t.Fatalf("explain of 3 values of %d bytes: status %d, page of %d bytes; want 200 and at most 2 MiB", len(long), code, len(body))
	}
	row := regexp.MustCompile(`<tr data-rule="r0" data-state="no match">.*?</tr>`).FindString(body)
	if !strings.Contains(row, "ip: ") || !strings.Contains(row, "...") {
		t.Fatalf("explain row of r0: %.300q; want its mismatch, cut in the middle", row)
	}
}

// TestDeletePublishedMode: a published mode outlives the published rules,
// and the page showed it with no way to lift it (nor had the CLI or the
// store one), so a stale shadow applied the day rate_limits.yaml dropped its
// own mode. The page offers to delete it at the version it shows: the
// write is audited, the rules stay, and a second delete of the same version
// is a conflict that writes nothing.
func TestDeletePublishedMode(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	lim, per := uint32(1), uint32(60)
	if _, err := f.store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {
		Mode: configv1.Mode_MODE_SHADOW, Rules: []*configv1.Rule{
			{Name: "tight", Action: configv1.Action_ACTION_LIMIT, Limit: &lim, PeriodS: &per, Characteristics: []string{"ip"}}}}}}); err != nil {
		t.Fatal(err)
	}
	if code, body := b.get("?limiter=api"); code != http.StatusOK || !strings.Contains(body, `id="delete-mode"`) || !strings.Contains(body, "The published tier sets mode <code>shadow</code>") {
		t.Fatalf("the page offers no deletion of the published mode: %d\n%s", code, body)
	}
	_, version, err := f.store.VersionedDocument(ctx, "api")
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"csrf": {b.csrf()}, "op": {"delete_mode"}, "limiter": {"api"}, "version": {version}}
	f.audit.Reset()
	if resp, body := b.post("?limiter=api", form, f.srv.URL); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("delete_mode: status %d\n%s", resp.StatusCode, body)
	}
	if a := f.audit.String(); !strings.Contains(a, `"msg":"rate_limit_admin_write"`) || !strings.Contains(a, `"op":"delete"`) ||
		!strings.Contains(a, `"mode":"shadow"`) || !strings.Contains(a, `"changed":true`) || !strings.Contains(a, `"outcome":"ok"`) {
		t.Fatalf("audit record: %s", a)
	}
	doc, err := f.store.Document(ctx, "api")
	if err != nil || doc.GetPublishedRules().GetMode() != configv1.Mode_MODE_UNSPECIFIED || len(doc.GetPublishedRules().GetRules()) != 1 {
		t.Fatalf("after delete_mode: %v, %v", doc, err)
	}
	code, body := b.get("?limiter=api&mode_deleted=1")
	if mode := regexp.MustCompile(`id="mode"[^>]*>([^<]*)`).FindStringSubmatch(body); code != http.StatusOK || mode == nil || !strings.HasPrefix(mode[1], "set by no tier") ||
		strings.Contains(body, `id="delete-mode"`) || !strings.Contains(body, "Deleted the published mode") {
		t.Fatalf("page after delete_mode: %d, mode %q\n%s", code, mode, body)
	}
	// The form sent again, at the version it was read at: nothing written.
	if resp, body := b.post("?limiter=api", form, f.srv.URL); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "Someone else changed the rules") {
		t.Fatalf("delete_mode again: status %d\n%s", resp.StatusCode, body)
	}
}
