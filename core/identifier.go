package ratelimit

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
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
	if !ok || isNil(v) {
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
		if isNil(v) {
			break // a typed nil (nil *url.URL) would panic in String
		}
		return x.String()
	case encoding.TextMarshaler:
		if isNil(v) {
			break
		}
		b, err := x.MarshalText()
		if err == nil {
			return string(b)
		}
	case error:
		if isNil(v) {
			break
		}
		return x.Error()
	}
	return fmt.Sprint(v)
}

// isNil reports a nil value, including a typed nil (a nil pointer, map,
// slice, func or channel in an interface): it carries no value, so an
// identifier treats it as missing, and it never reaches a method that would
// dereference it.
func isNil(v any) bool {
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
