package identifiers

import (
	"fmt"
	"net/netip"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Well-known identifier properties. Rules match on and count by these names;
// using the constants keeps every adapter and every service spelling them the
// same way (docs/design.md#identifiers).
const (
	User          = "user"                   // the authenticated principal, e.g. "user:123", or Anonymous
	IP            = "ip"                     // the client IP, an IPv6 client's /64 ("2001:db8::/64"; see IPValue)
	IPFull        = "ip_full"                // the client's whole IP address, every IPv6 address apart
	Path          = "path"                   // the raw request path; match on it, do not count by it
	Method        = ratelimit.PropertyMethod // the HTTP method, e.g. "GET"; a rule matching GET matches HEAD too
	Endpoint      = "endpoint"               // the route template, e.g. "GET /users/{id}", or Unmatched
	RequestType   = "request_type"           // the kind of traffic, e.g. "api", "web", "git"
	Namespace     = "namespace"              // the namespace (group or project) the request acts on
	RootNamespace = "root_namespace"         // the top-level namespace, for per-tenant resource budgets
	NamespacePlan = "namespace_plan"         // the namespace's plan, e.g. "premium"
	Project       = "project"                // the project the request acts on
	Service       = "service"                // the serving service's name
	GRPCService   = "grpc_service"           // the gRPC service, e.g. "grpc.health.v1.Health"
	GRPCMethod    = "grpc_method"            // the full gRPC method, e.g. "/grpc.health.v1.Health/Check"
	TaskType      = "task_type"              // the background task's type name
	Queue         = "queue"                  // the background task's queue
)

// Anonymous is the user value of unauthenticated callers (= ratelimit.Anonymous).
// Its angle brackets keep it from colliding with any real user name.
const Anonymous = ratelimit.Anonymous

// Unmatched is the endpoint value of requests that matched no route. Like
// Anonymous it cannot collide with a real route template.
const Unmatched = "<unmatched>"

// EndpointOrUnmatched returns template, or Unmatched when it is empty.
func EndpointOrUnmatched(template string) string {
	if template == "" {
		return Unmatched
	}
	return template
}

// DefaultIPv6Prefix is the prefix length IPv6 client addresses are aggregated
// to in the IP property: one network (a /64 is what one subscriber or one
// host is usually given) counts as one client, so that an attacker holding a
// /64 does not get 2^64 identities.
const DefaultIPv6Prefix = 64

// IPValue returns the IP property of client address a: an IPv4 address (or an
// IPv4-mapped IPv6 one, or one translated into the NAT64 well-known prefix
// 64:ff9b::/96) as is, "192.0.2.1"; an IPv6 address as its prefix of
// ipv6Bits bits, "2001:db8::/64", or the address itself when ipv6Bits is 128.
// ipv6Bits 0 means DefaultIPv6Prefix; CheckIPv6Prefix tells the valid values.
// Two kinds of IPv6 address whose network is not one client's are not
// aggregated: a Teredo address (2001::/32) is its client's public IPv4
// address, and an address in the local-use translation prefix
// 64:ff9b:1::/48 stays whole (package documentation, Client IP).
// It returns "" for the zero Addr.
func IPValue(a netip.Addr, ipv6Bits int) string {
	a = normalize(a)
	if !a.IsValid() {
		return ""
	}
	return ipValue(a, a.String(), ipv6Bits)
}

// ipValue is IPValue of a normalised, valid a whose string is full.
func ipValue(a netip.Addr, full string, ipv6Bits int) string {
	if ipv6Bits <= 0 {
		ipv6Bits = DefaultIPv6Prefix
	}
	if a.Is4() || ipv6Bits >= 128 || nat64LocalUse.Contains(a) {
		return full
	}
	if teredo.Contains(a) {
		// RFC 4380 §4: the /64 is the Teredo server's, shared by all its
		// clients; the last 32 bits are the client's public IPv4 address,
		// inverted.
		b := a.As16()
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}).String()
	}
	p, _ := a.Prefix(ipv6Bits) // cannot fail: a is IPv6 and 0 < ipv6Bits < 128
	return p.String()
}

var (
	// nat64LocalUse is RFC 8215's prefix for translators of one network:
	// where an IPv4 client's address sits in it depends on the prefix
	// length the operator chose, so an address is kept whole.
	nat64LocalUse = netip.MustParsePrefix("64:ff9b:1::/48")
	// teredo is RFC 4380's Teredo prefix.
	teredo = netip.MustParsePrefix("2001::/32")
)

// CheckIPv6Prefix reports an error unless bits is a prefix length the IP
// property can aggregate IPv6 clients to, 1 to 128 (128 keeps every address
// apart). The adapters' WithIPv6Prefix options check with it at start-up.
func CheckIPv6Prefix(bits int) error {
	if bits < 1 || bits > 128 {
		return fmt.Errorf("identifiers: IPv6 prefix /%d is not between /1 and /128", bits)
	}
	return nil
}

// SetIP sets the client-address properties of id: IP (IPValue(a, ipv6Bits))
// and IPFull (the whole address; an IPv4-mapped one, or one in the NAT64
// well-known prefix 64:ff9b::/96, as its IPv4 address). It sets neither when
// a is the zero Addr (a Unix socket).
func SetIP(id ratelimit.Identifier, a netip.Addr, ipv6Bits int) {
	a = normalize(a)
	if !a.IsValid() {
		return
	}
	full := a.String()
	id[IP] = ipValue(a, full, ipv6Bits)
	id[IPFull] = full
}
