package ratelimithttp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/middleware/adapter"
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
	p.SetHeaders(h, d, now)
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
		})
	}
}

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
	WriteProblem(w, d, now)
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
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

// Handle gives a Deferred's Charge the status, the meter the handler filled
// and the response headers; a blocked request reaches deny, not the handler.
func TestHandleOutcome(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "misses", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "cache_misses", Limit: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []Outcome
	g := &Guard[*http.Request]{}
	g.Guard.Deferred = []Deferred{{Limiter: l, PeekCost: 0, Charge: func(_ context.Context, o Outcome) (float64, bool) {
		seen = append(seen, o)
		return o.Meter.Value("miss_s"), o.Header.Get("X-Cache") == "miss"
	}}}
	if err := g.Guard.Validate(); err != nil {
		t.Fatal(err)
	}
	denied := 0
	for i := 0; i < 3; i++ {
		h := http.Header{}
		g.Handle(context.Background(), nil, h, func(*Decision, *Problem) { denied++ }, func(ctx context.Context) int {
			adapter.AddCost(ctx, "miss_s", 0.75)
			h.Set("X-Cache", "miss")
			return http.StatusTeapot
		})
	}
	// 0.75, then 1.5 (over 1): the third request is blocked by the peek.
	if len(seen) != 2 || denied != 1 {
		t.Fatalf("charged %d times, denied %d; want 2 and 1", len(seen), denied)
	}
	if o := seen[0]; o.Status != http.StatusTeapot || o.Meter.Value("miss_s") != 0.75 || o.Header.Get("X-Cache") != "miss" {
		t.Errorf("outcome %+v", o)
	}
	if res := l.Peek(context.Background(), nil, ratelimit.Cost(0)); res.Info == nil || res.Info.Count != 1.5 {
		t.Errorf("counted %+v, want 1.5", res.Info)
	}
}

func TestRetryAfterJitter(t *testing.T) {
	blocked := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 5, time.Minute, 6, 9*time.Second))}}
	allowed := &Decision{Results: []ratelimit.Result{result(eval(rule("r", ratelimit.ActionLimit), 5, time.Minute, 2, 9*time.Second))}}
	for _, tt := range []struct {
		name   string
		jitter time.Duration
		d      *Decision
		lo, hi int64 // Retry-After bounds; -1: no Retry-After
	}{
		{"none", 0, blocked, 9, 9},
		{"under a second is none", 900 * time.Millisecond, blocked, 9, 9},
		{"ten seconds", 10 * time.Second, blocked, 9, 19},
		{"allowed: no Retry-After", 10 * time.Second, allowed, -1, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := &Guard[*http.Request]{RetryAfterJitter: tt.jitter}
			seen := map[string]bool{}
			for range 100 {
				h := http.Header{}
				g.SetHeaders(h, tt.d, now)
				v := h.Get(HeaderRetryAfter)
				if tt.lo < 0 {
					if v != "" {
						t.Fatalf("Retry-After %q on an allowed request", v)
					}
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < tt.lo || n > tt.hi {
					t.Fatalf("Retry-After %q, want [%d, %d]", v, tt.lo, tt.hi)
				}
				seen[v] = true
			}
			if tt.hi > tt.lo && len(seen) < 2 {
				t.Fatalf("no jitter in 100 responses: %v", seen)
			}
		})
	}
}

// The middleware builds its configuration, guard included, once: an option
// is applied when Middleware is called and never again per request, and the
// clock is read once per request.
func TestGuardBuiltOnce(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "http", Store: ratelimit.NewMemoryStore(),
		Rules: []ratelimit.Rule{{Name: "per_ip", Characteristics: []string{"ip"},
			Limit: 1, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	applied, reads := 0, 0
	counted := optionFunc(func(*config) { applied++ })
	clock := WithClock(func() time.Time { reads++; return now })
	h := Middleware(l, counted, clock)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	codes := []int{}
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if !reflect.DeepEqual(codes, []int{200, 429, 429}) {
		t.Fatalf("statuses %v, want 200 then two 429s", codes)
	}
	if applied != 1 || reads != 3 {
		t.Fatalf("options applied %d times, clock read %d times for 3 requests; want 1 and 3", applied, reads)
	}
}
