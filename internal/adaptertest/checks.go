package adaptertest

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"time"

	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

var rateLimitHeaders = []string{
	ratelimitheaders.HeaderRateLimitPolicy, ratelimitheaders.HeaderRateLimit, ratelimitheaders.HeaderRateLimitLimit,
	ratelimitheaders.HeaderRateLimitRemaining, ratelimitheaders.HeaderRateLimitReset, ratelimitheaders.HeaderRateLimitName,
	ratelimitheaders.HeaderRateLimitObserved, ratelimitheaders.HeaderRateLimitResetTime,
}

// startupPanic checks r, what recover returned from building the adapter with
// a programming error (what): a panic, whose message begins with the
// adapter's package name when the adapter gives it.
func (s *suite) startupPanic(what string, r any) {
	s.t.Helper()
	if r == nil {
		s.t.Errorf("%s: the middleware was built; want a panic at start-up", what)
		return
	}
	msg, _ := r.(string)
	if prefix := s.a.Package + ": "; s.a.Package != "" && (len(msg) < len(prefix) || msg[:len(prefix)] != prefix) {
		s.t.Errorf("%s: panic %v; want a message beginning with %q", what, r, prefix)
	}
}

func (s *suite) status(r response, want int) {
	s.t.Helper()
	if r.status != want {
		s.t.Fatalf("status = %d, want %d (headers %v, body %q)", r.status, want, r.header, r.body)
	}
}

func (s *suite) header(r response, name, want string) {
	s.t.Helper()
	if got := r.header.Values(name); len(got) != 1 || got[0] != want {
		s.t.Errorf("%s = %q, want %q", name, got, want)
	}
}

func (s *suite) noHeader(r response, names ...string) {
	s.t.Helper()
	for _, n := range names {
		if v := r.header.Values(n); len(v) > 0 {
			s.t.Errorf("unexpected header %s: %q", n, v)
		}
	}
}

// intHeader returns a header's integer value, failing unless it is within [lo, hi].
func (s *suite) intHeader(r response, name string, lo, hi int64) int64 {
	s.t.Helper()
	v := r.header.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		s.t.Errorf("%s = %q, want an integer in [%d, %d]", name, v, lo, hi)
	}
	return n
}

var rateLimitRE = regexp.MustCompile(`^"([a-z0-9_]+)";r=(\d+);t=(\d+)$`)

// ietf checks the IETF profile's two fields and returns t.
func (s *suite) ietf(r response, policy string, limit, window, remaining int64) int64 {
	s.t.Helper()
	s.header(r, ratelimitheaders.HeaderRateLimitPolicy, `"`+policy+`";q=`+strconv.FormatInt(limit, 10)+`;w=`+strconv.FormatInt(window, 10))
	m := rateLimitRE.FindStringSubmatch(r.header.Get(ratelimitheaders.HeaderRateLimit))
	if m == nil {
		s.t.Fatalf("RateLimit = %q, want \"name\";r=N;t=N", r.header.Get(ratelimitheaders.HeaderRateLimit))
	}
	if m[1] != policy || m[2] != strconv.FormatInt(remaining, 10) {
		s.t.Errorf("RateLimit = %q, want policy %q with r=%d", m[0], policy, remaining)
	}
	tt, _ := strconv.ParseInt(m[3], 10, 64)
	if tt < 1 || tt > window {
		s.t.Errorf("RateLimit t=%d, want within (0, %d]", tt, window)
	}
	s.noHeader(r, ratelimitheaders.HeaderRateLimitLimit, ratelimitheaders.HeaderRateLimitRemaining, ratelimitheaders.HeaderRateLimitReset)
	return tt
}

// allowed checks what every allowed response has: no 429 extras.
func (s *suite) allowed(r response, body string) {
	s.t.Helper()
	s.status(r, http.StatusOK)
	if r.body != body {
		s.t.Errorf("body = %q, want %q", r.body, body)
	}
	s.noHeader(r, ratelimitheaders.HeaderRetryAfter, ratelimitheaders.HeaderRateLimitResetTime)
	if cc := r.header.Get("Cache-Control"); cc == "no-store" {
		s.t.Error("an allowed response carries Cache-Control: no-store")
	}
}

// blocked checks a default 429: Retry-After within (0, window], no-store, and
// the problem+json body naming the violated rules. It returns Retry-After.
func (s *suite) blocked(r response, window int64, violated ...string) int64 {
	s.t.Helper()
	s.status(r, http.StatusTooManyRequests)
	ra := s.intHeader(r, ratelimitheaders.HeaderRetryAfter, 1, window)
	s.header(r, "Cache-Control", "no-store")
	s.header(r, "Content-Type", ratelimitheaders.ContentTypeProblem)
	s.header(r, "X-Content-Type-Options", "nosniff")
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		s.t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	want := map[string]any{
		"type":              "https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":             "Request cannot be satisfied as assigned quota has been exceeded",
		"status":            float64(429),
		"detail":            "Rate limit exceeded; retry after " + strconv.FormatInt(ra, 10) + " seconds.",
		"violated-policies": toAny(violated),
	}
	if !reflect.DeepEqual(p, want) {
		s.t.Errorf("problem body = %v\nwant            %v", p, want)
	}
	return ra
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// epochNear checks an epoch-seconds header lies within [at+lo, at+hi] seconds.
func (s *suite) epochNear(r response, name string, lo, hi time.Duration) int64 {
	s.t.Helper()
	return s.intHeader(r, name, r.at.Add(lo).Unix()-1, r.at.Add(hi).Unix()+1)
}
