package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func FuzzCounterKeyInjective(f *testing.F) {
	f.Add("1:b=2", true, "3", true, "1", true, "2:b=3", true)
	f.Add("2001:db8::1", true, "{x}", true, "2001:db8:", true, ":1}", true)
	f.Add("!", true, "", true, "", false, "", true)
	f.Add("%21", true, "x", true, "!", true, "x", true)
	f.Add(strings.Repeat("a", 300), true, "", true, strings.Repeat("a", 301), true, "", true)
	f.Add("#abc", true, "x", true, "%23abc", true, "x", true)
	r := &Rule{Name: "pair", Characteristics: []string{"a", "b"}}
	id := func(a string, aok bool, b string, bok bool) Identifier {
		m := Identifier{}
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
		k1 := counterKey(DefaultKeyPrefix, "lim", r, id1)
		k2 := counterKey(DefaultKeyPrefix, "lim", r, id2)
		same := a1ok == a2ok && b1ok == b2ok && (!a1ok || a1 == a2) && (!b1ok || b1 == b2)
		if same != (k1 == k2) {
			t.Fatalf("identifiers %v and %v: keys %q and %q (same identifier: %v)", id1, id2, k1, k2, same)
		}
		for _, k := range []string{k1, k2} {
			tag := HashTag(k)
			if strings.ContainsAny(tag, "{}") || !strings.HasPrefix(k, DefaultKeyPrefix+"{"+tag+"}") {
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
	r := &Rule{Name: "by_ip", Characteristics: []string{"ip", "user"}}
	tests := []struct {
		id   Identifier
		want string
	}{
		{Identifier{"ip": "10.0.0.1", "user": "u"}, "ratekit:rl:{lim:by_ip:ip=10.0.0.1:user=u}"},
		{Identifier{"ip": "2001:db8::1"}, "ratekit:rl:{lim:by_ip:ip=2001%3Adb8%3A%3A1:user=!}"},
		{Identifier{"ip": "{a}", "user": 42}, "ratekit:rl:{lim:by_ip:ip=%7Ba%7D:user=42}"},
	}
	for _, tt := range tests {
		if got := CounterKey("", "lim", r, tt.id); got != tt.want {
			t.Errorf("CounterKey(%v) = %q, want %q", tt.id, got, tt.want)
		}
	}
	long := strings.Repeat("x", 201)
	sum := sha256.Sum256([]byte(long))
	want := "ratekit:rl:{lim:by_ip:ip=#" + hex.EncodeToString(sum[:]) + ":user=!}"
	if got := CounterKey("", "lim", r, Identifier{"ip": long}); got != want {
		t.Errorf("long value key = %q, want %q", got, want)
	}
}
