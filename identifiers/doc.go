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
// header. The zero TrustedProxies trusts nobody. The resolver is transport
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
