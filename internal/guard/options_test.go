package guard_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/identifiers"
	"github.com/ratekit/ratekit/internal/guard"
	"github.com/ratekit/ratekit/middleware/adapter"
	ratelimitheaders "github.com/ratekit/ratekit/middleware/headers"
)

// Properties are merged into whatever identifier is built: the default
// builder's, a custom one, or none (nil becomes an empty identifier).
func TestOptionsIdentifier(t *testing.T) {
	def := func(_ context.Context, r string) ratelimit.Identifier { return ratelimit.Identifier{"default": r} }
	custom := func(_ context.Context, r string) ratelimit.Identifier { return ratelimit.Identifier{"custom": r} }
	none := func(context.Context, string) ratelimit.Identifier { return nil }
	props := func(_ context.Context, r string, id ratelimit.Identifier) { id["user"] = "user:" + r }
	l := guardEnv{t: t, store: ratelimit.NewMemoryStore()}.limiter("req", 5, false, false)
	for _, tt := range []struct {
		name     string
		identify func(context.Context, string) ratelimit.Identifier
		props    func(context.Context, string, ratelimit.Identifier)
		want     string
	}{
		{"default", nil, nil, "map[default:r]"},
		{"default and properties", nil, props, "map[default:r user:user:r]"},
		{"custom", custom, nil, "map[custom:r]"},
		{"custom and properties", custom, props, "map[custom:r user:user:r]"},
		{"nil and properties", none, props, "map[user:user:r]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := guard.Options[string, struct{}]{Identify: tt.identify, Properties: tt.props}
			o.Guard.Limiters = []*ratelimit.Limiter{l} // Init refuses a guard of none
			o.Init("test", def)
			if got := fmt.Sprint(o.Identifier(context.Background(), "r")); got != tt.want {
				t.Fatalf("identifier = %s, want %s", got, tt.want)
			}
		})
	}
}

// Check charges the request's cost, reads the clock once and returns both
// with the identifier; Init reports a nil limiter.
func TestOptionsCheck(t *testing.T) {
	e := guardEnv{t: t, store: ratelimit.NewMemoryStore()}
	l := e.limiter("req", 5, false, false)
	reads := 0
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	o := guard.Options[string, struct{}]{
		Cost: func(_ context.Context, r string) float64 { return map[string]float64{"cheap": 1, "bulk": 4}[r] },
	}
	o.Now = func() time.Time { reads++; return at }
	o.Guard.Limiters = []*ratelimit.Limiter{l}
	o.Init("test", func(context.Context, string) ratelimit.Identifier { return guardID })
	c := o.Check(context.Background(), "bulk")
	if c.Decision.Blocked() || !c.Now.Equal(at) || c.ID["user"] != "u1" || count(l) != 4 {
		t.Fatalf("check: blocked %v, now %v, id %v, counted %v; want allowed at %v, u1, 4", c.Decision.Blocked(), c.Now, c.ID, count(l), at)
	}
	if c := o.Check(context.Background(), "bulk"); !c.Decision.Blocked() {
		t.Fatal("4 + 4 over a limit of 5 was allowed")
	}
	if reads != 2 {
		t.Fatalf("clock read %d times for 2 checks, want 2", reads)
	}
	if o.Skipped(context.Background(), "bulk") {
		t.Fatal("skipped without a Skip hook")
	}
	bad := guard.Options[string, struct{}]{}
	bad.Guard.Limiters = []*ratelimit.Limiter{nil}
	defer func() {
		if r := recover(); r != "test: limiter 0 is nil" {
			t.Fatalf("Init with a nil limiter panicked with %v, want %q", r, "test: limiter 0 is nil")
		}
	}()
	bad.Init("test", nil)
}

func TestJitter(t *testing.T) {
	for _, max := range []time.Duration{0, 900 * time.Millisecond} {
		if j := guard.Jitter(max); j != 0 {
			t.Errorf("Jitter(%v) = %v, want 0", max, j)
		}
	}
	seen := map[time.Duration]bool{}
	for range 200 {
		j := guard.Jitter(3 * time.Second)
		if j < 0 || j > 3*time.Second || j%time.Second != 0 {
			t.Fatalf("Jitter(3s) = %v, want whole seconds in [0s, 3s]", j)
		}
		seen[j] = true
	}
	if len(seen) < 2 { // 200 draws from 4 values all equal: about 1 in 4^199
		t.Fatalf("Jitter(3s) took %d distinct values", len(seen))
	}
}

// Retry adds the jitter to a delay without passing MaxRetry, so a wait near
// the longest Duration never overflows into "retry at once".
func TestRetry(t *testing.T) {
	tests := []struct {
		name   string
		d, max time.Duration
		lo, hi time.Duration
	}{
		{"no jitter", 5 * time.Second, 0, 5 * time.Second, 5 * time.Second},
		{"jitter", 5 * time.Second, 3 * time.Second, 5 * time.Second, 8 * time.Second},
		{"near the longest", ratelimit.MaxRetryAfter - 2*time.Second, time.Hour, ratelimit.MaxRetryAfter - 2*time.Second, ratelimit.MaxRetryAfter},
		{"the longest", ratelimit.MaxRetryAfter, time.Hour, ratelimit.MaxRetryAfter, ratelimit.MaxRetryAfter},
		{"past the longest", math.MaxInt64, time.Hour, ratelimit.MaxRetryAfter, ratelimit.MaxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 50 { // random jitters
				if got := guard.Retry(tt.d, tt.max); got < tt.lo || got > tt.hi || got%time.Second != 0 {
					t.Fatalf("Retry(%v, %v) = %v, want whole seconds in [%v, %v]", tt.d, tt.max, got, tt.lo, tt.hi)
				}
			}
		})
	}
}

// The settings every adapter's options of the same name return set their
// field, add to the limiters rather than replace them, and WithIPv6Prefix
// rejects an impossible prefix with the adapter's name.
func TestSettings(t *testing.T) {
	e := guardEnv{t: t, store: ratelimit.NewMemoryStore()}
	a, b := e.limiter("a", 5, false, false), e.limiter("b", 5, false, false)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tp := identifiers.MustParseTrustedProxies("10.0.0.0/8")
	var s guard.Settings[outcome]
	for _, set := range []guard.Setting[outcome]{
		guard.WithLimiters[outcome](a), guard.WithLimiters[outcome](b),
		guard.WithDeferred(guard.Metered[outcome](b, "db_s")),
		guard.WithClock[outcome](func() time.Time { return at }),
		guard.WithTrustedProxies[outcome](tp),
		guard.WithIPv6Prefix[outcome]("test", 48),
		guard.WithProfile[outcome](ratelimitheaders.Legacy),
		guard.WithRetryAfterJitter[outcome](3 * time.Second),
	} {
		set(&s)
	}
	if len(s.Limiters) != 2 || s.Limiters[0] != a || s.Limiters[1] != b || len(s.Deferred) != 1 ||
		!s.Now().Equal(at) || fmt.Sprint(s.TrustedProxies) != fmt.Sprint(tp) || s.IPv6Prefix != 48 ||
		s.Profile != ratelimitheaders.Legacy || s.RetryAfterJitter != 3*time.Second {
		t.Fatalf("settings not applied: %+v", s)
	}
	for _, bits := range []int{0, 129} {
		func() {
			defer func() {
				if r := fmt.Sprint(recover()); !strings.HasPrefix(r, "test: ") {
					t.Errorf("WithIPv6Prefix(%d) panicked with %q, want the prefix %q", bits, r, "test: ")
				}
			}()
			guard.WithIPv6Prefix[outcome]("test", bits)
		}()
	}
}

// Serve runs a skipped request at once, renders every checked one, denies a
// blocked one without running it (telling deny the blocking result) and runs
// an allowed one through Run, with a Meter when the guard meters.
func TestServe(t *testing.T) {
	e := guardEnv{t: t, store: ratelimit.NewMemoryStore()}
	l := e.limiter("req", 1, false, false)
	db := e.limiter("db", 100, false, false)
	o := guard.Options[string, string]{Skip: func(_ context.Context, r string) bool { return r == "skip" }}
	guard.WithLimiters[string](l)(&o.Settings)
	guard.WithDeferred(guard.Metered[string](db, "db_s"))(&o.Settings)
	o.Init("test", func(context.Context, string) ratelimit.Identifier { return guardID })
	var rendered []bool
	serve := func(r string) string {
		return o.Serve(context.Background(), r, func(c guard.Checked) { rendered = append(rendered, c.Decision.Blocked()) },
			func(_ guard.Checked, res ratelimit.Result) string { return "denied by " + res.Limiter },
			func(err error) string { return "gone: " + err.Error() },
			func(ctx context.Context) string {
				if m := adapter.MeterFrom(ctx); m != nil {
					m.Add("db_s", 2)
					return "ran with a meter"
				}
				return "ran"
			})
	}
	for _, tt := range []struct{ r, want string }{
		{"skip", "ran"},
		{"a", "ran with a meter"},
		{"b", "denied by req"},
		{"skip", "ran"},
	} {
		if got := serve(tt.r); got != tt.want {
			t.Fatalf("Serve(%q) = %q, want %q", tt.r, got, tt.want)
		}
	}
	if fmt.Sprint(rendered) != "[false true]" {
		t.Fatalf("rendered %v, want [false true]: every checked request, none skipped", rendered)
	}
	if count(l) != 2 || count(db) != 2 {
		t.Fatalf("counted req %v, db %v; want 2 checks and the 2 db_s the allowed request metered", count(l), count(db))
	}
}
