package ratelimitheaders

import (
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func rule(name string, a ratelimit.Action) *ratelimit.Rule {
	return &ratelimit.Rule{Name: name, Action: a}
}

// eval builds an evaluation of a rule with limit/period and count, resetting in reset.
func eval(r *ratelimit.Rule, limit int64, period time.Duration, count float64, reset time.Duration) ratelimit.Evaluation {
	ex := count > float64(limit)
	return ratelimit.Evaluation{
		Rule: r, Exceeded: ex, Blocked: ex && r.Action == ratelimit.ActionLimit,
		Info: ratelimit.Info{Limit: limit, Period: period, Count: count, Remaining: max(float64(limit)-count, 0), ResetAt: now.Add(reset)},
	}
}

func result(evs ...ratelimit.Evaluation) ratelimit.Result {
	res := ratelimit.Result{Action: ratelimit.ActionAllow, Evaluations: evs, Matched: len(evs) > 0}
	for _, e := range evs {
		if e.Blocked {
			res.Action = ratelimit.ActionBlock
		}
		res.Exceeded = res.Exceeded || e.Exceeded
	}
	return res
}

func headers(p Profile, d *Decision) http.Header {
	h := http.Header{}
	p.SetHeaders(h, d, now, 0)
	return h
}

func TestProfiles(t *testing.T) {
	limit := rule("per_ip", ratelimit.ActionLimit)
	allowed := &Decision{Results: []ratelimit.Result{result(eval(limit, 5, time.Minute, 2, 42500*time.Millisecond))}}
	blocked := &Decision{Results: []ratelimit.Result{result(eval(limit, 5, time.Minute, 6, 42500*time.Millisecond))}}
	tests := []struct {
		name string
		p    Profile
		d    *Decision
		want http.Header
	}{
		{"ietf allowed", IETF, allowed, http.Header{
			"Ratelimit-Policy": {`"per_ip";q=5;w=60`},
			"Ratelimit":        {`"per_ip";r=3;t=43`},
		}},
		{"ietf blocked", IETF, blocked, http.Header{
			"Ratelimit-Policy": {`"per_ip";q=5;w=60`},
			"Ratelimit":        {`"per_ip";r=0;t=43`},
			"Retry-After":      {"43"},
			"Cache-Control":    {"no-store"},
		}},
		{"legacy allowed", Legacy, allowed, http.Header{
			"Ratelimit-Limit": {"5"}, "Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"43"},
		}},
		{"gitlab allowed", GitLab, allowed, http.Header{
			"Ratelimit-Name": {"per_ip"}, "Ratelimit-Limit": {"5"}, "Ratelimit-Observed": {"2"},
			"Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"1777636843"},
		}},
		{"gitlab blocked", GitLab, blocked, http.Header{
			"Ratelimit-Name": {"per_ip"}, "Ratelimit-Limit": {"5"}, "Ratelimit-Observed": {"6"},
			"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"1777636843"},
			"Ratelimit-Resettime": {"Fri, 01 May 2026 12:00:43 GMT"},
			"Retry-After":         {"43"}, "Cache-Control": {"no-store"},
		}},
		{"none blocked", None, blocked, http.Header{"Retry-After": {"43"}, "Cache-Control": {"no-store"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := headers(tc.p, tc.d); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("headers\n got %v\nwant %v", got, tc.want)
			}
			// Each gives the same fields, named as the headers spell them.
			fromEach := http.Header{}
			tc.p.Each(tc.d, now, 0, func(name, value string) {
				if !slices.Contains(spelled, name) {
					t.Errorf("Each: field name %q is not one of %q", name, spelled)
				}
				fromEach.Add(name, value)
			})
			if !reflect.DeepEqual(fromEach, tc.want) {
				t.Errorf("Each\n got %v\nwant %v", fromEach, tc.want)
			}
		})
	}
}

// spelled are the field names as their headers define them.
var spelled = []string{HeaderRateLimitPolicy, HeaderRateLimit, HeaderRateLimitLimit, HeaderRateLimitRemaining,
	HeaderRateLimitReset, HeaderRateLimitName, HeaderRateLimitObserved, HeaderRateLimitResetTime, HeaderRetryAfter, "Cache-Control"}

func TestGitLabNormalisesToAMinute(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 1000, time.Hour, 10.5, time.Hour))}}
	h := headers(GitLab, d)
	if h.Get("RateLimit-Limit") != "17" || h.Get("RateLimit-Observed") != "11" || h.Get("RateLimit-Remaining") != "989" {
		t.Errorf("got %v; want limit ceil(1000*60/3600)=17, observed rounded up, remaining rounded down", h)
	}
}

func TestIETFSubSecondWindowAndFractionalRemaining(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 3, 200*time.Millisecond, 0.25, 150*time.Millisecond))}}
	h := headers(IETF, d)
	if h.Get("RateLimit-Policy") != `"r";q=3;w=1` || h.Get("RateLimit") != `"r";r=2;t=1` {
		t.Errorf("got %v; want w at least 1, remaining rounded down, t rounded up", h)
	}
}

func TestShadowAndFailOpenSendNoHeaders(t *testing.T) {
	shadow := rule("shadow", ratelimit.ActionLog)
	for name, d := range map[string]*Decision{
		"shadow only, exceeded": {Results: []ratelimit.Result{result(eval(shadow, 1, time.Minute, 9, time.Minute))}},
		"fail-open":             {Results: []ratelimit.Result{{Action: ratelimit.ActionAllow, Err: errors.New("redis down")}}},
		"no match":              {Results: []ratelimit.Result{{Action: ratelimit.ActionAllow}}},
		"no limiters":           {},
	} {
		for _, p := range []Profile{IETF, Legacy, GitLab, None} {
			if h := headers(p, d); len(h) != 0 {
				t.Errorf("%s, %s: headers %v, want none", name, p, h)
			}
		}
	}
}

func TestEnforcingAcrossLimiters(t *testing.T) {
	shadow := rule("shadow", ratelimit.ActionLog)
	a, b, c := rule("a", ratelimit.ActionLimit), rule("b", ratelimit.ActionLimit), rule("c", ratelimit.ActionLimit)
	d := &Decision{Results: []ratelimit.Result{
		result(eval(shadow, 1, time.Minute, 5, time.Minute), eval(a, 100, time.Minute, 10, time.Minute)),
		{Action: ratelimit.ActionAllow, Err: errors.New("down")},
		result(eval(b, 10, time.Minute, 5, time.Minute), eval(c, 10, time.Minute, 5, time.Minute)),
	}}
	if e := d.Enforcing(); e == nil || e.Rule != b {
		t.Fatalf("enforcing = %+v, want b (least remaining, earliest on ties; shadow ignored)", e)
	}
	if d.Blocked() || !d.Failed() {
		t.Errorf("Blocked=%v Failed=%v", d.Blocked(), d.Failed())
	}
	d.Results = append(d.Results, result(eval(c, 1, time.Minute, 2, 10*time.Second)))
	d.Results = append(d.Results, result(eval(a, 1, time.Minute, 2, 30500*time.Millisecond)))
	if e := d.Enforcing(); e == nil || e.Rule != c || !e.Blocked {
		t.Fatalf("enforcing = %+v, want the first blocking evaluation", e)
	}
	if got := d.ViolatedPolicies(); !reflect.DeepEqual(got, []string{"c", "a"}) {
		t.Errorf("violated = %v", got)
	}
	if got := d.RetryAfter(now); got != 31*time.Second {
		t.Errorf("RetryAfter = %v, want the latest reset rounded up (31s)", got)
	}
}

func TestWriteProblem(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 5, time.Minute, 6, 9*time.Second))}}
	w := httptest.NewRecorder()
	p := NewProblem(d, now)
	WriteProblem(w, &p)
	if w.Code != 429 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
	}
	want := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"Rate limit exceeded; retry after 9 seconds.","violated-policies":["per_ip"]}`
	if w.Body.String() != want {
		t.Errorf("body\n got %s\nwant %s", w.Body, want)
	}
}

// NewProblem is built on every blocked HTTP answer: it costs the names of
// the violated policies and the detail, nothing more (Blocking's slice and
// Sprintf's boxed number cost two more).
func TestNewProblemAllocations(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 5, time.Hour, 6, 300*time.Second))}}
	var p Problem
	if n := testing.AllocsPerRun(100, func() { p = NewProblem(d, now) }); n > 2 {
		t.Errorf("NewProblem: %v allocations, want at most 2", n)
	}
	if p.Detail != "Rate limit exceeded; retry after 300 seconds." || !slices.Equal(p.ViolatedPolicies, []string{"per_ip"}) {
		t.Errorf("problem %+v", p)
	}
}

// BenchmarkNewProblem builds the problem details of a blocked answer, as
// every HTTP adapter does on every 429.
func BenchmarkNewProblem(b *testing.B) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 5, time.Hour, 6, 300*time.Second))}}
	b.ReportAllocs()
	for b.Loop() {
		if p := NewProblem(d, now); len(p.ViolatedPolicies) != 1 {
			b.Fatalf("problem %+v", p)
		}
	}
}

func TestParseProfile(t *testing.T) {
	for _, p := range []Profile{IETF, Legacy, GitLab, None} {
		got, err := ParseProfile(p.String())
		if err != nil || got != p {
			t.Errorf("ParseProfile(%q) = %v, %v", p, got, err)
		}
	}
	if p, err := ParseProfile("GitLab"); err != nil || p != GitLab {
		t.Errorf("case-insensitive parse: %v %v", p, err)
	}
	if _, err := ParseProfile("x-ratelimit"); err == nil {
		t.Error("unknown profile accepted")
	}
	if Profile(9).String() != "Profile(9)" {
		t.Error(Profile(9).String())
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{"per_ip": `"per_ip"`, `a"b\c`: `"a\"b\\c"`, "é\n": `"???"`} {
		if got := string(appendSFString(nil, in)); got != want {
			t.Errorf("appendSFString(%q) = %s, want %s", in, got, want)
		}
	}
}

// extra lengthens Retry-After only, in whole seconds, and only on a block.
func TestSetHeadersExtra(t *testing.T) {
	blocked := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 5, time.Minute, 6, 9*time.Second))}}
	allowed := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 5, time.Minute, 2, 9*time.Second))}}
	for _, tt := range []struct {
		name  string
		extra time.Duration
		d     *Decision
		want  string // Retry-After; "" for none
	}{
		{"none", 0, blocked, "9"},
		{"under a second is none", 900 * time.Millisecond, blocked, "9"},
		{"ten seconds", 10 * time.Second, blocked, "19"},
		// Not at least a second: ignored, never a Retry-After before the
		// reset (it was subtracted, down to a negative one).
		{"negative is none", -5 * time.Second, blocked, "9"},
		{"far negative is none", -time.Minute, blocked, "9"},
		{"allowed: no Retry-After", 10 * time.Second, allowed, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			IETF.SetHeaders(h, tt.d, now, tt.extra)
			if got := h.Get(HeaderRetryAfter); got != tt.want {
				t.Fatalf("Retry-After %q, want %q", got, tt.want)
			}
			if got := h.Get(HeaderRateLimit); got != `"r";r=0;t=9` && got != `"r";r=3;t=9` {
				t.Fatalf("RateLimit %q states the jitter", got)
			}
		})
	}
}

// Fields are SetHeaders' rate-limit fields with lower-case names, without
// Retry-After and Cache-Control; nil when nothing enforcing was evaluated.
func TestFields(t *testing.T) {
	limit := rule("per_ip", ratelimit.ActionLimit)
	blocked := &Decision{Results: []ratelimit.Result{result(eval(limit, 5, time.Minute, 6, 9*time.Second))}}
	shadow := &Decision{Results: []ratelimit.Result{result(eval(rule("log", ratelimit.ActionLog), 5, time.Minute, 6, 9*time.Second))}}
	for _, tt := range []struct {
		name string
		p    Profile
		d    *Decision
		want map[string][]string
	}{
		{"ietf", IETF, blocked, map[string][]string{
			"ratelimit-policy": {`"per_ip";q=5;w=60`}, "ratelimit": {`"per_ip";r=0;t=9`}}},
		{"legacy", Legacy, blocked, map[string][]string{
			"ratelimit-limit": {"5"}, "ratelimit-remaining": {"0"}, "ratelimit-reset": {"9"}}},
		{"gitlab", GitLab, blocked, map[string][]string{
			"ratelimit-name": {"per_ip"}, "ratelimit-limit": {"5"}, "ratelimit-observed": {"6"},
			"ratelimit-remaining": {"0"}, "ratelimit-reset": {strconv.FormatInt(now.Add(9*time.Second).Unix(), 10)},
			"ratelimit-resettime": {now.Add(9 * time.Second).Format(http.TimeFormat)}}},
		{"none", None, blocked, nil},
		{"shadow only", IETF, shadow, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Fields(tt.d, now); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Fields = %v, want %v", got, tt.want)
			}
		})
	}
}

// The IETF fields are built without fmt: an allowed answer costs one string
// for both values and one block for their slices: 2, where Sprintf and the
// sf-string's builder made it 11, http.Header.Set's canonical form of each
// key 6, and a slice per value 3.
func TestIETFHeadersAllocations(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 1000, time.Minute, 2, 42*time.Second))}}
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() {
		IETF.SetHeaders(h, d, now, 0)
		clear(h)
	}); n > 2 {
		t.Errorf("IETF.SetHeaders: %.0f allocations per answer, want at most 2", n)
	}
	IETF.SetHeaders(h, d, now, 0)
	for _, name := range []string{HeaderRateLimitPolicy, HeaderRateLimit} {
		if got := h.Values(name); len(got) != 1 || got[0] == "" {
			t.Errorf("%s = %q after SetHeaders, want one value found under the canonical key", name, got)
		}
	}
}

// SetHeaders costs at most one allocation more than Each, whatever the
// profile and verdict: the fields' one-element value slices, which
// http.Header needs, come in one block (one allocation per field before).
func TestSetHeadersAllocatesOneBlockOfValues(t *testing.T) {
	for _, a := range answers(IETF, Legacy, GitLab, None) {
		t.Run(a.name, func(t *testing.T) {
			p, d := a.p, a.d
			each := testing.AllocsPerRun(100, func() { p.Each(d, now, 0, func(_, _ string) {}) })
			h := http.Header{}
			set := testing.AllocsPerRun(100, func() {
				p.SetHeaders(h, d, now, 0)
				clear(h)
			})
			if set > each+1 {
				t.Errorf("SetHeaders: %v allocations, Each %v: want at most one more", set, each)
			}
		})
	}
}

// The fields' values share one block: a value added to one field after
// SetHeaders must not overwrite the next field's.
func TestSetHeadersValuesDoNotOverlap(t *testing.T) {
	d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 5, time.Minute, 6, 9*time.Second))}}
	for _, p := range []Profile{IETF, Legacy, GitLab, None} {
		t.Run(p.String(), func(t *testing.T) {
			want := headers(p, d).Clone() // values of their own
			got := headers(p, d)
			for k := range got {
				got.Add(k, "added")
				want[k] = append(want[k], "added")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after adding to each field:\n got %v\nwant %v", got, want)
			}
			fields := p.Fields(d, now)
			wantFields := map[string][]string(http.Header(p.Fields(d, now)).Clone())
			for k := range fields {
				fields[k] = append(fields[k], "added")
				wantFields[k] = append(wantFields[k], "added")
			}
			if !reflect.DeepEqual(fields, wantFields) {
				t.Errorf("after adding to each of Fields:\n got %v\nwant %v", fields, wantFields)
			}
		})
	}
}

var fieldsSink map[string][]string

// Fields costs what Each does, the map and one block for the values' slices
// (one allocation per field before), whatever the profile and verdict: the
// gRPC interceptors ask it on every call.
func TestFieldsAllocatesOneBlockOfValues(t *testing.T) {
	for _, a := range answers(IETF, Legacy, GitLab) {
		t.Run(a.name, func(t *testing.T) {
			p, d := a.p, a.d
			n := len(p.Fields(d, now))
			each := testing.AllocsPerRun(100, func() { p.Each(d, now, 0, func(_, _ string) {}) })
			empty := testing.AllocsPerRun(100, func() {
				fieldsSink = make(map[string][]string, n)
				fieldsSink["k"] = nil
			})
			fields := testing.AllocsPerRun(100, func() { fieldsSink = p.Fields(d, now) })
			if fields > each+empty+1 {
				t.Errorf("Fields: %v allocations, Each %v and its map %v: want at most one more", fields, each, empty)
			}
		})
	}
}

// Each builds the values of the IETF and GitLab fields in one buffer that
// becomes one string: an answer costs one allocation, allowed or blocked (a
// GitLab answer cost one per number of three digits or more, the reset's
// epoch always, and one for RateLimit-ResetTime).
func TestEachAllocations(t *testing.T) {
	for _, a := range answers(IETF, GitLab) {
		t.Run(a.name, func(t *testing.T) {
			p, d := a.p, a.d
			if n := testing.AllocsPerRun(100, func() { p.Each(d, now, 0, func(_, _ string) {}) }); n > 1 {
				t.Errorf("Each: %v allocations, want at most 1", n)
			}
		})
	}
}

// BenchmarkSetHeaders renders an allowed and a blocked answer in each
// profile, as every HTTP adapter does on every request.
func BenchmarkSetHeaders(b *testing.B) {
	for _, a := range answers(IETF, Legacy, GitLab) {
		p, d := a.p, a.d
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			h := http.Header{}
			for b.Loop() {
				p.SetHeaders(h, d, now, 0)
				clear(h)
			}
		})
	}
}

// BenchmarkEach renders the same answers as BenchmarkSetHeaders through Each,
// as the Envoy service does, with no http.Header between.
func BenchmarkEach(b *testing.B) {
	for _, a := range answers(IETF, Legacy, GitLab) {
		p, d := a.p, a.d
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				p.Each(d, now, 0, func(_, value string) { n += len(value) })
			}
			if n == 0 {
				b.Fatal("Each set no field")
			}
		})
	}
}

// A block that resets now (a cost that never passes, on an empty window or
// a full bucket; or a reset passed since the check) still tells the caller to
// wait ratelimit.MinRetryAfter, in the header and the problem body: never to
// come back at once.
func TestBlockNeverSaysRetryAtOnce(t *testing.T) {
	for _, reset := range []time.Duration{0, -time.Second} {
		d := &Decision{Results: []ratelimit.Result{result(eval(rule("per_ip", ratelimit.ActionLimit), 5, time.Minute, 6, reset))}}
		if got := headers(IETF, d).Get(HeaderRetryAfter); got != "1" {
			t.Errorf("reset in %v: Retry-After %q, want 1", reset, got)
		}
		if p := NewProblem(d, now); p.Detail != "Rate limit exceeded; retry after 1 seconds." {
			t.Errorf("reset in %v: problem detail %q", reset, p.Detail)
		}
		if got := d.Results[0].RetryAfter(now); got != ratelimit.MinRetryAfter {
			t.Errorf("reset in %v: Result.RetryAfter %v, want %v", reset, got, ratelimit.MinRetryAfter)
		}
	}
}

// TestHugeValuesStayInRange: a limit, remaining or count beyond what an
// int64 holds renders as the largest value the field can hold, never as a
// negative number (a float64 past 2^63 converts to math.MinInt64), and the
// IETF fields stay Structured Field Integers, at most 15 digits (RFC 9651
// §3.3.1), which a strict parser requires.
func TestHugeValuesStayInRange(t *testing.T) {
	limit := rule("r", ratelimit.ActionLimit)
	tests := []struct {
		name string
		p    Profile
		ev   ratelimit.Evaluation
		want map[string]string
	}{
		{"ietf, limit MaxInt64", IETF, eval(limit, math.MaxInt64, time.Millisecond, 1, time.Millisecond), map[string]string{
			"RateLimit-Policy": `"r";q=999999999999999;w=1`,
			"RateLimit":        `"r";r=999999999999999;t=1`,
		}},
		{"legacy, limit MaxInt64", Legacy, eval(limit, math.MaxInt64, time.Millisecond, 1, time.Millisecond), map[string]string{
			"RateLimit-Limit": "9223372036854775807", "RateLimit-Remaining": "9223372036854775807",
		}},
		{"gitlab, limit 2^62 per ms", GitLab, eval(limit, 1<<62, time.Millisecond, 1, time.Millisecond), map[string]string{
			"RateLimit-Limit": "9223372036854775807", "RateLimit-Remaining": "4611686018427387904",
		}},
		{"gitlab, count 1e300", GitLab, eval(limit, 5, time.Minute, 1e300, time.Minute), map[string]string{
			"RateLimit-Limit": "5", "RateLimit-Observed": "9223372036854775807", "RateLimit-Remaining": "0",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := headers(tc.p, &Decision{Results: []ratelimit.Result{result(tc.ev)}})
			for k, want := range tc.want {
				if got := h.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// BenchmarkFields renders an allowed and a blocked answer's fields in each
// profile, as the gRPC interceptors do on every call.
func BenchmarkFields(b *testing.B) {
	for _, a := range answers(IETF, Legacy, GitLab) {
		p, d := a.p, a.d
		b.Run(a.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if p.Fields(d, now) == nil {
					b.Fatal("no fields")
				}
			}
		})
	}
}

// answer is an allowed or a blocked answer of one limit rule, 1000 a minute,
// in a profile.
type answer struct {
	name string // profile/verdict
	p    Profile
	d    *Decision
}

// answers returns each profile's allowed answer (count 2) and blocked one
// (count 1001), as every adapter renders them.
func answers(profiles ...Profile) []answer {
	limit := rule("per_ip", ratelimit.ActionLimit)
	var out []answer
	for _, p := range profiles {
		for _, v := range []struct {
			name  string
			count float64
		}{{"allowed", 2}, {"blocked", 1001}} {
			d := &Decision{Results: []ratelimit.Result{result(eval(limit, 1000, time.Minute, v.count, 42*time.Second))}}
			out = append(out, answer{p.String() + "/" + v.name, p, d})
		}
	}
	return out
}
