// Package keys encodes the counter keys, ban keys and set members that a
// Limiter hands its Store, and the canonical strings of identifier values they
// are built from. The limiter, the stores and the tools (ratekit explain,
// ratelimittest) share it, so that they always agree on a key.
package keys

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxValueLen is the longest encoded characteristic value kept verbatim in a
// key; longer values are replaced by their SHA-256.
const MaxValueLen = 200

// Counter keys look like
//
//	<prefix>{<limiter>:<rule>:<prop>=<value>:<prop>=<value>}       volume counter
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:ban                  its ban
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:set                  distinct-value set
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:sw                   sliding window
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:tb                   token bucket
//
// The counting kind and the algorithm are part of a counter's identity: a rule that overrides
// another of the same name (a higher tier replacing a default) inherits its
// counter when both count the same way, and starts a fresh one when one counts
// volume and the other distinct values, instead of meeting a value of the
// wrong type (a crash in memory, WRONGTYPE in Redis).
//
// The braces are a Redis Cluster hash tag, so a counter and its ban share a
// slot. Property names and values are escaped so that the key is injective:
// ':' '=' '{' '}' '%' '!' '#' and bytes outside printable ASCII become %XX, so
// no two different identifiers can produce the same key. Two markers that
// escaping never produces stand for the special cases: "!" for a property the
// identifier lacks, and "#<sha256 hex>" for a value whose escaped form is longer
// than MaxValueLen.

// Suffixes of a ban key and of a distinct-value set key.
const (
	BanSuffix = ":ban"
	SetSuffix = ":set"
	// The suffixes of the keys of the sliding window and token bucket
	// algorithms; a fixed window's key has none.
	SlidingSuffix = ":sw"
	BucketSuffix  = ":tb"
)

// Suffix returns the suffix of a rule's counter key: by its counting kind
// (distinct) and algorithm ("", "fixed_window", "sliding_window",
// "token_bucket").
func Suffix(distinct bool, algorithm string) string {
	switch {
	case distinct:
		return SetSuffix
	case algorithm == "sliding_window":
		return SlidingSuffix
	case algorithm == "token_bucket":
		return BucketSuffix
	}
	return ""
}

// escape marks the bytes that a key part escapes as %XX.
var escape = func() (t [256]bool) {
	for c := range t {
		t[c] = c <= ' ' || c >= 0x7f
	}
	for _, c := range []byte(":={}%!#") {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// AppendEscaped appends s with the bytes that keys escape as %XX, copying the
// runs in between whole.
func AppendEscaped(b []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; escape[c] {
			b = append(b, s[last:i]...)
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			last = i + 1
		}
	}
	return append(b, s[last:]...)
}

// AppendValue appends the encoded form of one present characteristic value:
// escaped, or "#" and its SHA-256 when the escaped form is longer than
// MaxValueLen.
func AppendValue(b []byte, v string) []byte {
	if len(v) <= MaxValueLen { // else its escaped form is longer still
		start := len(b)
		b = AppendEscaped(b, v)
		if len(b)-start <= MaxValueLen {
			return b
		}
		b = b[:start]
	}
	sum := sha256.Sum256([]byte(v))
	b = append(b, '#')
	return hex.AppendEncode(b, sum[:])
}

// Missing is the encoded value of a characteristic the identifier lacks:
// escaping never produces it.
const Missing = '!'

// Plan holds the parts of a rule's counter keys that do not depend on the
// identifier, escaped once (when a limiter compiles the rule), so that a check
// only appends them and the identifier's values.
type Plan struct {
	name  string   // ":<rule>", after "<prefix>{<limiter>"
	chars []string // the characteristics, to read from the identifier
	props []string // ":<escaped characteristic>=" for each characteristic
	tail  string   // "}" and the rule's Suffix
	// head is the head of the limiter the plan was compiled for (see
	// WithHead), "" if none; start is head, name and the first of props
	// joined: under head a key starts with one append instead of three.
	head, start string
}

// NewPlan returns the key plan of a rule: its name, its characteristics and
// the suffix of its kind and algorithm (see Suffix).
func NewPlan(rule string, characteristics []string, suffix string) Plan {
	p := Plan{name: ":" + rule, chars: characteristics, tail: "}"}
	p.props = make([]string, len(characteristics))
	for i, c := range characteristics {
		p.props[i] = string(append(AppendEscaped([]byte{':'}, c), '='))
	}
	p.tail += suffix
	return p
}

// WithHead returns p with the start of its keys under head (see Head)
// joined once: a limiter compiles its own rules for its own head. Append
// under any other head still builds the key from the parts.
func (p Plan) WithHead(head string) Plan {
	p.head, p.start = head, head+p.name
	if len(p.props) > 0 {
		p.start += p.props[0]
	}
	return p
}

// Head is the start of every counter key of a limiter: the prefix and the
// opening of the hash tag with the limiter's name.
func Head(prefix, limiter string) string { return prefix + "{" + limiter }

// Append appends the counter key of the plan for id after head (see Head)
// and returns the first characteristic the identifier lacks ("" when it has
// them all), reading each property once.
func (p *Plan) Append(b []byte, head string, id map[string]any) (_ []byte, missing string) {
	if p.head != "" && head == p.head {
		b = append(b, p.start...) // head, name and the first property's name
	} else {
		b = append(b, head...)
		b = append(b, p.name...)
		if len(p.props) > 0 {
			b = append(b, p.props[0]...)
		}
	}
	for i, c := range p.chars {
		if i > 0 {
			b = append(b, p.props[i]...)
		}
		v, ok := Value(id, c)
		if !ok {
			if missing == "" {
				missing = c
			}
			b = append(b, Missing)
			continue
		}
		b = AppendValue(b, v)
	}
	return append(b, p.tail...), missing
}

// Counter builds the key of one rule (its name, characteristics and the
// suffix of its kind and algorithm, see Suffix) of limiter for one identifier, and returns the first
// characteristic the identifier lacks ("" when it has them all). A limiter
// keeps the rule's Plan instead; tools (ratekit explain, ratelimittest) use
// this, so a key a tool shows is the key the limiter counts under.
func Counter(prefix, limiter, rule string, characteristics []string, suffix string, id map[string]any) (key, missing string) {
	p := NewPlan(rule, characteristics, suffix)
	b, missing := p.Append(nil, Head(prefix, limiter), id)
	return string(b), missing
}

// Shared says why the counter of a rule with these characteristics is not
// id's own but shared with other clients, or "" when it is id's own: a rule
// without characteristics counts every client in one counter, and one whose
// characteristic id lacks counts id, if at all (a rule that counts missing
// values), in the bucket of every client that lacks it. Clearing one client
// (Limiter.Clear) leaves shared counters alone.
func Shared(characteristics []string, id map[string]any) string {
	if len(characteristics) == 0 {
		return "it has no characteristics: one counter for every client"
	}
	for _, c := range characteristics {
		if _, ok := Value(id, c); !ok {
			return "the identifier has no " + strconv.Quote(c) + ": the counter of every client without it"
		}
	}
	return ""
}

// BanKey returns the ban key paired with a counter key.
func BanKey(counterKey string) string { return counterKey + BanSuffix }

// HashTag returns the part of key that Redis Cluster hashes: the content of the
// first {...} with at least one byte, or the whole key.
func HashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// MaxMemberLen bounds a distinct-count member: a longer value (a client can
// send a path of a megabyte) is stored as "#" and its SHA-256, as long key
// values are, so a member is at most MaxMemberLen + 1 bytes (a short value
// that starts with "#" gets one more; see Member).
const MaxMemberLen = MaxValueLen

// Member returns the member a distinct-count rule stores for value v. It
// is injective: a hashed member is "#" and 64 hex digits, and a short value
// that itself starts with "#" gets one more "#", so no value can pose as the
// hash of another.
func Member(v string) string {
	if len(v) > MaxMemberLen {
		sum := sha256.Sum256([]byte(v))
		return "#" + hex.EncodeToString(sum[:])
	}
	if len(v) > 0 && v[0] == '#' {
		return "#" + v
	}
	return v
}

// Value returns the canonical string of property k of id and whether it is
// present: a nil value (typed nil included) is absent.
func Value(id map[string]any, k string) (string, bool) {
	v, ok := id[k]
	if s, isString := v.(string); isString { // the common case, without the type switches below
		return s, true
	}
	if !ok || IsNil(v) {
		return "", false
	}
	return Canonical(v), true
}

// Canonical renders an identifier value as the string used for matching and for
// counter keys. Integers of any width render in decimal, so user_id 42 and
// "42" are the same caller; floats use the shortest representation that round-trips;
// booleans are "true"/"false"; times are RFC 3339 in UTC.
func Canonical(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case int:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint:
		return strconv.FormatUint(uint64(x), 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case float32:
		return formatFloat(float64(x), 32)
	case float64:
		return formatFloat(x, 64)
	case bool:
		return strconv.FormatBool(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case fmt.Stringer:
		if IsNil(v) {
			break // a typed nil (nil *url.URL) would panic in String
		}
		return x.String()
	case encoding.TextMarshaler:
		if IsNil(v) {
			break
		}
		b, err := x.MarshalText()
		if err == nil {
			return string(b)
		}
	case error:
		if IsNil(v) {
			break
		}
		return x.Error()
	}
	return fmt.Sprint(v)
}

// IsNil reports a nil value, including a typed nil (a nil pointer, map,
// slice, func or channel in an interface): it carries no value, so an
// identifier treats it as missing, and it never reaches a method that would
// dereference it. The engine asks it of a Store too (one whose constructor
// failed would panic on every check).
func IsNil(v any) bool {
	switch v.(type) {
	case nil:
		return true
	case string, int, int64, bool, float64:
		return false // the common cases, without reflection
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

func formatFloat(f float64, bits int) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// GlobEscape escapes the characters a Redis MATCH pattern (SCAN, KEYS) reads
// as glob, so that s matches only itself: with '[' escaped no character class
// opens, in which '^' and '-' would mean something too.
func GlobEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// The keys of what ratekit-envoy (module envoy) counts. It writes them and
// the tools (ratekit explain and clear, the admin page) find them through
// the functions below, so the two always agree.

// GatewayMaxValueLen is the longest descriptor value ratekit-envoy hands a
// limiter as it is (ratekitenvoy.DefaultMaxValueLen, which the binary
// uses): a longer one is counted as GatewayValue's stand-in for it, so the
// counter of a client that sent it is not the one its raw value names.
const GatewayMaxValueLen = 1024

// GatewayValue returns v when it is at most limit bytes, else limit bytes
// standing for it: its first bytes, a tilde and 32 hex digits of its
// SHA-256 (only the start of the digest when limit is under 33). A client
// controls such a value (a path, a header), and an error would let Envoy
// pass the whole request uncounted; so two long values stay apart however
// long their common start, and a rule matching how a value starts still
// matches it (one matching its end or its whole does not).
func GatewayValue(v string, limit int) string {
	if len(v) <= limit {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	var digest [33]byte
	digest[0] = '~'
	hex.Encode(digest[1:], sum[:16])
	keep := max(limit-len(digest), 0)
	return (v[:keep] + string(digest[:]))[:limit]
}

// GatewayIdentifier returns id as ratekit-envoy hands it to a limiter: each
// value over GatewayMaxValueLen replaced by its GatewayValue (the values a
// tool reads are canonical strings, as a descriptor's are), and whether one
// was. When none was, it returns id itself.
func GatewayIdentifier(id map[string]any) (map[string]any, bool) {
	var out map[string]any
	for k := range id {
		v, ok := Value(id, k)
		if !ok || len(v) <= GatewayMaxValueLen {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(id))
			for k2, v2 := range id {
				out[k2] = v2
			}
		}
		out[k] = GatewayValue(v, GatewayMaxValueLen)
	}
	if out == nil {
		return id, false
	}
	return out, true
}

// OverrideRulePrefix starts the name of the per-request rule ratekit-envoy
// makes of a descriptor's limit override (ratekitenvoy.OverrideRulePrefix);
// the window in whole seconds and "s" follow (OverrideRule). The rule
// counts by every key of the descriptor, in the descriptor's order, with a
// fixed window and no ban: its only key is the counter.
const OverrideRulePrefix = "envoy_override_"

// OverrideRule returns the name of the limit-override rule of a window.
func OverrideRule(period time.Duration) string {
	return OverrideRulePrefix + strconv.FormatInt(int64(period/time.Second), 10) + "s"
}

// Override reports whether key, under the head of a limiter (see Head), is
// the counter of a descriptor's limit override for id, an identifier as
// the gateway hands it to the limiter (see GatewayIdentifier), and returns
// its rule's name, window and characteristics (the descriptor's keys, in
// its order). The key is built again from those parts with the rule that
// writes it (Counter) and compared whole, so a key of another shape, or of
// another identifier, never passes.
func Override(key, prefix, limiter string, id map[string]any) (rule string, period time.Duration, characteristics []string, ok bool) {
	rest, ok := strings.CutPrefix(key, Head(prefix, limiter)+":"+OverrideRulePrefix)
	if !ok {
		return "", 0, nil, false
	}
	end := strings.IndexByte(rest, 's')
	secs, err := strconv.ParseInt(rest[:max(end, 0)], 10, 64)
	if end <= 0 || err != nil || secs <= 0 || secs > math.MaxInt64/int64(time.Second) {
		return "", 0, nil, false
	}
	rule = OverrideRulePrefix + rest[:end+1]
	// Escaping leaves no ':' or '=' in a property or value: the rest is
	// ":<prop>=<value>" once per characteristic, then "}".
	props, ok := strings.CutSuffix(rest[end+1:], "}")
	if !ok || !strings.HasPrefix(props, ":") || strings.Count(props, ":") != len(id) {
		return "", 0, nil, false
	}
	for _, part := range strings.Split(props[1:], ":") {
		name, _, _ := strings.Cut(part, "=")
		// Each of id's properties once: the descriptor's keys are the
		// identifier's, none missing (a missing one would be rebuilt as one).
		if _, present := Value(id, name); !present || slices.Contains(characteristics, name) {
			return "", 0, nil, false
		}
		characteristics = append(characteristics, name)
	}
	if k, _ := Counter(prefix, limiter, rule, characteristics, "", id); k != key {
		return "", 0, nil, false
	}
	return rule, time.Duration(secs) * time.Second, characteristics, true
}
