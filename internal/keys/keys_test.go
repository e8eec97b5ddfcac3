package keys

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
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

// GatewayValue keeps a value within the bound as it is, and stands for a
// longer one by exactly limit bytes that start as it does and differ from
// those of another long value with the same start.
func TestGatewayValue(t *testing.T) {
	long := strings.Repeat("v", 2000)
	for _, tt := range []struct {
		v     string
		limit int
		keeps int // bytes of v the result starts with; -1: v itself
	}{
		{"", 16, -1},
		{long[:1024], 1024, -1},
		{long[:1025], 1024, 1024 - 33},
		{long, 1024, 1024 - 33},
		{long, 33, 0},
		{long, 8, 0}, // the start of the digest alone
	} {
		got := GatewayValue(tt.v, tt.limit)
		if tt.keeps < 0 {
			if got != tt.v {
				t.Errorf("%d bytes, limit %d: changed to %q", len(tt.v), tt.limit, got)
			}
			continue
		}
		other := GatewayValue(tt.v+"x", tt.limit)
		if len(got) != tt.limit || !strings.HasPrefix(got, tt.v[:tt.keeps]) || got[tt.keeps] != '~' || other == got || len(other) != tt.limit {
			t.Errorf("%d bytes, limit %d: %q (and %q for one more byte), want %d bytes starting with %d of it and a digest",
				len(tt.v), tt.limit, got, other, tt.limit, tt.keeps)
		}
	}
}

// Override accepts the counter the gateway's override rule writes for an
// identifier, whatever the order of the descriptor's keys, and nothing
// else: another identifier's, a key of another shape, limiter or prefix.
func TestOverride(t *testing.T) {
	id := map[string]any{"user": "carol", "ip": "10.0.0.7"}
	key := func(rule string, chars []string, id map[string]any) string {
		k, _ := Counter(prefix, "edge", rule, chars, "", id)
		return k
	}
	for _, chars := range [][]string{{"user", "ip"}, {"ip", "user"}} {
		k := key(OverrideRule(90*time.Second), chars, id)
		rule, period, got, ok := Override(k, prefix, "edge", id)
		if !ok || rule != "envoy_override_90s" || period != 90*time.Second || !slices.Equal(got, chars) {
			t.Errorf("%s: %q %v %q %v", k, rule, period, got, ok)
		}
	}
	// A value over GatewayMaxValueLen: the key of its stand-in, hashed.
	long := map[string]any{"path": "/" + strings.Repeat("a", 2000)}
	gid, stood := GatewayIdentifier(long)
	if !stood || len(gid["path"].(string)) != GatewayMaxValueLen || len(long["path"].(string)) != 2001 {
		t.Fatalf("GatewayIdentifier: %v, %d bytes (the original %d)", stood, len(gid["path"].(string)), len(long["path"].(string)))
	}
	if _, _, _, ok := Override(key(OverrideRule(time.Minute), []string{"path"}, gid), prefix, "edge", gid); !ok {
		t.Error("the stand-in's override counter is not found")
	}
	if same, stood := GatewayIdentifier(id); stood || len(same) != 2 || same["user"] != "carol" {
		t.Errorf("GatewayIdentifier of short values: %v, %v", same, stood)
	}
	rule := OverrideRule(time.Minute)
	for name, k := range map[string]string{
		"fewer properties":   key(rule, []string{"user"}, id),
		"another value":      key(rule, []string{"user", "ip"}, map[string]any{"user": "carol", "ip": "10.0.0.8"}),
		"a property twice":   key(rule, []string{"user", "user"}, id),
		"a missing property": key(rule, []string{"user", "port"}, id),
		"a ban suffix":       key(rule, []string{"user", "ip"}, id) + BanSuffix,
		"a rule of the tier": key("per_user", []string{"user", "ip"}, id),
		"no window":          key(OverrideRulePrefix+"s", []string{"user", "ip"}, id),
		"a window of 0":      key(OverrideRulePrefix+"0s", []string{"user", "ip"}, id),
		"a window not whole": key(OverrideRulePrefix+"1.5s", []string{"user", "ip"}, id),
		"another limiter":    strings.Replace(key(rule, []string{"user", "ip"}, id), "{edge:", "{edgy:", 1),
		"another prefix":     "x" + key(rule, []string{"user", "ip"}, id),
	} {
		if _, _, _, ok := Override(k, prefix, "edge", id); ok {
			t.Errorf("%s: %s accepted", name, k)
		}
	}
}
