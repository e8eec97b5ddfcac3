package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DefaultKeyPrefix starts every counter key unless Config.KeyPrefix is set.
const DefaultKeyPrefix = "ratekit:rl:"

// MaxKeyValueLen is the longest encoded characteristic value kept verbatim in a
// key; longer values are replaced by their SHA-256.
const MaxKeyValueLen = 200

// Counter keys look like
//
//	<prefix>{<limiter>:<rule>:<prop>=<value>:<prop>=<value>}       volume counter
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:ban                  its ban
//	<prefix>{<limiter>:<rule>:<prop>=<value>}:set                  distinct-value set
//
// The counting kind is part of a counter's identity: a rule that overrides
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
// than MaxKeyValueLen.

const (
	banSuffix = ":ban"
	setSuffix = ":set"
)

// keyEscape marks the bytes that a key part escapes as %XX.
var keyEscape = func() (t [256]bool) {
	for c := range t {
		t[c] = c <= ' ' || c >= 0x7f
	}
	for _, c := range []byte(":={}%!#") {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// appendEscaped appends s with the bytes of keyEscape as %XX, copying the
// runs in between whole.
func appendEscaped(b []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; keyEscape[c] {
			b = append(b, s[last:i]...)
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
			last = i + 1
		}
	}
	return append(b, s[last:]...)
}

// appendKeyValue appends the encoded form of one present characteristic
// value: escaped, or "#" and its SHA-256 when the escaped form is longer than
// MaxKeyValueLen.
func appendKeyValue(b []byte, v string) []byte {
	if len(v) <= MaxKeyValueLen { // else its escaped form is longer still
		start := len(b)
		b = appendEscaped(b, v)
		if len(b)-start <= MaxKeyValueLen {
			return b
		}
		b = b[:start]
	}
	sum := sha256.Sum256([]byte(v))
	b = append(b, '#')
	return hex.AppendEncode(b, sum[:])
}

// keyPlan holds the parts of a rule's counter keys that do not depend on the
// identifier, escaped once when the rule is compiled, so that a check only
// appends them and the identifier's values.
type keyPlan struct {
	name  string   // ":<rule>", after "<prefix>{<limiter>"
	chars []string // the characteristics, to read from the identifier
	props []string // ":<escaped characteristic>=" for each characteristic
	tail  string   // "}", or "}:set" for a count_distinct rule
}

func newKeyPlan(r *Rule) keyPlan {
	p := keyPlan{name: ":" + r.Name, chars: r.Characteristics, tail: "}"}
	p.props = make([]string, len(r.Characteristics))
	for i, c := range r.Characteristics {
		p.props[i] = string(append(appendEscaped([]byte{':'}, c), '='))
	}
	if r.CountDistinct != "" {
		p.tail += setSuffix
	}
	return p
}

// appendKey appends the counter key of the plan for id after head
// ("<prefix>{<limiter>") and returns the first characteristic the identifier
// lacks ("" when it has them all), reading each property once.
func (p *keyPlan) appendKey(b []byte, head string, id Identifier) (_ []byte, missing string) {
	b = append(b, head...)
	b = append(b, p.name...)
	for i, c := range p.chars {
		b = append(b, p.props[i]...)
		v, ok := id.Get(c)
		if !ok {
			if missing == "" {
				missing = c
			}
			b = append(b, '!')
			continue
		}
		b = appendKeyValue(b, v)
	}
	return append(b, p.tail...), missing
}

// keyHead is the start of every counter key of a limiter: the prefix and the
// opening of the hash tag with the limiter's name.
func keyHead(prefix, limiter string) string { return prefix + "{" + limiter }

// counterKey builds the key of one rule for one identifier.
func counterKey(prefix, limiter string, r *Rule, id Identifier) string {
	p := newKeyPlan(r)
	b, _ := p.appendKey(nil, keyHead(prefix, limiter), id)
	return string(b)
}

// CounterKey returns the counter key that rule r of limiter uses for id, with
// DefaultKeyPrefix unless prefix is non-empty. The ban key is CounterKey+":ban";
// a count_distinct rule's set key ends in ":set".
// It is exported for tools (ratekit explain) and tests; stores receive keys
// already built.
func CounterKey(prefix, limiter string, r *Rule, id Identifier) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return counterKey(prefix, limiter, r, id)
}

// BanKey returns the ban key paired with a counter key.
func BanKey(counterKey string) string { return counterKey + banSuffix }

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
