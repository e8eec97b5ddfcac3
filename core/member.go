package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxMemberLen bounds a distinct-count member: a longer value (a client can
// send a path of a megabyte) is stored as "#" and its SHA-256, as long key
// values are, so one set can never hold more than about 65 bytes a member.
const MaxMemberLen = MaxKeyValueLen

// setMember returns the member a distinct-count rule stores for value v. It
// is injective: a hashed member is "#" and 64 hex digits, and a short value
// that itself starts with "#" gets one more "#", so no value can pose as the
// hash of another.
func setMember(v string) string {
	if len(v) > MaxMemberLen {
		sum := sha256.Sum256([]byte(v))
		return "#" + hex.EncodeToString(sum[:])
	}
	if len(v) > 0 && v[0] == '#' {
		return "#" + v
	}
	return v
}
