package debug_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/pages/debug"
)

// DNS rebinding: a hostile page whose name resolves to 127.0.0.1 is the same
// origin as the loopback debug page to the browser, so it could read the
// limits and rules as JSON. On a loopback listener the page answers only to
// loopback names, unless Options.AllowedHosts names others.
func TestHostCheck(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "api", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "secret_limit", Limit: 7, Period: 60e9}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host    string
		allowed []string
		want    int
	}{
		{"127.0.0.1", nil, http.StatusOK},
		{"localhost", nil, http.StatusOK},
		{"[::1]", nil, http.StatusOK},
		{"evil.example", nil, http.StatusForbidden},
		{"localhost.evil.example", nil, http.StatusForbidden},
		{"ratelimit.internal", []string{"ratelimit.internal"}, http.StatusOK},
		{"evil.example", []string{"ratelimit.internal"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(debug.New(debug.Options{AllowedHosts: tt.allowed}, l))
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		for _, query := range []string{"?format=json", "?limiter=api", "?limiter=nope"} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+query, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host + ":" + port
			resp, body := do(t, req)
			want := tt.want
			if want == http.StatusOK && query == "?limiter=nope" {
				want = http.StatusNotFound
			}
			if resp.StatusCode != want {
				t.Errorf("Host %s%s (allowed %v): status %d, want %d", req.Host, query, tt.allowed, resp.StatusCode, want)
			}
			if want == http.StatusForbidden && strings.Contains(body, "secret_limit") {
				t.Errorf("Host %s%s: the refused answer shows the rules:\n%s", req.Host, query, body)
			}
		}
		srv.Close()
	}
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp, b.String()
}

// CheckHost answers as the page does: what it guards (/metrics beside the
// page) is refused to a rebound name and served to loopback or allowed ones.
func TestCheckHost(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `ratelimit_checks_total{rate_limiter="api"} 1`)
	})
	tests := []struct {
		host    string
		allowed []string
		want    int
	}{
		{"127.0.0.1", nil, http.StatusOK},
		{"localhost", nil, http.StatusOK},
		{"[::1]", nil, http.StatusOK},
		{"evil.example", nil, http.StatusForbidden},
		{"metrics.internal", []string{"metrics.internal"}, http.StatusOK},
		{"127.0.0.1", []string{"metrics.internal"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(debug.CheckHost(metrics, tt.allowed))
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host + ":" + port
		resp, body := do(t, req)
		if resp.StatusCode != tt.want || strings.Contains(body, "rate_limiter") != (tt.want == http.StatusOK) {
			t.Errorf("Host %s (allowed %v): %d %q, want %d", req.Host, tt.allowed, resp.StatusCode, body, tt.want)
		}
		srv.Close()
	}
}

// A refused Host is quoted in part: the header is the client's, whatever
// its length.
func TestRefusedHostQuotedInPart(t *testing.T) {
	srv := httptest.NewServer(debug.New(debug.Options{}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = strings.Repeat("a", 32<<10) + ".example"
	resp, body := do(t, req)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "does not answer to the name") || len(body) > 300 {
		t.Fatalf("Host of %d bytes: %d, %d bytes %.200q; want 403, at most 300 bytes", len(req.Host), resp.StatusCode, len(body), body)
	}
}
