package ratelimit

import "github.com/ratekit/ratekit/internal/keys"

// Identifier is what the caller knows about a request: property name to value.
// Values are compared and keyed by their canonical string: integers of any
// width render in decimal, so user_id 42 and "42" are the same caller; floats
// use the shortest representation that round-trips; booleans are
// "true"/"false"; times are RFC 3339 in UTC; other values use String,
// MarshalText, Error or fmt.Sprint. A nil value (typed nil included) is the
// same as an absent property.
type Identifier map[string]any

// Get returns the canonical string of property k and whether it is present.
func (id Identifier) Get(k string) (string, bool) { return keys.Value(id, k) }
