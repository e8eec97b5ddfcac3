package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/pages/debug"
)

// /debug/ratelimit on a loopback listener answers only to loopback names
// (DNS rebinding), or to the names of -allowed-hosts.
func TestHostChecked(t *testing.T) {
	f, err := parseFlags([]string{"-available", "a.yaml", "-redis-url", "redis://x", "-allowed-hosts", "ratekit.internal,debug.internal:9090"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ratekit.internal", "debug.internal:9090"}; !slices.Equal(f.allowedHosts, want) {
		t.Fatalf("-allowed-hosts parsed as %q, want %q", f.allowedHosts, want)
	}
	empty, err := parseFlags([]string{"-available", "a.yaml", "-redis-url", "redis://x", "-allowed-hosts", ""})
	if err != nil {
		t.Fatal(err)
	}
	if empty.allowedHosts != nil {
		t.Fatalf("-allowed-hosts '' parsed as %q, want the default (nil)", empty.allowedHosts)
	}
	for _, tt := range []struct {
		name    string
		allowed []string
		host    string
		want    int
	}{
		{"loopback IP", nil, "127.0.0.1:9090", http.StatusOK},
		{"localhost", nil, "localhost:9090", http.StatusOK},
		{"rebound name", nil, "rebound.example:9090", http.StatusForbidden},
		{"allowed name", f.allowedHosts, "ratekit.internal:9090", http.StatusOK},
		{"allowed name and port", f.allowedHosts, "debug.internal:9090", http.StatusOK},
		{"loopback IP not in the allowed names", f.allowedHosts, "127.0.0.1:9090", http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The page as run serves it: the flag is the page's own option.
			srv := httptest.NewServer(debug.New(debug.Options{AllowedHosts: tt.allowed})) // a loopback listener
			defer srv.Close()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.want || (tt.want == http.StatusOK) != strings.Contains(string(body), "Rate limits") {
				t.Fatalf("Host %s: %d %q, want %d", tt.host, resp.StatusCode, body, tt.want)
			}
		})
	}
}
