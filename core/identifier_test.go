package ratelimit_test

import (
	"errors"
	"net/url"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// The canonical strings Identifier's doc lists: a value of each kind keys
// the caller its documented string does.
func TestIdentifierCanonicalValues(t *testing.T) {
	type userID int64 // a named integer: no String, printed in decimal
	u, _ := url.Parse("https://example.com/a")
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"int", 42, "42"},
		{"int8", int8(-7), "-7"},
		{"uint64", uint64(1 << 63), "9223372036854775808"},
		{"named int", userID(42), "42"},
		{"float", 0.1, "0.1"},
		{"bool", true, "true"},
		{"time", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600)), "2026-01-02T02:04:05Z"},
		{"bytes", []byte("user:1"), "user:1"},
		{"Stringer", u, "https://example.com/a"},
		{"error", errors.New("boom"), "boom"},
		{"other", struct{ A int }{3}, "{3}"},
	} {
		if got, ok := (ratelimit.Identifier{"k": tc.v}).Get("k"); !ok || got != tc.want {
			t.Errorf("%s: Get = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := (ratelimit.Identifier{"k": (*url.URL)(nil)}).Get("k"); ok {
		t.Error("a typed nil is present; want it absent")
	}
}
