// Package remoteid trims an identifier to what the rules service protocol
// (proto/ratekit/rules/v1/rules.proto, GetRulesRequest.identifier) admits,
// as both its clients send it: the services' client (remoterules) and
// `ratekit explain --rules-service`, so that both get the same answer.
package remoteid

import (
	"sort"
	"unicode/utf8"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rulecheck"
)

// Bounds of GetRulesRequest.identifier: a client sends at most this much of
// an identifier (the rest is left out), so a large identifier never makes a
// call fail; the server refuses a request with more.
const (
	MaxProperties = 64
	MaxValueBytes = 4096
)

// Sendable is the identifier as the protocol carries it: canonical strings,
// at most MaxProperties properties with valid names and values of at most
// MaxValueBytes of valid UTF-8 (the others are left out). The properties of
// first (the vary list the limiter's answers use) go first, then the others
// in name order, so an identifier of many properties still sends those the
// answer depends on.
func Sendable(id ratelimit.Identifier, first []string) map[string]string {
	out := make(map[string]string, min(len(id), MaxProperties))
	add := func(k string) {
		if len(out) == MaxProperties || !rulecheck.ValidName(k) {
			return
		}
		if v, ok := id.Get(k); ok && sendable(v) {
			out[k] = v
		}
	}
	for _, k := range first {
		add(k)
	}
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, done := out[k]; !done {
			add(k)
		}
	}
	return out
}

// Unsent reports whether a property of vary that id can send was left out
// of sent: the answer was computed without it and must be asked for again
// with Sendable(id, vary).
func Unsent(vary []string, id ratelimit.Identifier, sent map[string]string) bool {
	for _, k := range vary {
		if _, ok := sent[k]; ok || !rulecheck.ValidName(k) {
			continue
		}
		if v, ok := id.Get(k); ok && sendable(v) {
			return true
		}
	}
	return false
}

// sendable reports whether the protocol can carry v: at most MaxValueBytes
// of valid UTF-8. A protobuf string holds nothing else (the request would
// fail to encode), and no selector can equal such a value, so leaving it
// out answers as sending it would.
func sendable(v string) bool { return len(v) <= MaxValueBytes && utf8.ValidString(v) }
