package identifiers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

func TestFromHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/static/", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/files/{name}/", func(http.ResponseWriter, *http.Request) {})
	lb := MustParseTrustedProxies("10.0.0.0/8")

	tests := []struct {
		name    string
		method  string
		target  string
		remote  string
		headers map[string]string
		opts    HTTPOptions
		pattern string // r.Pattern as set by a router that already ran
		want    ratelimit.Identifier
	}{
		{
			name: "unrouted request without mux is unmatched", method: "GET", target: "/users/42", remote: "203.0.113.7:5555",
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/users/42", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "pattern already set by ServeMux", method: "GET", target: "/users/42", remote: "203.0.113.7:5555", pattern: "GET /users/{id}",
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/users/42", Endpoint: "GET /users/{id}", User: Anonymous},
		},
		{
			name: "mux resolves the pattern up front", method: "GET", target: "/users/42", remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/users/42", Endpoint: "GET /users/{id}", User: Anonymous},
		},
		{
			name: "mux wins over an outer mux's pattern", method: "GET", target: "/users/42", remote: "203.0.113.7:5555",
			pattern: "/", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/users/42", Endpoint: "GET /users/{id}", User: Anonymous},
		},
		{
			name: "mux: prefix pattern", method: "POST", target: "/static/a/b.css", remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "POST", Path: "/static/a/b.css", Endpoint: "/static/", User: Anonymous},
		},
		{
			name: "mux: no route is unmatched", method: "GET", target: "/nope", remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/nope", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "mux: wrong method is unmatched", method: "DELETE", target: "/users/42", remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "DELETE", Path: "/users/42", Endpoint: Unmatched, User: Anonymous},
		},
		{
			// ServeMux redirects it to "/files/secret-1/" and, for CONNECT
			// alone, reports that path as the pattern: a client would pick
			// its own endpoint, one per path.
			name: "mux: CONNECT redirected to a trailing slash is unmatched", method: "CONNECT", target: "/files/secret-1",
			remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "CONNECT", Path: "/files/secret-1", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "mux: CONNECT to a route keeps its pattern", method: "CONNECT", target: "/files/x/y",
			remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "CONNECT", Path: "/files/x/y", Endpoint: "/files/{name}/", User: Anonymous},
		},
		{
			// Its pattern is its cleaned path with a slash: not a redirect.
			name: "mux: CONNECT to a prefix pattern through a dot-dot keeps its pattern", method: "CONNECT", target: "/static/a/..",
			remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "CONNECT", Path: "/static/a/..", Endpoint: "/static/", User: Anonymous},
		},
		{
			name: "mux: GET redirected to a trailing slash has the route's pattern", method: "GET", target: "/files/secret-3",
			remote: "203.0.113.7:5555", opts: HTTPOptions{Mux: mux},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/files/secret-3", Endpoint: "/files/{name}/", User: Anonymous},
		},
		{
			name: "spoofed XFF from an untrusted peer is ignored", method: "GET", target: "/", remote: "203.0.113.7:5555",
			headers: map[string]string{"X-Forwarded-For": "1.1.1.1"}, opts: HTTPOptions{TrustedProxies: lb},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "XFF from a trusted proxy", method: "GET", target: "/", remote: "10.0.0.2:5555",
			headers: map[string]string{"X-Forwarded-For": "1.1.1.1, 198.51.100.9"}, opts: HTTPOptions{TrustedProxies: lb},
			want: ratelimit.Identifier{IP: "198.51.100.9", IPFull: "198.51.100.9", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "IPv6 peer: ip is its /64", method: "GET", target: "/", remote: "[2001:db8::7]:5555",
			want: ratelimit.Identifier{IP: "2001:db8::/64", IPFull: "2001:db8::7", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "IPv6 peer: ip is its /48 by option", method: "GET", target: "/", remote: "[2001:db8:1:2::7]:5555",
			opts: HTTPOptions{IPv6Prefix: 48},
			want: ratelimit.Identifier{IP: "2001:db8:1::/48", IPFull: "2001:db8:1:2::7", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "NAT64 (RFC 6052 well-known prefix) peer is its IPv4 client", method: "GET", target: "/", remote: "[64:ff9b::cb00:7107]:5555",
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "IPv4-mapped IPv6 peer is IPv4", method: "GET", target: "/", remote: "[::ffff:203.0.113.7]:5555",
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "unix socket peer has no ip", method: "GET", target: "/", remote: "@",
			want: ratelimit.Identifier{Method: "GET", Path: "/", Endpoint: Unmatched, User: Anonymous},
		},
		{
			name: "Properties hook sets the user and more", method: "GET", target: "/", remote: "203.0.113.7:5555",
			headers: map[string]string{"X-User": "42"},
			opts: HTTPOptions{Properties: func(r *http.Request, id ratelimit.Identifier) {
				if u := r.Header.Get("X-User"); u != "" {
					id[User] = "user:" + u
				}
				id[RequestType] = "api"
			}},
			want: ratelimit.Identifier{IP: "203.0.113.7", IPFull: "203.0.113.7", Method: "GET", Path: "/", Endpoint: Unmatched, User: "user:42", RequestType: "api"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.target, nil)
			r.RemoteAddr = tc.remote
			r.Pattern = tc.pattern
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			if got := FromHTTP(r, tc.opts); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("FromHTTP = %v\nwant       %v", got, tc.want)
			}
		})
	}
}

// TestFromHTTPOnRealServer checks the identifier a real server's request gives:
// the loopback socket peer, and r.Pattern when the middleware wraps the route.
func TestFromHTTPOnRealServer(t *testing.T) {
	got := make(chan ratelimit.Identifier, 2)
	h := func(w http.ResponseWriter, r *http.Request) { got <- FromHTTP(r, HTTPOptions{}) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/items/7", nil)
	req.Header.Set("X-Forwarded-For", "1.1.1.1") // spoofed; nobody is trusted
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	id := <-got
	want := ratelimit.Identifier{IP: "127.0.0.1", IPFull: "127.0.0.1", Method: "GET", Path: "/items/7", Endpoint: "GET /items/{id}", User: Anonymous}
	if !reflect.DeepEqual(id, want) {
		t.Errorf("identifier = %v, want %v", id, want)
	}
}

func TestRouteEndpoint(t *testing.T) {
	if got := RouteEndpoint("GET", "/users/:id"); got != "GET /users/:id" {
		t.Errorf("got %q", got)
	}
	if got := RouteEndpoint("GET", ""); got != Unmatched {
		t.Errorf("got %q", got)
	}
	if EndpointOrUnmatched("") != Unmatched || EndpointOrUnmatched("/x") != "/x" {
		t.Error("EndpointOrUnmatched")
	}
	if Anonymous != ratelimit.Anonymous {
		t.Error("Anonymous differs from ratelimit.Anonymous")
	}
}

func TestIPValue(t *testing.T) {
	tests := []struct {
		addr string
		bits int
		want string
	}{
		{"192.0.2.1", 0, "192.0.2.1"},
		{"192.0.2.1", 56, "192.0.2.1"},
		{"::ffff:192.0.2.1", 0, "192.0.2.1"},
		{"2001:db8::1", 0, "2001:db8::/64"},
		{"2001:db8::ffff:1", 64, "2001:db8::/64"},
		{"2001:db8:0:1::1", 0, "2001:db8:0:1::/64"},
		{"2001:db8:0:1::1", 56, "2001:db8::/56"},
		{"2001:db8:aa:ff00::1", 56, "2001:db8:aa:ff00::/56"},
		{"2001:db8::1", 128, "2001:db8::1"},
		{"fe80::1%eth0", 0, "fe80::/64"},
		{"2001:db8::1", 1, "::/1"},
		// An IPv4 client through a stateless translator (RFC 6052's
		// well-known prefix) is that IPv4 client, not the translator's /64.
		{"64:ff9b::c000:201", 0, "192.0.2.1"},
		{"64:ff9b::198.51.100.9", 48, "198.51.100.9"},
		{"64:ff9b::198.51.100.9", 128, "198.51.100.9"},
		{"64:ff9b::1:c000:201", 0, "64:ff9b::/64"}, // outside the /96: not a translated address
		// The local-use prefix (RFC 8215) embeds IPv4 where the operator's
		// prefix length puts it: each address is kept whole.
		{"64:ff9b:1:c000:2:100::", 0, "64:ff9b:1:c000:2:100::"},
		{"64:ff9b:1:ffff:ffff::1", 56, "64:ff9b:1:ffff:ffff::1"},
		// Teredo (RFC 4380): the /64 is the Teredo server's, shared by all
		// its clients; the client is its public IPv4 address.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", 0, "192.0.2.45"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", 128, "2001:0:4136:e378:8000:63bf:3fff:fdd2"},
		// 6to4 (RFC 3056): the /64 is one network of the site behind one
		// IPv4 address, as for any other IPv6 address.
		{"2002:c000:201:1::1", 0, "2002:c000:201:1::/64"},
	}
	for _, tt := range tests {
		if got := IPValue(netip.MustParseAddr(tt.addr), tt.bits); got != tt.want {
			t.Errorf("IPValue(%s, %d) = %q, want %q", tt.addr, tt.bits, got, tt.want)
		}
	}
	if got := IPValue(netip.Addr{}, 0); got != "" {
		t.Errorf("IPValue(zero) = %q, want empty", got)
	}
	for _, bits := range []int{-1, 0, 129} {
		if CheckIPv6Prefix(bits) == nil {
			t.Errorf("CheckIPv6Prefix(%d) = nil, want an error", bits)
		}
	}
	for _, bits := range []int{1, 48, 64, 128} {
		if err := CheckIPv6Prefix(bits); err != nil {
			t.Errorf("CheckIPv6Prefix(%d) = %v", bits, err)
		}
	}
}
