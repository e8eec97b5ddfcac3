package exampleutil

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Every page Mount serves on the internal listener checks the Host alike
// (DNS rebinding): a rebound name gets 403 from /metrics as from the debug
// page, while Prometheus scraping by localhost, 127.0.0.1 or [::1] works and
// AllowedHosts admits another name.
func TestMountChecksHost(t *testing.T) {
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
		{"metrics.internal", []string{"metrics.internal"}, http.StatusOK},
		{"evil.example", []string{"metrics.internal"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		o := NewObservability()
		o.AllowedHosts = tt.allowed
		mux := http.NewServeMux()
		o.Mount(mux, l)
		srv := httptest.NewServer(mux) // a loopback listener, as the examples' default
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		for _, path := range []string{"/metrics", "/debug/ratelimit?format=json"} {
			req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host + ":" + port
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("GET %s, Host %s (allowed %q): %d, want %d", path, req.Host, tt.allowed, resp.StatusCode, tt.want)
			}
			if shown := strings.Contains(string(body), `"api"`) || strings.Contains(string(body), `rate_limiter="api"`); shown != (tt.want == http.StatusOK) {
				t.Errorf("GET %s, Host %s: the limiter shown: %v, want %v:\n%.300s", path, req.Host, shown, tt.want == http.StatusOK, body)
			}
		}
		srv.Close()
	}
}

// /metrics has the process's own series beside the limiters': an outage
// drill reads there whether goroutines or open files grow.
func TestMetricsHaveProcessSeries(t *testing.T) {
	o := NewObservability()
	mux := http.NewServeMux()
	o.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"\ngo_goroutines ", "\nprocess_open_fds "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}
