package identifiers

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Forwarding headers that TrustedProxies understands. Any other header name
// given to WithHeaders is read as a single address (like X-Real-IP, or a CDN's
// True-Client-IP).
const (
	HeaderXForwardedFor = "X-Forwarded-For"
	HeaderForwarded     = "Forwarded" // RFC 7239
	HeaderXRealIP       = "X-Real-IP"
)

var defaultHeaders = []string{HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP}

// TrustedProxies is the set of proxies whose forwarding headers are believed.
// The zero value trusts nobody: the client IP is always the socket peer.
//
// Put only proxies you run (load balancers, ingress) in the list. A request
// whose socket peer is not in it is identified by that peer, whatever headers it
// sends, so a client can never pick its own IP.
type TrustedProxies struct {
	prefixes []netip.Prefix
	headers  []string
}

// ParseTrustedProxies parses CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") and
// single addresses ("192.0.2.1", "::1"). IPv4-mapped IPv6 forms and forms in
// the NAT64 well-known prefix 64:ff9b::/96 are stored as IPv4
// (::ffff:10.0.0.0/104 and 64:ff9b::10.0.0.0/104 are 10.0.0.0/8), and a peer
// is compared as IPv4 when it is one (SetIP tells which), so an IPv6 prefix
// shorter than /96 that spans either range, such as "::/0", trusts no IPv4
// peer: list IPv4 proxies as IPv4 ("0.0.0.0/0" for every one). It rejects the
// whole list if any entry is invalid.
func ParseTrustedProxies(cidrs ...string) (TrustedProxies, error) {
	var tp TrustedProxies
	for _, s := range cidrs {
		p, err := parsePrefix(strings.TrimSpace(s))
		if err != nil {
			return TrustedProxies{}, fmt.Errorf("identifiers: trusted proxy %q: %w", s, err)
		}
		tp.prefixes = append(tp.prefixes, p)
	}
	return tp, nil
}

// MustParseTrustedProxies is ParseTrustedProxies that panics on error, for
// constant lists in main packages and tests.
func MustParseTrustedProxies(cidrs ...string) TrustedProxies {
	tp, err := ParseTrustedProxies(cidrs...)
	if err != nil {
		panic(err)
	}
	return tp
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR prefix: %w", err)
		}
		a, bits := p.Addr(), p.Bits()
		if (a.Is4In6() || nat64WellKnown.Contains(a)) && bits >= 96 {
			a, bits = embeddedIPv4(a), bits-96
		}
		return netip.PrefixFrom(a, bits).Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR prefix: %w", err)
	}
	a = normalize(a)
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// WithHeaders returns a copy of tp that consults only the named headers, in
// order of preference: the first one present in a request is used, the others
// are ignored. The default is X-Forwarded-For, then Forwarded, then X-Real-IP.
//
// Name the one header your proxies overwrite or append to. A proxy that
// appends to X-Forwarded-For but passes a client's Forwarded header through
// unchanged is safe with the default order only because X-Forwarded-For comes
// first; naming the header removes the doubt.
func (tp TrustedProxies) WithHeaders(names ...string) TrustedProxies {
	tp.headers = append([]string(nil), names...)
	return tp
}

// Prefixes returns the trusted prefixes.
func (tp TrustedProxies) Prefixes() []netip.Prefix {
	return append([]netip.Prefix(nil), tp.prefixes...)
}

// Trusts reports whether a is a trusted proxy.
func (tp TrustedProxies) Trusts(a netip.Addr) bool {
	a = normalize(a)
	if !a.IsValid() {
		return false
	}
	for _, p := range tp.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the IP of the client that sent a request received from the
// socket peer. header returns the values of a request header (for net/http,
// r.Header.Values; for gRPC, metadata.MD.Get).
//
// When peer is not trusted, ClientIP returns peer and reads no header. When it
// is, the first configured forwarding header present is walked from the right
// (the hop the nearest proxy wrote) leftwards, skipping trusted hops; the first
// untrusted hop is the client. When every hop is trusted, the leftmost one is.
// A hop that is not an IP address (garbage, "unknown", an obfuscated RFC 7239
// node) stops the walk: the nearest trusted hop to its right is returned, since
// anything further left may have been written by the client. Of either
// list header, X-Forwarded-For or Forwarded, the last 64 hops are read, and a
// hop further left counts as one that is not an IP address (no chain of
// proxies is that long): when the 64 hops read are all trusted, the
// leftmost of them is the client.
//
// The result is normalised: IPv4-mapped IPv6 and NAT64 well-known-prefix
// addresses become IPv4 (see SetIP), and zones are dropped. It is the zero
// netip.Addr only when peer is invalid (for example a Unix socket).
func (tp TrustedProxies) ClientIP(peer netip.Addr, header func(name string) []string) netip.Addr {
	peer = normalize(peer)
	if !tp.Trusts(peer) || header == nil {
		return peer
	}
	names := tp.headers
	if names == nil {
		names = defaultHeaders
	}
	for _, name := range names {
		vals := header(name)
		if len(vals) == 0 {
			continue
		}
		switch {
		case strings.EqualFold(name, HeaderXForwardedFor):
			return tp.walkXFF(peer, vals)
		case strings.EqualFold(name, HeaderForwarded):
			return tp.walkForwarded(peer, vals)
		default:
			if a, ok := parseHop(vals[len(vals)-1]); ok {
				return a
			}
			return peer
		}
	}
	return peer
}

// walkXFF walks comma-separated X-Forwarded-For values from the right without
// splitting the whole (client-controlled, possibly long) header, at most
// maxForwardedHops hops of it.
func (tp TrustedProxies) walkXFF(last netip.Addr, vals []string) netip.Addr {
	hops := 0
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for {
			j := strings.LastIndexByte(v, ',')
			hop := v[j+1:]
			if strings.TrimSpace(hop) != "" { // empty list elements are allowed by RFC 9110 §5.6.1
				if hops++; hops > maxForwardedHops {
					return last // every hop read is trusted: the leftmost read, as walkForwarded
				}
				a, ok := parseHop(hop)
				if !ok {
					return last
				}
				if !tp.Trusts(a) {
					return a
				}
				last = a
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return last
}

// maxForwardedHops is how many hops of X-Forwarded-For or Forwarded,
// counted from the right, ClientIP reads: a chain of proxies is a few hops
// long, and the header is the client's to lengthen (with the addresses of
// trusted proxies, every hop of it would be read). A hop further left reads
// as one that is not an IP address.
const maxForwardedHops = 64

// walkForwarded walks the "for" nodes of Forwarded values from the right,
// as walkXFF walks X-Forwarded-For. Their syntax is read from the left, so it
// keeps the last maxForwardedHops of them, no list of them all.
func (tp TrustedProxies) walkForwarded(last netip.Addr, vals []string) netip.Addr {
	var hops [maxForwardedHops]string // a ring: hop i at i % maxForwardedHops
	n := 0
	eachForwardedHop(vals, func(node string) {
		hops[n%maxForwardedHops] = node
		n++
	})
	for i := n - 1; i >= max(n-maxForwardedHops, 0); i-- {
		a, ok := parseHop(hops[i%maxForwardedHops])
		if !ok {
			return last
		}
		if !tp.Trusts(a) {
			return a
		}
		last = a
	}
	return last // every hop read is trusted: the leftmost, the nearest to a hop not read
}

// parseHop parses one hop: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1",
// "[2001:db8::1]", "[2001:db8::1]:8080", with optional surrounding whitespace.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.Trim(s, " \t")
	if a, err := netip.ParseAddr(s); err == nil {
		return normalize(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr()), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return normalize(a), true
		}
	}
	return netip.Addr{}, false
}

// normalize drops a's zone and gives the IPv4 address of an IPv4-mapped
// address or of one in the NAT64 well-known prefix: the client behind a
// stateless translator (RFC 6052, RFC 7915) is that IPv4 client, the
// same whether it reached us by IPv4 or through the translator, and the
// return path of a translated address goes to that IPv4 address.
func normalize(a netip.Addr) netip.Addr {
	a = a.WithZone("").Unmap()
	if nat64WellKnown.Contains(a) {
		return embeddedIPv4(a)
	}
	return a
}

// nat64WellKnown is RFC 6052's well-known prefix: its last 32 bits are the
// IPv4 address of a translated client.
var nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")

// embeddedIPv4 returns the IPv4 address held in the last 32 bits of a.
func embeddedIPv4(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte(b[12:]))
}

// PeerAddr parses a socket address such as http.Request.RemoteAddr
// ("192.0.2.1:1234", "[2001:db8::1]:1234") or a bare IP. It returns the zero
// Addr when s holds no IP (a Unix socket, "@", "pipe").
func PeerAddr(s string) netip.Addr {
	// A socket address first: parseHop tries a bare IP first, whose failure
	// on "ip:port" costs an error allocated on every request.
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return normalize(ap.Addr())
	}
	a, _ := parseHop(s)
	return a
}

// AddrFromNet returns the IP of a net.Addr (a gRPC peer.Addr, a net.Conn's
// RemoteAddr), or the zero Addr when it has none.
func AddrFromNet(a net.Addr) netip.Addr {
	switch x := a.(type) {
	case nil:
		return netip.Addr{}
	case interface{ AddrPort() netip.AddrPort }: // *net.TCPAddr, *net.UDPAddr (nil-safe)
		return normalize(x.AddrPort().Addr())
	}
	return PeerAddr(a.String())
}
