package identifiers

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func hdr(kv ...string) func(string) []string {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h.Values
}

func TestClientIP(t *testing.T) {
	lb := MustParseTrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.254")
	tests := []struct {
		name   string
		tp     TrustedProxies
		peer   string
		header func(string) []string
		want   string
	}{
		{"no proxies, no headers", TrustedProxies{}, "203.0.113.7", hdr(), "203.0.113.7"},
		{"zero value ignores spoofed XFF", TrustedProxies{}, "203.0.113.7", hdr("X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"untrusted peer: spoofed XFF ignored", lb, "203.0.113.7", hdr("X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"untrusted peer: spoofed Forwarded ignored", lb, "203.0.113.7", hdr("Forwarded", "for=1.1.1.1"), "203.0.113.7"},
		{"untrusted peer: spoofed X-Real-IP ignored", lb, "203.0.113.7", hdr("X-Real-IP", "1.1.1.1"), "203.0.113.7"},
		{"trusted peer without headers", lb, "10.1.2.3", hdr(), "10.1.2.3"},
		{"trusted peer, one hop", lb, "10.1.2.3", hdr("X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"client-supplied left part is skipped", lb, "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1, 198.51.100.9"), "198.51.100.9"},
		{"trusted hops skipped from the right", lb, "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1, 198.51.100.9, 10.9.9.9, 192.0.2.254"), "198.51.100.9"},
		{"several XFF lines are one list", lb, "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "198.51.100.9, 10.0.0.5"), "198.51.100.9"},
		{"all hops trusted: leftmost", lb, "10.1.2.3", hdr("X-Forwarded-For", "10.0.0.7, 10.0.0.8"), "10.0.0.7"},
		{"empty list elements skipped", lb, "10.1.2.3", hdr("X-Forwarded-For", "198.51.100.9, , "), "198.51.100.9"},
		{"hop with port", lb, "10.1.2.3", hdr("X-Forwarded-For", "198.51.100.9:4711"), "198.51.100.9"},
		{"garbage hop stops the walk at the nearest trusted hop", lb, "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1, garbage, 10.0.0.8"), "10.0.0.8"},
		{"garbage right after the peer gives the peer", lb, "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1, unknown"), "10.1.2.3"},
		{"IPv6 hop", lb, "10.1.2.3", hdr("X-Forwarded-For", "2001:db8:1::5"), "2001:db8:1::5"},
		{"bracketed IPv6 hop with port", lb, "10.1.2.3", hdr("X-Forwarded-For", "[2001:db8:1::5]:443"), "2001:db8:1::5"},
		{"bracketed IPv6 hop", lb, "10.1.2.3", hdr("X-Forwarded-For", "[2001:db8:1::5]"), "2001:db8:1::5"},
		{"IPv4-mapped hop unmapped", lb, "10.1.2.3", hdr("X-Forwarded-For", "::ffff:198.51.100.9"), "198.51.100.9"},
		{"zone stripped", lb, "10.1.2.3", hdr("X-Forwarded-For", "fe80::1%eth0"), "fe80::1"},
		{"IPv6 trusted peer", lb, "2001:db8:ffff::1", hdr("X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"IPv4-mapped peer is trusted as IPv4", lb, "::ffff:10.1.2.3", hdr("X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"IPv4-mapped untrusted peer unmapped", lb, "::ffff:203.0.113.7", hdr(), "203.0.113.7"},
		{"NAT64 peer is trusted as IPv4", lb, "64:ff9b::192.0.2.254", hdr("X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"NAT64 untrusted peer is its IPv4 client", lb, "64:ff9b::203.0.113.7", hdr("X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"NAT64 hop is IPv4", lb, "10.1.2.3", hdr("X-Forwarded-For", "64:ff9b::c633:6409"), "198.51.100.9"},
		{"NAT64 trusted hop skipped", lb, "10.1.2.3", hdr("X-Forwarded-For", "198.51.100.9, 64:ff9b::192.0.2.254"), "198.51.100.9"},
		{"Forwarded NAT64 node is IPv4", lb, "10.1.2.3", hdr("Forwarded", `for="[64:ff9b::c633:6409]:4711"`), "198.51.100.9"},
		{"IPv6 peer with zone", TrustedProxies{}, "fe80::9%eth0", hdr(), "fe80::9"},
		{"Forwarded", lb, "10.1.2.3", hdr("Forwarded", "for=198.51.100.9;proto=https;by=10.1.2.3"), "198.51.100.9"},
		{"Forwarded list walked from the right", lb, "10.1.2.3", hdr("Forwarded", `for=1.1.1.1, for=198.51.100.9, for="10.0.0.4:80"`), "198.51.100.9"},
		{"Forwarded quoted IPv6 with port", lb, "10.1.2.3", hdr("Forwarded", `for="[2001:db8:1::5]:4711"`), "2001:db8:1::5"},
		{"Forwarded case-insensitive name", lb, "10.1.2.3", hdr("Forwarded", `For=198.51.100.9`), "198.51.100.9"},
		{"Forwarded quoted comma does not split", lb, "10.1.2.3", hdr("Forwarded", `for=198.51.100.9;ext="a,b"`), "198.51.100.9"},
		{"Forwarded unknown node stops the walk", lb, "10.1.2.3", hdr("Forwarded", `for=1.1.1.1, for=unknown`), "10.1.2.3"},
		{"Forwarded obfuscated node stops the walk", lb, "10.1.2.3", hdr("Forwarded", `for=1.1.1.1, for=_hidden, for=10.0.0.4`), "10.0.0.4"},
		{"Forwarded element without for stops the walk", lb, "10.1.2.3", hdr("Forwarded", `for=1.1.1.1, proto=https`), "10.1.2.3"},
		{"Forwarded unterminated quote", lb, "10.1.2.3", hdr("Forwarded", `for="1.1.1.1, for=198.51.100.9`), "10.1.2.3"},
		{"Forwarded syntax error in a later line", lb, "10.1.2.3", hdr("Forwarded", "for=1.1.1.1", "Forwarded", "for"), "10.1.2.3"},
		{"XFF preferred over Forwarded by default", lb, "10.1.2.3", hdr("Forwarded", "for=1.1.1.1", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"X-Real-IP when nothing else", lb, "10.1.2.3", hdr("X-Real-IP", "198.51.100.9"), "198.51.100.9"},
		{"X-Real-IP garbage gives the peer", lb, "10.1.2.3", hdr("X-Real-IP", "nope"), "10.1.2.3"},
		{"WithHeaders: only the named header", lb.WithHeaders(HeaderForwarded), "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1", "Forwarded", "for=198.51.100.9"), "198.51.100.9"},
		{"WithHeaders: absent header gives the peer", lb.WithHeaders(HeaderXRealIP), "10.1.2.3", hdr("X-Forwarded-For", "1.1.1.1"), "10.1.2.3"},
		{"WithHeaders: a CDN single-address header", lb.WithHeaders("True-Client-IP"), "10.1.2.3", hdr("True-Client-IP", "198.51.100.9"), "198.51.100.9"},
		{"invalid peer", lb, "", hdr("X-Forwarded-For", "198.51.100.9"), "invalid IP"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peer := netip.Addr{}
			if tc.peer != "" {
				peer = netip.MustParseAddr(tc.peer)
			}
			got := tc.tp.ClientIP(peer, tc.header)
			if got.String() != tc.want {
				t.Errorf("ClientIP(%s) = %s, want %s", tc.peer, got, tc.want)
			}
		})
	}
}

func TestClientIPNilHeaderFunc(t *testing.T) {
	tp := MustParseTrustedProxies("10.0.0.0/8")
	if got := tp.ClientIP(netip.MustParseAddr("10.0.0.1"), nil); got.String() != "10.0.0.1" {
		t.Errorf("got %s", got)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	tp, err := ParseTrustedProxies("10.0.0.0/8", " 192.0.2.1 ", "::ffff:172.16.0.0/108", "fe80::1%eth0", "2001:db8::/32",
		"64:ff9b::203.0.113.0/120", "64:ff9b::198.51.100.1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "172.16.0.0/12", "fe80::1/128", "2001:db8::/32", "203.0.113.0/24", "198.51.100.1/32"}
	got := tp.Prefixes()
	if len(got) != len(want) {
		t.Fatalf("prefixes = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, got[i], want[i])
		}
	}
	for _, a := range []string{"10.255.0.1", "::ffff:10.0.0.1", "172.31.1.1", "192.0.2.1", "fe80::1%eth1",
		"64:ff9b::10.0.0.1", "203.0.113.9", "64:ff9b::203.0.113.9", "198.51.100.1"} {
		if !tp.Trusts(netip.MustParseAddr(a)) {
			t.Errorf("Trusts(%s) = false", a)
		}
	}
	for _, a := range []string{"11.0.0.1", "192.0.2.2", "fe80::2", "2001:db9::1"} {
		if tp.Trusts(netip.MustParseAddr(a)) {
			t.Errorf("Trusts(%s) = true", a)
		}
	}
	if (TrustedProxies{}).Trusts(netip.MustParseAddr("127.0.0.1")) {
		t.Error("the zero value trusts someone")
	}

	for _, bad := range []string{"", "10.0.0.0/33", "example.com", "10.0.0.1/8/8", "1.2.3"} {
		if _, err := ParseTrustedProxies("10.0.0.0/8", bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q) accepted", bad)
		} else if !strings.Contains(err.Error(), "trusted proxy") {
			t.Errorf("error %q does not say what was wrong", err)
		}
	}
}

func TestMustParseTrustedProxiesPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic on an invalid prefix")
		}
	}()
	MustParseTrustedProxies("nope")
}

func TestPeerAddrAndAddrFromNet(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1:1234":          "192.0.2.1",
		"[2001:db8::1]:443":       "2001:db8::1",
		"[::ffff:192.0.2.1]:1234": "192.0.2.1",
		"[fe80::1%eth0]:80":       "fe80::1",
		"[64:ff9b::c000:201]:80":  "192.0.2.1",
		"192.0.2.1":               "192.0.2.1",
		"@":                       "invalid IP",
		"":                        "invalid IP",
	} {
		if got := PeerAddr(in).String(); got != want {
			t.Errorf("PeerAddr(%q) = %s, want %s", in, got, want)
		}
	}
	var nilTCP *net.TCPAddr
	for _, tc := range []struct {
		a    net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 80}, "192.0.2.1"}, // net.ParseIP gives a 16-byte, mapped form
		{&net.UDPAddr{IP: net.ParseIP("2001:db8::1"), Port: 53}, "2001:db8::1"},
		{&net.IPAddr{IP: net.ParseIP("192.0.2.9")}, "192.0.2.9"},
		{&net.UnixAddr{Name: "/tmp/sock", Net: "unix"}, "invalid IP"},
		{nilTCP, "invalid IP"},
		{nil, "invalid IP"},
	} {
		if got := AddrFromNet(tc.a).String(); got != tc.want {
			t.Errorf("AddrFromNet(%#v) = %s, want %s", tc.a, got, tc.want)
		}
	}
}

// TestClientIPLongHeaders: a client behind a trusted proxy writes as much of
// X-Forwarded-For and Forwarded as the server's header limit lets it (1 MiB
// in net/http, 16 MiB of gRPC metadata by default); the walk over either
// keeps no list of its hops (a quoted node without escapes is read in place),
// so that a request costs as many allocations with 10,000 hops as with 10,
// and of either only the last 64 hops are read.
func TestClientIPLongHeaders(t *testing.T) {
	tp := MustParseTrustedProxies("10.0.0.0/8")
	peer := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name, header, hop string
		want              func(hops int) string
	}{
		{"X-Forwarded-For", HeaderXForwardedFor, "203.0.113.%d, ", func(int) string { return "203.0.113.9" }},
		{"Forwarded", HeaderForwarded, "for=203.0.113.%d, ", func(int) string { return "203.0.113.9" }},
		{"Forwarded, quoted nodes", HeaderForwarded, `for="203.0.113.%d:80";proto=https, `, func(int) string { return "203.0.113.9" }},
		// Every hop trusted: the leftmost one read, the 64th from the right.
		{"X-Forwarded-For, trusted hops", HeaderXForwardedFor, "10.0.0.%d, ", func(hops int) string {
			return fmt.Sprintf("10.0.0.%d", max(hops-64, 0)%10)
		}},
		{"Forwarded, trusted hops", HeaderForwarded, "for=10.0.0.%d, ", func(hops int) string {
			return fmt.Sprintf("10.0.0.%d", max(hops-64, 0)%10)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs := map[int]float64{}
			for _, hops := range []int{10, 10_000} {
				var b strings.Builder
				for i := range hops {
					fmt.Fprintf(&b, tc.hop, i%10)
				}
				h := hdr(tc.header, strings.TrimSuffix(b.String(), ", "))
				var got netip.Addr
				allocs[hops] = testing.AllocsPerRun(10, func() { got = tp.ClientIP(peer, h) })
				if want := tc.want(hops); got.String() != want {
					t.Errorf("%d hops: ClientIP = %s, want %s", hops, got, want)
				}
			}
			if allocs[10_000] != allocs[10] {
				t.Errorf("ClientIP allocates %v times on 10,000 hops, %v times on 10", allocs[10_000], allocs[10])
			}
		})
	}
}

// FuzzClientIP checks invariants of header parsing on arbitrary header values:
// no panic; an untrusted peer is always returned unchanged; the result is
// normalised (IPv4-mapped and NAT64 well-known-prefix addresses as IPv4);
// and it is either the peer or an address written in the header.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{
		"198.51.100.9", "1.1.1.1, 198.51.100.9, 10.0.0.1", "[2001:db8::1]:80, ::ffff:1.2.3.4",
		`for=198.51.100.9;proto=https`, `for="[2001:db8::1]:4711", for=unknown`, `for="\"`, `for=1.1.1.1;;for=2`,
		"fe80::1%eth0", ",,,", "", `for="1.1.1.1`, "for=_x, for=10.0.0.3", "64:ff9b::c633:6409, 64:ff9b::10.0.0.3",
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	tp := MustParseTrustedProxies("10.0.0.0/8", "2001:db8::/32")
	trusted := netip.MustParseAddr("10.0.0.1")
	untrusted := netip.MustParseAddr("203.0.113.7")
	names := []string{HeaderXForwardedFor, HeaderForwarded, HeaderXRealIP}
	f.Fuzz(func(t *testing.T, value string, which uint8) {
		name := names[int(which)%len(names)]
		h := hdr(name, value)
		if got := tp.ClientIP(untrusted, h); got != untrusted {
			t.Fatalf("untrusted peer: got %s from header %s: %q", got, name, value)
		}
		got := tp.ClientIP(trusted, h)
		if !got.IsValid() || got.Zone() != "" || got.Is4In6() || netip.MustParsePrefix("64:ff9b::/96").Contains(got) {
			t.Fatalf("result %s is not a normalised address", got)
		}
		if got != trusted && !mentions(value, got) {
			t.Fatalf("result %s is neither the peer nor in header %s: %q", got, name, value)
		}
	})
}

// mentions reports whether any substring of s between delimiters parses to a
// (quoted-string escapes removed).
func mentions(s string, a netip.Addr) bool {
	for _, delims := range []string{"\x00", ",", ",;", ` ,;="\` + "\t"} {
		fields := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(delims, r) })
		for _, f := range fields {
			for _, g := range []string{f, strings.ReplaceAll(f, `\`, ""), strings.TrimPrefix(strings.ToLower(strings.TrimSpace(f)), "for=")} {
				for _, h := range []string{g, strings.Trim(g, `"`)} {
					if b, ok := parseHop(h); ok && b == a {
						return true
					}
				}
			}
		}
	}
	return false
}

func BenchmarkClientIP(b *testing.B) {
	tp := MustParseTrustedProxies("10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32")
	h := hdr("X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.3, 10.0.0.4")
	peer := netip.MustParseAddr("10.0.0.2")
	b.ReportAllocs()
	for b.Loop() {
		if tp.ClientIP(peer, h) != netip.MustParseAddr("198.51.100.9") {
			b.Fatal("wrong ip")
		}
	}
}
