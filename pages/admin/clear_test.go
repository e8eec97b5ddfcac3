package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// A clear that finds no key of the identifier says so and why, as `ratekit
// clear` does (which exits 1), instead of reporting "Cleared 0" as a
// success; a clear that removed keys still reports them. Its audit record
// says whether it changed anything: every clear was "changed": false.
func TestClearNothing(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	// The service's limiter, counting under the page's prefix.
	limiter := f.serviceLimiter(t, f.client, ratelimit.Rule{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 100, Period: time.Minute})
	token := b.csrf()
	tests := []struct {
		name    string
		ip      string
		counted int // requests counted for the identifier before the clear
		want    string
		class   string
	}{
		{"nothing to clear", "192.0.2.77", 0, "Nothing was cleared: no counter or ban key of this identifier exists under " + `&#34;` + f.keyPrefix + `&#34;`, "notice warn"},
		{"keys cleared", "192.0.2.78", 1, "Cleared 1 counter and ban key(s) for the identifier.", "notice ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range tt.counted {
				if res := limiter.Check(ctx, ratelimit.Identifier{"ip": tt.ip}); res.Err != nil {
					t.Fatal(res.Err)
				}
			}
			f.audit.Reset()
			resp, body := b.post("?limiter=api", url.Values{"csrf": {token}, "op": {"clear"}, "limiter": {"api"},
				"confirm": {"yes"}, "id.ip": {tt.ip}}, f.srv.URL)
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("clear: %d\n%s", resp.StatusCode, body)
			}
			_, body = b.get(resp.Header.Get("Location"))
			if want := `<p class="` + tt.class + `" id="message" role="status">` + tt.want; !strings.Contains(body, want) {
				t.Fatalf("the page after the clear lacks %q:\n%s", want, body)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(strings.TrimSpace(f.audit.String())), &line); err != nil {
				t.Fatalf("one audit line expected: %v\n%s", err, f.audit)
			}
			if line["op"] != "clear" || line["changed"] != (tt.counted > 0) || line["keys_deleted"] != float64(tt.counted) || line["key_prefix"] != f.keyPrefix {
				t.Fatalf("audit of a clear of %d key(s): %v", tt.counted, line)
			}
		})
	}
}

// "Lift ban / clear…" with every identifier field empty offers no
// confirmation, which could only be refused (a clear needs a property): the
// page asks for one instead.
func TestClearNeedsIdentifier(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	code, body := b.get("?limiter=api&clear=1&id.ip=&id.user=&id.path=")
	if code != http.StatusOK || strings.Contains(body, `id="clear-form"`) {
		t.Fatalf("a confirmation to clear an empty identifier is offered (status %d)\n%s", code, body)
	}
	if !strings.Contains(body, "Give at least one identifier property to clear") {
		t.Fatalf("the page does not say what is missing\n%s", body)
	}
	// With a property the confirmation is offered.
	if _, body := b.get("?limiter=api&clear=1&id.ip=192.0.2.9"); !strings.Contains(body, `id="clear-form"`) {
		t.Fatalf("no confirmation for ip=192.0.2.9\n%s", body)
	}
}

// The clear confirmation names the rules whose counter the identifier
// shares with other clients, which a clear leaves (Limiter.Clear): it said
// the identifier starts again from zero on every rule, and a clear of one
// client deleted counters every client shared.
func TestClearConfirmationNamesSharedRules(t *testing.T) {
	f := newFixture(t, allowAll)
	b := newBrowser(t, f)
	_, body := b.get("?limiter=api&clear=1&id.ip=192.0.2.9")
	want := "but these, whose counter it shares with other clients (to lift their block, delete or change the rule): per_user (the identifier has no &#34;user&#34;: the counter of every client without it).</p>"
	if !strings.Contains(body, want) {
		t.Fatalf("the confirmation lacks %q\n%s", want, body)
	}
	// With every property a rule counts by, no rule is shared.
	if _, body := b.get("?limiter=api&clear=1&id.ip=192.0.2.9&id.user=u"); !strings.Contains(body, "starts again from zero on every rule.</p>") {
		t.Fatalf("a confirmation for ip and user names shared rules\n%s", body)
	}
}
