package debug_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/pages/debug"
)

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The JSON document is exactly testdata/snapshot.json: the tiers, the
// overridden rules, the replica age, the open breaker and the block counts of
// the fixture's real checks.
func TestJSON(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t)
	want, err := os.ReadFile("testdata/snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	want = bytes.Replace(want, []byte(`"PREFIX"`), []byte(`"`+f.prefix+`"`), 1)
	for _, tc := range []struct{ query, accept string }{
		{"?format=json", ""},
		{"", "application/json"},
	} {
		resp, body := get(t, srv.URL+tc.query, "Accept", tc.accept)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s: status %d, headers %v", tc.query, resp.StatusCode, resp.Header)
		}
		if body != string(want) {
			t.Fatalf("%s %s: JSON differs from testdata/snapshot.json:\n%s", tc.query, tc.accept, body)
		}
		var s debug.Snapshot
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHTML(t *testing.T) {
	srv := newFixture(t).server(t)
	for _, accept := range []string{"", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"} {
		resp, body := get(t, srv.URL, "Accept", accept)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "style-src 'sha256-") || strings.Contains(csp, "unsafe") {
			t.Fatalf("Content-Security-Policy %q", csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("headers %v", resp.Header)
		}
		for _, want := range []string{
			`<section class="limiter" id="limiter-api" data-limiter="api">`,
			`<tr data-rule="trusted" data-tier="default" data-action="skip"><td class="num">1</td>`, // an exemption: first
			`<tr data-rule="per_user" data-tier="file" data-action="limit"><td class="num">2</td>`,
			`&lt;script&gt;alert(1)&lt;/script&gt; lowered for incident #42`,
			`<span data-blocks="3">1 / 2 / 3</span>`,
			`<tr data-rule="per_user" data-tier="default" data-overridden-by="file">`,
			`refreshed <span data-replica-age="42">42s ago</span>`,
			`last refresh failed: dial tcp 10.0.0.5:6379: connect: connection refused`,
			`<span class="state state-open" data-breaker="open">open</span>`,
			`<code>kind: {one_of: [&#34;api&#34;, &#34;login&#34;]}</code>`,
			`<code>path: {regex: &#34;^/api/&#34;}</code>`,
			`<td class="num">per check</td><td>1h</td>`, // by_plan's LimitFunc
			`<td>15m</td>`, // login_ban's ban
		} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %s", want)
			}
		}
		if strings.Contains(body, "<script") {
			t.Error("the page contains a <script: a rule description was not escaped")
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	srv := newFixture(t).server(t)
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, body := get(t, srv.URL+"?limiter=nope"); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, `"nope"`) {
		t.Fatalf("unknown limiter: %d %q", resp.StatusCode, body)
	}
	resp, body := get(t, srv.URL+"?limiter=jobs&format=json")
	var s debug.Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	if len(s.Limiters) != 1 || s.Limiters[0].Name != "jobs" || s.Limiters[0].Breaker != "open" {
		t.Fatalf("?limiter=jobs: %+v", s.Limiters)
	}
}

// Without options and limiters the page still renders.
func TestEmptyHandler(t *testing.T) {
	h := debug.New(debug.Options{})
	if got := h.Snapshot(); len(got.Limiters) != 0 || got.GeneratedAt.IsZero() {
		t.Fatalf("%+v", got)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "solo", Store: ratelimit.NewMemoryStore()})
	if err != nil {
		t.Fatal(err)
	}
	h.Register(l, nil, l)
	if got := h.Snapshot(); len(got.Limiters) != 1 || got.Limiters[0].RuleStore != nil {
		t.Fatalf("%+v", got.Limiters)
	}
}

// ?limiter= is bounded as the admin page bounds it: a value that is no
// limiter name (a-z, 0-9 and _, at most 64 bytes) is refused with 400, and
// the answer quotes at most its first 80 characters, whatever its length.
func TestLimiterQueryBounded(t *testing.T) {
	srv := newFixture(t).server(t)
	for _, tt := range []struct {
		name, value string
		code        int
		want        string
	}{
		{"unknown", "nope", http.StatusNotFound, `no limiter "nope" is registered`},
		{"not a name", "API", http.StatusBadRequest, `"API" is not a limiter name`},
		{"long", strings.Repeat("a", 100<<10), http.StatusBadRequest, `is not a limiter name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, srv.URL+"?limiter="+tt.value)
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.want) || len(body) > 300 {
				t.Fatalf("?limiter= of %d bytes: %d, %d bytes %.200q; want %d with %q, at most 300 bytes",
					len(tt.value), resp.StatusCode, len(body), body, tt.code, tt.want)
			}
		})
	}
}
