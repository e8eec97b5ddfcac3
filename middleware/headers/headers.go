package ratelimitheaders

import (
	"fmt"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// Profile selects which rate-limit headers a response carries. The profiles
// disagree on what RateLimit-Reset means (delta seconds for Legacy, epoch
// seconds for GitLab), so pick the one your clients read.
type Profile uint8

const (
	// IETF sends RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers -08+).
	IETF Profile = iota
	// Legacy sends RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (delta seconds).
	Legacy
	// GitLab sends GitLab's RateLimit-Name/-Limit/-Observed/-Remaining/-Reset (epoch) and, on 429, RateLimit-ResetTime.
	GitLab
	// None sends no rate-limit headers.
	None
)

var profileNames = [...]string{IETF: "ietf", Legacy: "legacy", GitLab: "gitlab", None: "none"}

func (p Profile) String() string {
	if int(p) < len(profileNames) {
		return profileNames[p]
	}
	return fmt.Sprintf("Profile(%d)", uint8(p))
}

// ParseProfile parses "ietf", "legacy", "gitlab" or "none" (case-insensitive),
// for services that take the profile from configuration.
func ParseProfile(s string) (Profile, error) {
	for p, name := range profileNames {
		if strings.EqualFold(s, name) {
			return Profile(p), nil
		}
	}
	return 0, fmt.Errorf("ratelimitheaders: unknown header profile %q (want ietf, legacy, gitlab or none)", s)
}

// Header names.
const (
	HeaderRateLimitPolicy    = "RateLimit-Policy"
	HeaderRateLimit          = "RateLimit"
	HeaderRateLimitLimit     = "RateLimit-Limit"
	HeaderRateLimitRemaining = "RateLimit-Remaining"
	HeaderRateLimitReset     = "RateLimit-Reset"
	HeaderRateLimitName      = "RateLimit-Name"
	HeaderRateLimitObserved  = "RateLimit-Observed"
	HeaderRateLimitResetTime = "RateLimit-ResetTime"
	HeaderRetryAfter         = "Retry-After"
)

// SetHeaders writes d's rate-limit headers in profile p into h. When d blocks
// it also sets Retry-After and Cache-Control: no-store, whatever the profile;
// Retry-After is left out when the request can never pass (Decision.Never),
// since no wait helps and a client obeying one would retry forever.
// extra, when at least a second, is added to Retry-After only (a random
// jitter, so that clients blocked in one window do not all come back at its
// reset: draft-ietf-httpapi-ratelimit-headers, section 8.5); the RateLimit
// fields keep stating the real reset, and so does NewProblem. Call it before
// the response is written, on allowed and blocked requests alike.
func (p Profile) SetHeaders(h http.Header, d *Decision, now time.Time, extra time.Duration) {
	blocked := d.Blocked()
	n := p.rateLimitFields(blocked)
	if blocked {
		n += 2 // Retry-After, Cache-Control
	}
	var values valueBlock
	p.each(d, blocked, now, extra, func(name, value string) {
		if k, ok := canonicalNames[name]; ok {
			h[k] = values.one(n, value)
			return
		}
		h.Set(name, value)
	})
}

// rateLimitFields returns the most fields setRateLimit sets in profile p for
// a decision that blocks or not.
func (p Profile) rateLimitFields(blocked bool) int {
	switch p {
	case IETF:
		return 2
	case Legacy:
		return 3
	case GitLab:
		if blocked {
			return 6 // RateLimit-ResetTime too
		}
		return 5
	}
	return 0
}

// valueBlock hands out the one-element value slices of a header's fields
// from one block that holds them all, each slice's capacity capped so that
// an append to one field never writes into the next: one allocation per
// answer, not one per field.
type valueBlock []string

// one returns value as a one-element slice of b, which it makes with room
// for n values on its first call.
func (b *valueBlock) one(n int, value string) []string {
	if *b == nil {
		*b = make([]string, 0, n)
	}
	*b = append(*b, value)
	i := len(*b)
	return (*b)[i-1 : i : i]
}

// canonicalNames and lowerNames map each field name that Each writes to its
// canonical form (textproto.CanonicalMIMEHeaderKey), which http.Header.Set
// would compute on every call, and to its lower-case form for Fields: an
// allocation per field saved for the mixed-case RateLimit names
// (BenchmarkSetHeaders/ietf: 6 allocations before this table, 4 with it,
// when each value still had a slice of its own).
var canonicalNames, lowerNames = func() (canonical, lower map[string]string) {
	canonical, lower = map[string]string{}, map[string]string{}
	for _, n := range []string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderRateLimitLimit, HeaderRateLimitRemaining,
		HeaderRateLimitReset, HeaderRateLimitName, HeaderRateLimitObserved, HeaderRateLimitResetTime,
		HeaderRetryAfter, "Cache-Control"} {
		canonical[n], lower[n] = textproto.CanonicalMIMEHeaderKey(n), strings.ToLower(n)
	}
	return canonical, lower
}()

// Each calls set with each field that SetHeaders writes for d, in the order
// it writes them, each name spelled as its header defines it
// ("RateLimit-Policy"): for a transport that carries headers as a list, such
// as Envoy's RateLimitService, with no http.Header between (whose Set
// allocates twice per field).
func (p Profile) Each(d *Decision, now time.Time, extra time.Duration, set func(name, value string)) {
	p.each(d, d.Blocked(), now, extra, set)
}

// each is Each, given blocked: d.Blocked(), which the caller has already
// computed.
func (p Profile) each(d *Decision, blocked bool, now time.Time, extra time.Duration, set func(name, value string)) {
	p.setRateLimit(set, d, blocked, now)
	if blocked {
		if !d.Never() {
			retry := seconds(d.RetryAfter(now))
			if extra >= time.Second { // less, a negative extra too, adds nothing
				retry += int64(extra / time.Second)
			}
			set(HeaderRetryAfter, strconv.FormatInt(retry, 10))
		}
		set("Cache-Control", "no-store")
	}
}

// Fields returns d's rate-limit fields in profile p with lower-case names,
// for transports whose header names are lower case (gRPC metadata, HTTP/2):
// what SetHeaders writes, less Retry-After and Cache-Control, which such a
// transport states its own way. It is nil when there are none.
func (p Profile) Fields(d *Decision, now time.Time) map[string][]string {
	blocked := d.Blocked()
	n := p.rateLimitFields(blocked)
	var out map[string][]string
	var values valueBlock
	p.setRateLimit(func(name, value string) {
		if out == nil {
			out = make(map[string][]string, n)
		}
		k, ok := lowerNames[name]
		if !ok {
			k = strings.ToLower(name)
		}
		out[k] = values.one(n, value)
	}, d, blocked, now)
	return out
}

// setRateLimit calls set with the rate-limit fields of d's enforcing
// evaluation, if any; blocked is d.Blocked(), which the caller has already
// computed.
func (p Profile) setRateLimit(set func(name, value string), d *Decision, blocked bool, now time.Time) {
	e := d.Enforcing()
	if e == nil {
		return
	}
	info := &e.Info
	remaining := toInt64(math.Floor(info.Remaining)) // never promise more than is left
	reset := seconds(info.RetryAfter(now))
	switch p {
	case IETF:
		// Both values are built in one stack buffer, one after the other, and
		// become one string: with Sprintf an answer cost 11 allocations where
		// this costs one (BenchmarkEach/ietf), in every adapter and the Envoy
		// service.
		var buf [256]byte
		b := appendSFString(buf[:0], e.Rule.Name)
		name := len(b)
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, min(info.Limit, maxSFInteger), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, min(max(seconds(info.Period), 1), maxSFInteger), 10)
		policy := len(b)
		b = append(b, b[:name]...)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, min(remaining, maxSFInteger), 10)
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(reset, maxSFInteger), 10)
		both := string(b)
		set(HeaderRateLimitPolicy, both[:policy])
		set(HeaderRateLimit, both[policy:])
	case Legacy:
		set(HeaderRateLimitLimit, strconv.FormatInt(info.Limit, 10))
		set(HeaderRateLimitRemaining, strconv.FormatInt(remaining, 10))
		set(HeaderRateLimitReset, strconv.FormatInt(reset, 10))
	case GitLab:
		resetAt := now.Add(time.Duration(reset) * time.Second)
		perMinute := toInt64(math.Ceil(float64(info.Limit) * float64(time.Minute) / float64(info.Period)))
		// The values are built in one stack buffer and become one string, as
		// IETF's: the reset's epoch alone allocated on every answer.
		var buf [128]byte
		b := strconv.AppendInt(buf[:0], perMinute, 10)
		limit := len(b)
		b = strconv.AppendInt(b, toInt64(math.Ceil(info.Count)), 10)
		observed := len(b)
		b = strconv.AppendInt(b, remaining, 10)
		left := len(b)
		b = strconv.AppendInt(b, resetAt.Unix(), 10)
		epoch := len(b)
		if blocked {
			b = resetAt.UTC().AppendFormat(b, http.TimeFormat)
		}
		all := string(b)
		set(HeaderRateLimitName, e.Rule.Name)
		set(HeaderRateLimitLimit, all[:limit])
		set(HeaderRateLimitObserved, all[limit:observed])
		set(HeaderRateLimitRemaining, all[observed:left])
		set(HeaderRateLimitReset, all[left:epoch])
		if blocked {
			set(HeaderRateLimitResetTime, all[epoch:])
		}
	}
}

// maxSFInteger is the largest Integer a Structured Field holds, 15 digits
// (RFC 9651 §3.3.1): a strict parser refuses a field with a longer one, so
// the IETF fields state a larger value as this one.
const maxSFInteger = 999_999_999_999_999

// toInt64 converts f, a whole number, to an int64, saturating at 0 and at
// math.MaxInt64 (NaN gives 0): Go converts a float64 beyond int64's range to
// a negative number, which a client would read as nothing left.
func toInt64(f float64) int64 {
	switch {
	case !(f > 0): // negative, zero or NaN
		return 0
	case f >= math.MaxInt64: // 2^63, as a float64
		return math.MaxInt64
	}
	return int64(f)
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// appendSFString appends s to b as an RFC 9651 sf-string. Rule names are
// [a-z0-9_], so escaping never happens in practice; characters outside
// printable ASCII, which an sf-string cannot hold, are replaced by '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
