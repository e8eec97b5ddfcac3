package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// prefix is the limiter's default key prefix (ratelimit.DefaultKeyPrefix).
const prefix = "ratekit:rl:"

func FuzzCounterKeyInjective(f *testing.F) {
	f.Add("1:b=2", true, "3", true, "1", true, "2:b=3", true)
	f.Add("2001:db8::1", true, "{x}", true, "2001:db8:", true, ":1}", true)
	f.Add("!", true, "", true, "", false, "", true)
	f.Add("%21", true, "x", true, "!", true, "x", true)
	f.Add(strings.Repeat("a", 300), true, "", true, strings.Repeat("a", 301), true, "", true)
	f.Add("#abc", true, "x", true, "%23abc", true, "x", true)
	chars := []string{"a", "b"}
	id := func(a string, aok bool, b string, bok bool) map[string]any {
		m := map[string]any{}
		if aok {
			m["a"] = a
		}
		if bok {
			m["b"] = b
		}
		return m
	}
	f.Fuzz(func(t *testing.T, a1 string, a1ok bool, b1 string, b1ok bool, a2 string, a2ok bool, b2 string, b2ok bool) {
		id1, id2 := id(a1, a1ok, b1, b1ok), id(a2, a2ok, b2, b2ok)
		k1, _ := Counter(prefix, "lim", "pair", chars, "", id1)
		k2, _ := Counter(prefix, "lim", "pair", chars, "", id2)
		same := a1ok == a2ok && b1ok == b2ok && (!a1ok || a1 == a2) && (!b1ok || b1 == b2)
		if same != (k1 == k2) {
			t.Fatalf("identifiers %v and %v: keys %q and %q (same identifier: %v)", id1, id2, k1, k2, same)
		}
		for _, k := range []string{k1, k2} {
			tag := HashTag(k)
			if strings.ContainsAny(tag, "{}") || !strings.HasPrefix(k, prefix+"{"+tag+"}") {
				t.Fatalf("key %q: hash tag %q does not span the whole identity", k, tag)
			}
			if HashTag(BanKey(k)) != tag {
				t.Fatalf("ban key of %q is in another slot", k)
			}
			if len(k) > 600 {
				t.Fatalf("key of %d bytes: long values must be hashed", len(k))
			}
		}
	})
}

func TestCounterKeyShape(t *testing.T) {
	chars := []string{"ip", "user"}
	tests := []struct {
		id   map[string]any
		want string
	}{
		{map[string]any{"ip": "10.0.0.1", "user": "u"}, "ratekit:rl:{lim:by_ip:ip=10.0.0.1:user=u}"},
		{map[string]any{"ip": "2001:db8::1"}, "ratekit:rl:{lim:by_ip:ip=2001%3Adb8%3A%3A1:user=!}"},
		{map[string]any{"ip": "{a}", "user": 42}, "ratekit:rl:{lim:by_ip:ip=%7Ba%7D:user=42}"},
	}
	for _, tt := range tests {
		if got, _ := Counter(prefix, "lim", "by_ip", chars, "", tt.id); got != tt.want {
			t.Errorf("Counter(%v) = %q, want %q", tt.id, got, tt.want)
		}
	}
	long := strings.Repeat("x", 201)
	sum := sha256.Sum256([]byte(long))
	want := "ratekit:rl:{lim:by_ip:ip=#" + hex.EncodeToString(sum[:]) + ":user=!}"
	if got, _ := Counter(prefix, "lim", "by_ip", chars, "", map[string]any{"ip": long}); got != want {
		t.Errorf("long value key = %q, want %q", got, want)
	}
}

func TestSetMemberIsBoundedAndInjective(t *testing.T) {
	long1, long2 := strings.Repeat("a", 900<<10), strings.Repeat("a", 900<<10)+"b"
	values := []string{"", "x", "#", "##", "#x", long1, long2, Member(long1), strings.Repeat("z", MaxMemberLen)}
	seen := map[string]string{}
	for _, v := range values {
		m := Member(v)
		if len(m) > MaxMemberLen+1 {
			t.Fatalf("member of a %d-byte value is %d bytes", len(v), len(m))
		}
		if prev, dup := seen[m]; dup {
			t.Fatalf("values %.20q and %.20q share member %.20q", prev, v, m)
		}
		seen[m] = v
	}
}

func TestCanonicalTypedNil(t *testing.T) {
	var u *url.URL
	if got := Canonical(u); got == "" {
		t.Fatalf("Canonical(nil *url.URL) = %q", got)
	}
	if v, ok := Value(map[string]any{"path": u}, "path"); ok {
		t.Fatalf("typed nil is present as %q", v)
	}
}

// TestPlanWithHead proves that a plan with its head joined builds the keys the
// plain plan builds, under its own head and under any other.
func TestPlanWithHead(t *testing.T) {
	ids := []map[string]any{{}, {"a": "x:y", "b": 7}, {"b": nil}}
	for _, chars := range [][]string{nil, {"a"}, {"a", "b"}, {"b", "a", "c"}} {
		for _, suffix := range []string{"", SetSuffix, SlidingSuffix, BucketSuffix} {
			plain := NewPlan("rule", chars, suffix)
			joined := plain.WithHead(Head(prefix, "lim"))
			for _, head := range []string{Head(prefix, "lim"), Head(prefix, "other"), Head("x{", "lim")} {
				for _, id := range ids {
					want, wantMissing := plain.Append([]byte("junk"), head, id)
					got, gotMissing := joined.Append([]byte("junk"), head, id)
					if string(got) != string(want) || gotMissing != wantMissing {
						t.Errorf("chars %v, head %q, id %v: with head %q (missing %q), plain %q (missing %q)",
							chars, head, id, got, gotMissing, want, wantMissing)
					}
				}
			}
		}
	}
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"ratekit:rules:{rules}:": `ratekit:rules:{rules}:`,
		`a*b?[c]\d^-`:            `a\*b\?\[c\]\\d^-`,
		"":                       "",
	} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
