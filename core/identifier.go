package ratelimit

import (
	"encoding"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Identifier is what the caller knows about a request: property name to value.
// Values are compared and keyed by their canonical string (see Canonical); a nil
// value is the same as an absent property.
type Identifier map[string]any

// Anonymous is the value of the "user" property for unauthenticated callers. The
// angle brackets keep it from colliding with any real user name.
const Anonymous = "<anonymous>"

// Get returns the canonical string of property k and whether it is present.
func (id Identifier) Get(k string) (string, bool) {
	v, ok := id[k]
	if !ok || v == nil {
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
		return x.String()
	case encoding.TextMarshaler:
		b, err := x.MarshalText()
		if err == nil {
			return string(b)
		}
	case error:
		return x.Error()
	}
	return fmt.Sprint(v)
}

func formatFloat(f float64, bits int) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}
