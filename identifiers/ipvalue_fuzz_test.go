package identifiers

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	ratelimit "github.com/ratekit/ratekit/core"
)

// FuzzParseTrustedProxies: an accepted entry is stored as a masked prefix
// (IPv4-mapped forms as IPv4) that trusts the address it was written with,
// and that parses back to itself; a refused list is refused whole.
func FuzzParseTrustedProxies(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "10.1.2.3/8", "2001:db8::/32", "::ffff:10.0.0.0/104", "::ffff:10.0.0.1", "192.0.2.1",
		" ::1 ", "fe80::1%eth0", "fe80::/10", "0.0.0.0/0", "::/0", "1.2.3.4/33", "10.0.0.0/-1", "", "x", "::ffff:0:0/95",
		"64:ff9b::10.0.0.0/104", "64:ff9b::10.0.0.1", "64:ff9b::/95"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tp, err := ParseTrustedProxies("192.0.2.0/24", s)
		if err != nil {
			if len(tp.Prefixes()) != 0 {
				t.Fatalf("ParseTrustedProxies(%q) refused, but kept %v", s, tp.Prefixes())
			}
			return
		}
		ps := tp.Prefixes()
		if len(ps) != 2 {
			t.Fatalf("ParseTrustedProxies(%q) = %v, want 2 prefixes", s, ps)
		}
		p := ps[1]
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() || p.Addr().Zone() != "" ||
			(p.Bits() >= 96 && netip.MustParsePrefix("64:ff9b::/96").Contains(p.Addr())) {
			t.Fatalf("ParseTrustedProxies(%q) stored %v: not a masked, normalised prefix", s, p)
		}
		if back, err := ParseTrustedProxies(p.String()); err != nil || back.Prefixes()[0] != p {
			t.Fatalf("ParseTrustedProxies(%q) stored %v, which parses back to %v (%v)", s, p, back.Prefixes(), err)
		}
		written := strings.TrimSpace(s)
		if i := strings.IndexByte(written, '/'); i >= 0 {
			written = written[:i]
		}
		// Addresses are compared normalised, IPv4 apart from IPv6: an IPv6
		// prefix shorter than /96 that spans the IPv4-mapped range ("::/0")
		// or the NAT64 one trusts no IPv4 peer.
		if a, err := netip.ParseAddr(written); err == nil && normalize(a).Is4() == p.Addr().Is4() && !tp.Trusts(a) {
			t.Fatalf("ParseTrustedProxies(%q) does not trust %v", s, a)
		}
	})
}

// FuzzIPValue: the ip property of any address holds it (its IPv6 prefix of
// the given length, an IPv4 address itself; a Teredo client's IPv4 address,
// an address of the NAT64 local-use prefix itself) and ip_full is the
// normalised address (a NAT64 well-known-prefix one its IPv4 address); the
// two never depend on the zone or the IPv4-mapped form.
func FuzzIPValue(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "2001:db8::1", "::ffff:192.0.2.1", "fe80::1%eth0", "::", "::1",
		"64:ff9b::192.0.2.1", "64:ff9b:1::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2"} {
		a := netip.MustParseAddr(s)
		for _, bits := range []int{0, 1, 48, 64, 127, 128, 129, -1} {
			f.Add(a.AsSlice(), a.Zone(), bits)
		}
	}
	f.Fuzz(func(t *testing.T, ip []byte, zone string, bits int) {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		if a.Is6() {
			a = a.WithZone(zone)
		}
		id := ratelimit.Identifier{}
		SetIP(id, a, bits)
		full, _ := id.Get(IPFull)
		v, _ := id.Get(IP)
		n := a.WithZone("").Unmap()
		b := n.As16()
		if netip.MustParsePrefix("64:ff9b::/96").Contains(n) {
			n = netip.AddrFrom4([4]byte(b[12:]))
		}
		if full != n.String() || v != IPValue(a, bits) {
			t.Fatalf("SetIP(%v, %d) = ip %q ip_full %q, want ip_full %v and ip IPValue's %q", a, bits, v, full, n, IPValue(a, bits))
		}
		switch {
		case n.Is4() || bits >= 128 || netip.MustParsePrefix("64:ff9b:1::/48").Contains(n):
			if v != n.String() {
				t.Fatalf("IPValue(%v, %d) = %q, want the address", a, bits, v)
			}
		case netip.MustParsePrefix("2001::/32").Contains(n):
			if want := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}); v != want.String() {
				t.Fatalf("IPValue(%v, %d) = %q, want the Teredo client's %v", a, bits, v, want)
			}
		default:
			want := bits
			if want <= 0 {
				want = DefaultIPv6Prefix
			}
			p, err := netip.ParsePrefix(v)
			if err != nil || p.Bits() != want || !p.Contains(n) || p != p.Masked() {
				t.Fatalf("IPValue(%v, %d) = %q, want the masked /%d holding the address", a, bits, v, want)
			}
		}
		if a.Is6() {
			other := ratelimit.Identifier{}
			SetIP(other, a.WithZone("other"), bits)
			if ov, _ := other.Get(IP); ov != v || fmt.Sprint(other[IPFull]) != full {
				t.Fatalf("the zone changes the properties of %v: %v, %v", a, id, other)
			}
		}
	})
}
