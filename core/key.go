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

func needsEscape(c byte) bool {
	switch c {
	case ':', '=', '{', '}', '%', '!', '#':
		return true
	}
	return c <= ' ' || c >= 0x7f
}

const hexDigits = "0123456789ABCDEF"

func escapeKeyPart(b *strings.Builder, s string) {
	if escapedLen(s) == len(s) { // the common case: nothing to escape
		b.WriteString(s)
		return
	}
	escapeBytes(b, s)
}

func escapeBytes(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

// writeKeyValue writes the encoded form of one characteristic value.
func writeKeyValue(b *strings.Builder, v string, present bool) {
	if !present {
		b.WriteByte('!')
		return
	}
	n := escapedLen(v)
	if n > MaxKeyValueLen {
		sum := sha256.Sum256([]byte(v))
		b.WriteByte('#')
		b.WriteString(hex.EncodeToString(sum[:]))
		return
	}
	if n == len(v) {
		b.WriteString(v)
		return
	}
	escapeBytes(b, v)
}

// counterKey builds the key of one rule for one identifier.
func counterKey(prefix, limiter string, r *Rule, id Identifier) string {
	k, _ := counterKeyOf(prefix, limiter, r, id)
	return k
}

// counterKeyOf builds the key of one rule for one identifier and returns the
// first characteristic the identifier lacks ("" when it has them all), reading
// each property once.
func counterKeyOf(prefix, limiter string, r *Rule, id Identifier) (key, missing string) {
	var b strings.Builder
	b.Grow(len(prefix) + len(limiter) + len(r.Name) + 8 + 24*len(r.Characteristics))
	b.WriteString(prefix)
	b.WriteByte('{')
	b.WriteString(limiter)
	b.WriteByte(':')
	b.WriteString(r.Name)
	for _, c := range r.Characteristics {
		b.WriteByte(':')
		escapeKeyPart(&b, c)
		b.WriteByte('=')
		v, ok := id.Get(c)
		if !ok && missing == "" {
			missing = c
		}
		writeKeyValue(&b, v, ok)
	}
	b.WriteByte('}')
	if r.CountDistinct != "" {
		b.WriteString(setSuffix)
	}
	return b.String(), missing
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
