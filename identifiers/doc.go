// Package identifiers builds rate-limit identifiers (ratelimit.Identifier) the
// same way in every transport: well-known property names, the <anonymous> user
// sentinel, the fixed endpoint value of unmatched routes, and the client IP.
//
// # Client IP
//
// The client IP is the socket peer unless that peer is a configured trusted
// proxy (TrustedProxies). Only then are X-Forwarded-For, Forwarded (RFC 7239)
// or X-Real-IP consulted, walking the hop list from the right and skipping
// trusted hops, so that a client can never choose its own IP by sending a
// header; at most the last 64 hops are read (a list of trusted hops longer
// than that ends at the 64th). The zero TrustedProxies trusts nobody. The resolver is transport
// neutral (TrustedProxies.ClientIP takes a header lookup function), so the
// gRPC adapter resolves IPs from metadata the same way HTTP adapters do from
// headers.
//
// The client IP fills two properties (SetIP). IP ("ip") is what rules count
// clients by: an IPv4 address as is (IPv4-mapped IPv6 addresses are IPv4),
// an IPv6 address aggregated to its network, "2001:db8::/64" by default
// (DefaultIPv6Prefix; the adapters' WithIPv6Prefix and HTTPOptions.IPv6Prefix
// set another length, 128 keeps addresses apart), because one subscriber or
// host holds a whole /64 and would otherwise be 2^64 clients. IPFull
// ("ip_full") is the whole address, for matching or counting one address.
//
// Some IPv6 addresses are IPv4 clients, whose /64 would put every client of
// a translator or relay in one bucket:
//
//   - An address in the NAT64 well-known prefix 64:ff9b::/96 (RFC 6052) is an
//     IPv4 client reaching an IPv6 service through a stateless translator
//     (SIIT-DC, RFC 7755): it is that IPv4 address everywhere, in ip and
//     ip_full, in TrustedProxies and in forwarding headers, as an
//     IPv4-mapped address is.
//   - An address in the local-use prefix 64:ff9b:1::/48 (RFC 8215) holds its
//     IPv4 client where the prefix length the operator chose puts it, which
//     the address does not tell: ip is the whole address (one per client).
//   - A Teredo address (2001::/32, RFC 4380) holds its server's address in
//     its /64: ip is the client's public IPv4 address, which the address
//     holds too.
//
// A network-specific NAT64 prefix of the operator's own (RFC 6052 §2.2)
// cannot be told from any other IPv6 network, so its addresses are
// aggregated like any other's and its IPv4 clients share one /64. A service
// behind such a translator sets ip itself in a properties hook (every
// adapter's WithProperties, HTTPOptions.Properties), here for a /96 prefix
// with net/http (a WithIPv6Prefix of 128 keeps them apart too, but every IPv6
// client's addresses with them):
//
//	nat64 := netip.MustParsePrefix("2001:db8:64::/96")
//	ipv4Client := func(r *http.Request, id ratelimit.Identifier) {
//		full, _ := id.Get(identifiers.IPFull)
//		if a, err := netip.ParseAddr(full); err == nil && nat64.Contains(a) {
//			id[identifiers.IP] = netip.AddrFrom4([4]byte(a.AsSlice()[12:])).String()
//		}
//	}
//	http.Handle("/", ratelimithttp.Middleware(limiter, ratelimithttp.WithProperties(ipv4Client))(mux))
//
// A 6to4 address (2002::/16, RFC 3056) is aggregated as any other: its /64
// is one network of the one site behind its IPv4 address. So is a link-local
// address: every client reaching the service over a link-local address, on
// any link, is in fe80::/64 (the zone is dropped), one client; a service
// reached that way counts by ip_full, or sets a WithIPv6Prefix of 128.
//
// # Method
//
// The method property is the request's HTTP method as sent. A rule matching
// method GET also applies to HEAD, which servers answer with the GET handler
// (ratelimit.PropertyMethod).
//
// # Endpoint
//
// The endpoint property is always a route template ("GET /users/{id}"), never
// the raw path, so that it stays low-cardinality; requests that matched no route
// get Unmatched. For net/http the template is http.Request.Pattern, which
// ServeMux sets only when it dispatches the request: middleware that wraps a
// whole ServeMux runs before that and sees an empty Pattern. Either wrap each
// route's handler, or set HTTPOptions.Mux so that FromHTTP resolves the
// pattern up front with mux.Handler(r).
//
// # User
//
// FromHTTP sets user to Anonymous; a Properties hook replaces it with the
// authenticated principal (for example "user:123") and adds any other property
// the rules need.
package identifiers
