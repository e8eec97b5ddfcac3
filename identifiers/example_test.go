package identifiers_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
)

func ExampleTrustedProxies_ClientIP() {
	tp := identifiers.MustParseTrustedProxies("10.0.0.0/8")
	h := http.Header{}
	h.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.3")

	// From the load balancer: its header is believed, right to left.
	fmt.Println(tp.ClientIP(netip.MustParseAddr("10.0.0.2"), h.Values))
	// Straight from the internet: the header is ignored.
	fmt.Println(tp.ClientIP(netip.MustParseAddr("203.0.113.7"), h.Values))
	// Output:
	// 198.51.100.9
	// 203.0.113.7
}

func ExampleFromHTTP() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /projects/{id}", func(http.ResponseWriter, *http.Request) {})

	r := httptest.NewRequest("GET", "/projects/42", nil)
	r.RemoteAddr = "[2001:db8::5]:40000"
	r.Header.Set("Authorization", "Bearer token-of-user-123")

	id := identifiers.FromHTTP(r, identifiers.HTTPOptions{
		Mux: mux, // the middleware wraps the whole mux: resolve the pattern up front
		Properties: func(r *http.Request, id ratelimit.Identifier) {
			if r.Header.Get("Authorization") != "" { // a real service asks its auth layer
				id[identifiers.User] = "user:123"
			}
		},
	})
	fmt.Println(id[identifiers.IP], id[identifiers.IPFull], id[identifiers.Endpoint], id[identifiers.User])
	// Output: 2001:db8::/64 2001:db8::5 GET /projects/{id} user:123
}
