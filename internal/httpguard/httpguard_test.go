package httpguard_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/httpguard"
)

// The Host check on a real loopback listener: loopback names pass, any other
// name is refused unless allowed.
func TestHostAllowed(t *testing.T) {
	var allowed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !httpguard.HostAllowed(r, allowed) {
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	tests := []struct {
		host    string
		allowed []string
		want    int
	}{
		{"127.0.0.1:" + port, nil, http.StatusOK},
		{"localhost:" + port, nil, http.StatusOK},
		{"LOCALHOST", nil, http.StatusOK},
		{"[::1]:" + port, nil, http.StatusOK},
		{"127.0.0.2:" + port, nil, http.StatusOK},
		{"evil.example:" + port, nil, http.StatusForbidden},
		{"evil.example", nil, http.StatusForbidden},
		{"localhost.evil.example:" + port, nil, http.StatusForbidden},
		{"admin.internal:" + port, []string{"admin.internal"}, http.StatusOK},
		{"admin.internal:1", []string{"admin.internal:" + port}, http.StatusForbidden},
		{"admin.internal:" + port, []string{"admin.internal:" + port}, http.StatusOK},
		{"127.0.0.1:" + port, []string{"admin.internal"}, http.StatusForbidden},
		{"anything:" + port, []string{"*"}, http.StatusOK},
		// a flag's "a, b": the space is not part of the name
		{"b.internal:" + port, []string{"a.internal", " b.internal"}, http.StatusOK},
	}
	for _, tt := range tests {
		allowed = tt.allowed
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("Host %q, allowed %q: %d, want %d", tt.host, tt.allowed, resp.StatusCode, tt.want)
		}
	}
}

// An empty entry of the allowed names ("a,,b" from a flag) allows no
// request: it allowed one without a Host (HTTP/1.0), on any listener.
func TestHostAllowedEmptyEntry(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Host = ""
	for _, allowed := range [][]string{{"a.internal", "", "b.internal"}, {" "}} {
		if httpguard.HostAllowed(r, allowed) {
			t.Errorf("allowed %q: a request without a Host is allowed", allowed)
		}
	}
}

func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:1": true, "[::1]:80": true,
		":8080": false, "0.0.0.0:80": false, "10.0.0.1:80": false, "bogus": false,
	} {
		if got := httpguard.LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Server sets every timeout: a zero one means "never" to net/http.
func TestServerTimeouts(t *testing.T) {
	s := httpguard.Server(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("server without a bound: %+v", s)
	}
}

// CheckHost refuses a rebound name before the handler runs and says which
// setting allows another name; a loopback name reaches the handler.
func TestCheckHost(t *testing.T) {
	srv := httptest.NewServer(httpguard.CheckHost(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "secret_metric 1\n")
	}), nil, "-allowed-hosts"))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tt := range []struct {
		host, want string
		code       int
	}{
		{"127.0.0.1:" + port, "secret_metric", http.StatusOK},
		{"localhost:" + port, "secret_metric", http.StatusOK},
		{"evil.example:" + port, "add the name to -allowed-hosts", http.StatusForbidden},
		// A refused name is quoted in part: the header is the client's.
		{strings.Repeat("a", 32<<10) + ".example", `"` + strings.Repeat("a", 80) + `"; use localhost`, http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.want) {
			t.Errorf("Host %.100q: %d %.300q, want %d with %q", tt.host, resp.StatusCode, body, tt.code, tt.want)
		}
	}
}
