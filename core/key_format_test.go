package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/internal/keys"
)

// referenceKey is the counter key format written out plainly, byte by byte:
// the precomputed key plans must produce exactly these keys, or counters
// already in Redis would be orphaned.
func referenceKey(prefix, limiter string, r *Rule, id Identifier) string {
	esc := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			c := s[i]
			if strings.IndexByte(":={}%!#", c) >= 0 || c <= ' ' || c >= 0x7f {
				b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
				continue
			}
			b.WriteByte(c)
		}
		return b.String()
	}
	k := prefix + "{" + limiter + ":" + r.Name
	for _, c := range r.Characteristics {
		k += ":" + esc(c) + "="
		v, ok := id.Get(c)
		switch {
		case !ok:
			k += "!"
		case len(esc(v)) > keys.MaxValueLen:
			sum := sha256.Sum256([]byte(v))
			k += "#" + hex.EncodeToString(sum[:])
		default:
			k += esc(v)
		}
	}
	k += "}"
	if r.CountDistinct != "" {
		k += ":set"
	}
	return k
}

func FuzzCounterKeyFormat(f *testing.F) {
	f.Add("ip", "2001:db8::1", "user", "u", true, false)
	f.Add("a b", strings.Repeat("é", 100), "{x}", "#1", false, true)
	f.Add("ip", strings.Repeat(":", 67), "ip2", strings.Repeat("a", 200), true, true)
	f.Fuzz(func(t *testing.T, c1, v1, c2, v2 string, has2, distinct bool) {
		if c1 == "" || c2 == "" || c1 == c2 {
			return
		}
		r := &Rule{Name: "fmt", Characteristics: []string{c1, c2}}
		if distinct {
			r.CountDistinct = "member"
		}
		id := Identifier{c1: v1}
		if has2 {
			id[c2] = v2
		}
		want := referenceKey(DefaultKeyPrefix, "lim", r, id)
		if got := counterKey(DefaultKeyPrefix, "lim", r, id); got != want {
			t.Fatalf("counterKey = %q, want %q", got, want)
		}
		p := newKeyPlan(r) // what compileRule keeps
		b, _ := p.Append([]byte("junk before"), keys.Head(DefaultKeyPrefix, "lim"), id)
		if got := string(b); got != "junk before"+want {
			t.Fatalf("the plan appended %q, want %q", got, "junk before"+want)
		}
	})
}

func TestRemainingIsMathMax(t *testing.T) {
	for _, limit := range []int64{0, 1, 5, 1 << 53, math.MaxInt64} {
		for _, count := range []float64{0, math.Copysign(0, -1), 0.5, 1, 5, 6, 1e300, math.Inf(1), math.Inf(-1), math.NaN(), -3} {
			got, want := remaining(limit, count), math.Max(float64(limit)-count, 0)
			if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("remaining(%d, %v) = %v, want %v", limit, count, got, want)
			}
		}
	}
}

// counterKey builds the key of one rule for one identifier, as a check does.
func counterKey(prefix, limiter string, r *Rule, id Identifier) string {
	k, _ := keys.Counter(prefix, limiter, r.Name, r.Characteristics, keys.Suffix(r.CountDistinct != "", string(r.Algorithm)), id)
	return k
}
