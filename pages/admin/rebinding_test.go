package admin_test

import (
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/pages/admin"
)

// DNS rebinding: a hostile page whose name resolves to 127.0.0.1 is the
// same origin as the loopback page to the browser, so its POST carries a
// matching Origin, the page's cookie and its token. The page refuses any
// Host that is not a loopback name (or an allowed one), before writing.
func TestDNSRebindingRefused(t *testing.T) {
	f := newFixture(t, allowAll)
	token := newBrowser(t, f).csrf()
	_, version, _ := f.store.VersionedDocument(ctx, "api")
	_, port, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	before := f.storeState(t)

	post := func(host, name string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.url()+"?limiter=api", strings.NewReader(saveForm(token, version, name).Encode()))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+host)
		req.AddCookie(&http.Cookie{Name: "ratekit_admin_csrf", Value: token})
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readBody(t, resp)
	}

	for _, host := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port} {
		if code, body := post(host, "rebound_rule"); code != http.StatusForbidden || !strings.Contains(body, "does not answer to the name") {
			t.Fatalf("Host %s: status %d, want 403:\n%s", host, code, body)
		}
	}
	if after := f.storeState(t); !maps.Equal(before, after) {
		t.Fatalf("a rebound POST wrote to Redis:\nbefore %v\nafter  %v", before, after)
	}
	if a := f.audit.String(); strings.Contains(a, "rate_limit_admin_write") || strings.Count(a, "rate_limit_admin_refused") != 3 {
		t.Fatalf("audit after refused rebound writes:\n%s", a)
	}
	req, _ := http.NewRequest(http.MethodGet, f.url(), nil)
	req.Host = "evil.example:" + port
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := readBody(t, resp); code != http.StatusForbidden || strings.Contains(body, "csrf") {
		t.Fatalf("rebound GET: status %d, want 403 without a form:\n%s", code, body)
	}
	// The refused name is quoted in part, in the answer and the audit line:
	// the header is the client's, whatever its length.
	long := strings.Repeat("a", 32<<10) + ".example"
	if code, body := post(long, "rebound_rule"); code != http.StatusForbidden || strings.Contains(body, strings.Repeat("a", 81)) || len(body) > 8<<10 {
		t.Fatalf("Host of %d bytes: status %d, %d bytes; want 403 quoting at most 80 characters of it", len(long), code, len(body))
	}
	if a := f.audit.String(); strings.Contains(a, strings.Repeat("a", 81)) {
		t.Fatalf("the audit line quotes the whole Host of %d bytes", len(long))
	}

	for i, host := range []string{"localhost:" + port, "127.0.0.1:" + port} {
		if code, body := post(host, []string{"via_localhost", "via_loopback"}[i]); code != http.StatusSeeOther {
			t.Fatalf("Host %s: status %d, want 303:\n%s", host, code, body)
		}
		_, version, _ = f.store.VersionedDocument(ctx, "api")
	}
}

// Options.AllowedHosts names the hosts a page answers to, for a page reached
// by name (through a proxy): those pass, others do not.
func TestAllowedHosts(t *testing.T) {
	f := newFixtureOn(t, newFixture(t, nil).client, allowAll, func(o *admin.Options) { o.AllowedHosts = []string{"ratelimit.internal"} })
	for host, want := range map[string]int{"ratelimit.internal": http.StatusOK, "ratelimit.internal:8080": http.StatusOK,
		"evil.example": http.StatusForbidden, "127.0.0.1": http.StatusForbidden} {
		req, _ := http.NewRequest(http.MethodGet, f.url(), nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := readBody(t, resp); code != want {
			t.Errorf("Host %s: status %d, want %d", host, code, want)
		}
	}
}
