package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/testlog"
)

func basic(name string) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Characteristics: []string{"user"}, Limit: 5, Period: time.Minute}
}

func TestNewRejectsInvalidRules(t *testing.T) {
	tests := []struct {
		name string
		rule ratelimit.Rule
		want string
	}{
		{"bad name", ratelimit.Rule{Name: "Bad-Name", Limit: 1, Period: time.Second}, `rule #1: rule name "Bad-Name" must match`},
		// Named by its position and quoted short: a name is as long as the
		// request that sent it (a rules service's answer, a form).
		{"huge bad name", ratelimit.Rule{Name: strings.Repeat("X", 100_000), Limit: 1, Period: time.Second}, `rule #1: rule name "` + strings.Repeat("X", 80) + `" must match`},
		{"missing limit", ratelimit.Rule{Name: "r", Period: time.Second}, "rule r: limit and log rules require limit and period: Limit (or LimitFunc) not set"},
		{"missing period", ratelimit.Rule{Name: "r", Action: ratelimit.ActionLog, Limit: 1}, "rule r: limit and log rules require limit and period: Period (or PeriodFunc) not set"},
		{"missing both", ratelimit.Rule{Name: "r"}, "rule r: limit and log rules require limit and period: Limit (or LimitFunc) and Period (or PeriodFunc) not set"},
		{"zero static limit", ratelimit.Rule{Name: "r", Limit: -1, Period: time.Second}, "rule r: limit -1 must be at least 1"},
		{"tiny period", ratelimit.Rule{Name: "r", Limit: 1, Period: time.Microsecond}, "rule r: period 1µs must be at least 1ms"},
		{"negative period", ratelimit.Rule{Name: "r", Limit: 1, Period: -time.Second}, "rule r: period -1s must be at least 1ms"},
		{"limit and resolver", ratelimit.Rule{Name: "r", Limit: 5, LimitFunc: func(context.Context) (int64, error) { return 5, nil }, Period: time.Second},
			"rule r: both a limit and a LimitFunc are set"},
		{"period and resolver", ratelimit.Rule{Name: "r", Limit: 5, Period: time.Second, PeriodFunc: func(context.Context) (time.Duration, error) { return time.Second, nil }},
			"rule r: both a period and a PeriodFunc are set"},
		{"unknown action", ratelimit.Rule{Name: "r", Action: "block"}, `rule r: action "block" is not limit, log or skip`},
		{"ban on skip", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, BanFor: time.Minute}, "rule r: ban_for is not valid on skip rules"},
		{"ban with distinct", ratelimit.Rule{Name: "r", Limit: 1, Period: time.Second, BanFor: time.Minute, CountDistinct: "u"}, "rule r: ban_for cannot be combined with count_distinct"},
		{"bad regex", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex(`(?<=x)`)}}, `rule r: match "path": invalid RE2 regex`},
		{"huge regex", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex(strings.Repeat("a", 1025))}}, "regex is 1025 bytes, the limit is 1024"},
		{"regex program too big", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Regex(`(\w+\s*\d+\w+\s*\d+){1000}`)}}, "instructions, the limit is 10000"},
		{"zero matcher", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": {}}}, `rule r: match "path": empty matcher`},
		// A nil value is an absent property, which no matcher matches: the
		// rule would never apply (it matched the string "<nil>").
		{"equal nil", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.Equal(nil)}}, `rule r: match "user": a nil value is an absent property, which nothing matches`},
		{"equal typed nil", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.Equal((*strings.Builder)(nil))}}, `rule r: match "user": a nil value is an absent property, which nothing matches`},
		{"one_of nil", ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"user": ratelimit.OneOf("a", nil)}}, `rule r: match "user": a nil value is an absent property, which nothing matches`},
		{"duplicate characteristic", ratelimit.Rule{Name: "r", Characteristics: []string{"ip", "ip"}, Limit: 1, Period: time.Second}, `characteristic "ip" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("ok"), tt.rule}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
			var re *ratelimit.RuleError
			if !errors.As(err, &re) || re.Index != 1 {
				t.Fatalf("error %v does not name rule #1", err)
			}
		})
	}
	if _, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("a"), basic("a")}}); err == nil || !strings.Contains(err.Error(), "rule a: duplicate rule name (also rule #0)") {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := ratelimit.New(ratelimit.Config{Name: "Lim", Store: ratelimit.NewMemoryStore()}); err == nil {
		t.Fatal("bad limiter name accepted")
	}
	if _, err := ratelimit.New(ratelimit.Config{Name: "lim"}); err == nil || !strings.Contains(err.Error(), "Store is nil") {
		t.Fatalf("nil store: %v", err)
	}
}

// TestNewRejectsZeroMemoryStore: a MemoryStore not built by NewMemoryStore or
// MemoryConfig.New is refused with a clear error; taken, every check failed
// open on a panic in the store.
func TestNewRejectsZeroMemoryStore(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: &ratelimit.MemoryStore{}, Rules: []ratelimit.Rule{basic("a")}})
	if err == nil || !strings.Contains(err.Error(), "NewMemoryStore") {
		res := l.Check(context.Background(), ratelimit.Identifier{"user": "u"})
		t.Fatalf("New with a zero MemoryStore: error %v, want one naming NewMemoryStore (a check gave %v, Err %v)", err, res.Action, res.Err)
	}
}

// TestNewRejectsNegativeDurations: a negative Timeout or Breaker.Cooldown is
// refused; 0 is the default. Either was silently replaced by its default
// (ratekit-envoy checked its -timeout flag itself for that reason).
func TestNewRejectsNegativeDurations(t *testing.T) {
	tests := []struct {
		name string
		cfg  ratelimit.Config
		want string
	}{
		{"timeout", ratelimit.Config{Timeout: -time.Second}, "Timeout -1s is negative"},
		{"cooldown", ratelimit.Config{Breaker: ratelimit.BreakerConfig{Cooldown: -time.Millisecond}}, "Breaker.Cooldown -1ms is negative"},
		{"probe timeout", ratelimit.Config{Breaker: ratelimit.BreakerConfig{ProbeTimeout: -time.Millisecond}}, "Breaker.ProbeTimeout -1ms is negative"},
		// Not a duration, but refused here alike: an operator's setting
		// (ratekit-envoy -key-prefix) that starts every key.
		{"key prefix", ratelimit.Config{KeyPrefix: strings.Repeat("p", ratelimit.MaxKeyPrefixLen+1)}, "KeyPrefix of 257 bytes, at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Name, tt.cfg.Store = "lim", ratelimit.NewMemoryStore()
			if _, err := ratelimit.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore()}); err != nil {
		t.Fatalf("New with zero durations (the defaults): %v", err)
	}
}

// typedNilStore is a Store whose nil pointer a caller may pass by mistake.
type typedNilStore struct{ ratelimit.Store }

// TestNewRejectsTypedNilStore: a nil pointer in the Store interface (the
// store of a failed constructor whose error was dropped) is refused as a nil
// Store is; taken, every check failed open on a panic in the store.
func TestNewRejectsTypedNilStore(t *testing.T) {
	for name, store := range map[string]ratelimit.Store{
		"memory": (*ratelimit.MemoryStore)(nil),
		"custom": (*typedNilStore)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			l, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: store, Rules: []ratelimit.Rule{basic("a")}})
			if err == nil || !strings.Contains(err.Error(), "Store is nil") {
				res := l.Check(context.Background(), ratelimit.Identifier{"user": "u"})
				t.Fatalf("New with a nil %T: error %v, want \"Store is nil\" (a check gave %v, Err %v)", store, err, res.Action, res.Err)
			}
		})
	}
}

func TestSetRulesIsAllOrNothing(t *testing.T) {
	l, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("a")}})
	if err != nil {
		t.Fatal(err)
	}
	err = l.SetRules([]ratelimit.Rule{basic("b"), {Name: "broken"}})
	if err == nil || !strings.Contains(err.Error(), "limiter lim: rule broken") {
		t.Fatalf("SetRules error = %v", err)
	}
	if got := l.Rules(); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("rules after a rejected SetRules = %v, want the old list", got)
	}
	if err := l.SetRules([]ratelimit.Rule{basic("b"), basic("c")}); err != nil {
		t.Fatal(err)
	}
	if got := l.Rules(); len(got) != 2 || got[0].Name != "b" || got[0].Action != ratelimit.ActionLimit {
		t.Fatalf("rules = %v", got)
	}
}

func TestRulesAreCopied(t *testing.T) {
	rules := []ratelimit.Rule{basic("a")}
	rules[0].Match = map[string]ratelimit.Matcher{"plan": ratelimit.Equal("free")}
	l, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	rules[0].Match["plan"] = ratelimit.Equal("premium")
	rules[0].Characteristics[0] = "ip"
	r := l.Check(context.Background(), ratelimit.Identifier{"plan": "free", "user": "u"})
	if r.Rule == nil || r.Rule.Characteristics[0] != "user" {
		t.Fatalf("limiter saw the caller's later edits: %+v", r)
	}
}

// TestRulesReturnsCopies: the rules Rules returns (of a limiter or of a
// RuleSet) are the caller's to edit, as before a SetRules; an edit must not
// reach the rules being evaluated, nor the previous rules a refused SetRules
// keeps.
func TestRulesReturnsCopies(t *testing.T) {
	r := basic("a")
	r.Match = map[string]ratelimit.Matcher{"plan": ratelimit.OneOf("free")}
	set, err := ratelimit.CompileRules("", []ratelimit.Rule{r})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{r}})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]ratelimit.Rule{l.Rules(), set.Rules()} {
		got[0].Characteristics[0] = "ip"
		got[0].Match["plan"] = ratelimit.Equal("premium")
	}
	id := ratelimit.Identifier{"plan": "free", "user": "u"}
	for name, check := range map[string]func() ratelimit.Result{
		"limiter":  func() ratelimit.Result { return l.Check(context.Background(), id) },
		"rule set": func() ratelimit.Result { return l.Check(context.Background(), id, ratelimit.WithRules(set)) },
	} {
		res := check()
		if res.Rule == nil || res.Rule.Characteristics[0] != "user" || res.Degraded || res.Rule.MatchFailures(id) != nil {
			t.Fatalf("%s: an edit of the returned rules reached the limiter: %+v", name, res)
		}
	}
	if got := l.Rules()[0]; got.Characteristics[0] != "user" || !got.Match["plan"].IsOneOf() {
		t.Fatalf("Rules after an edit of an earlier copy: %+v", got)
	}
}

// flakyStore fails, hangs (ignoring ctx, like a socket that never answers) or
// delegates, and counts its calls.
type flakyStore struct {
	inner  ratelimit.Store
	mode   atomic.Int32 // 0 ok, 1 error, 2 hang
	calls  atomic.Int32
	peeks  atomic.Int32 // Eval calls in ModePeek: the breaker's probes, where the test never peeks
	checks atomic.Int32 // Eval calls in ModeCheck
	hang   chan struct{}
}

func (s *flakyStore) Eval(ctx context.Context, m ratelimit.Mode, ops []ratelimit.Op) ([]ratelimit.OpResult, error) {
	s.calls.Add(1)
	if m == ratelimit.ModePeek {
		s.peeks.Add(1)
	} else {
		s.checks.Add(1)
	}
	switch s.mode.Load() {
	case 1:
		return nil, errors.New("connection refused")
	case 2:
		<-s.hang
		return nil, errors.New("hung")
	}
	return s.inner.Eval(ctx, m, ops)
}

func (s *flakyStore) Delete(ctx context.Context, keys []string) (int, error) {
	s.calls.Add(1)
	if s.mode.Load() != 0 {
		return 0, errors.New("connection refused")
	}
	return s.inner.Delete(ctx, keys)
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestFailOpenTimeoutAndBreaker: a check on a hung store gives up at the
// timeout and fails open, and such timeouts open the breaker; failures open
// it too, after which checks answer at once without the store, a background
// prober tries the store, and its first success closes the breaker. The
// checks that must time out run on a Limiter of their own with a 50ms
// timeout; those that must succeed run on one with an hour's, which no stall
// of a loaded machine reaches (under the 50ms one a descheduled check would
// time out).
func TestFailOpenTimeoutAndBreaker(t *testing.T) {
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "u"}

	hung := &flakyStore{inner: ratelimit.NewMemoryStore(), hang: make(chan struct{})}
	defer close(hung.hang)
	short, err := ratelimit.New(ratelimit.Config{
		Name:    "short",
		Store:   hung,
		Rules:   []ratelimit.Rule{basic("per_user")},
		Timeout: 50 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{Failures: 2, Cooldown: 200 * time.Millisecond},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	hung.mode.Store(2) // hang: each check must give up at the timeout
	for i := 0; i < 2; i++ {
		r := short.Check(ctx, id) // returns at all only through the timeout: the store never does
		if r.Err == nil || !errors.Is(r.Err, context.DeadlineExceeded) || r.Action != ratelimit.ActionAllow || r.Info != nil {
			t.Fatalf("hung store result: %+v", r)
		}
	}
	if s := short.BreakerState(); s == "closed" {
		t.Fatalf("breaker after 2 timeouts: %s", s)
	}
	// Let its prober succeed and end, rather than probe beside the rest.
	hung.mode.Store(0)
	eventually(t, "the short Limiter's breaker closes", func() bool { return short.BreakerState() == "closed" })

	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := &flakyStore{inner: ratelimit.MemoryConfig{Now: clk.Now}.New(), hang: make(chan struct{})}
	defer close(store.hang)
	var logs testlog.Buffer // the background prober logs too
	l, err := ratelimit.New(ratelimit.Config{
		Name:    "lim",
		Store:   store,
		Rules:   []ratelimit.Rule{basic("per_user")},
		Timeout: time.Hour,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: 200 * time.Millisecond},
		Logger:  slog.New(slog.NewJSONHandler(&logs, nil)),
		Now:     clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}

	if r := l.Check(ctx, id); r.Err != nil || r.Action != ratelimit.ActionAllow {
		t.Fatalf("healthy check: %+v", r)
	}
	store.mode.Store(1)
	for i := 0; i < 2; i++ {
		if r := l.Check(ctx, id); r.Err == nil || !strings.Contains(r.Err.Error(), "connection refused") ||
			r.Action != ratelimit.ActionAllow || r.Info != nil {
			t.Fatalf("error result: %+v", r)
		}
	}
	if s := l.BreakerState(); s != "closed" {
		t.Fatalf("breaker after 2 failures: %s", s)
	}
	if r := l.Check(ctx, id); r.Err == nil || !strings.Contains(r.Err.Error(), "connection refused") {
		t.Fatalf("error result: %+v", r)
	}
	if s := l.BreakerState(); s != "open" {
		t.Fatalf("breaker after 3 failures: %s", s)
	}
	checks := store.checks.Load()
	for i := 0; i < 100; i++ {
		if r := l.Check(ctx, id); !errors.Is(r.Err, ratelimit.ErrCircuitOpen) || r.Action != ratelimit.ActionAllow {
			t.Fatalf("open breaker result: %+v", r)
		}
	}
	if store.checks.Load() != checks {
		t.Fatalf("open breaker: %d checks reached the store", store.checks.Load()-checks)
	}
	// A background prober tries the store (failing while it fails); checks
	// keep answering at once meanwhile, and never probe themselves.
	eventually(t, "two failed probes", func() bool { return store.peeks.Load() >= 2 })
	if r := l.Check(ctx, id); !errors.Is(r.Err, ratelimit.ErrCircuitOpen) || l.BreakerState() == "closed" {
		t.Fatalf("after failed probes: %+v, breaker %s", r, l.BreakerState())
	}
	store.mode.Store(0)
	eventually(t, "the breaker closes after a good probe", func() bool { return l.BreakerState() == "closed" })
	if r := l.Check(ctx, id); r.Err != nil || r.Info == nil || r.Info.Count != 2 {
		t.Fatalf("after recovery: %+v", r)
	}
	if store.checks.Load() != checks+1 {
		t.Fatalf("%d checks reached the store, want 1 (after recovery)", store.checks.Load()-checks)
	}
	out := logs.String()
	for _, want := range []string{`"msg":"rate_limit_error"`, `"msg":"rate_limit_breaker_open"`, `"msg":"rate_limit_breaker_closed"`, `"limiter":"lim"`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "rate_limit_error"); n != 3 {
		t.Errorf("%d rate_limit_error lines, want 3 (one per failed check, none while open)", n)
	}
}

func TestCallerCancellationDoesNotTripBreaker(t *testing.T) {
	store := &flakyStore{inner: ratelimit.NewMemoryStore(), hang: make(chan struct{})}
	defer close(store.hang)
	l, _ := ratelimit.New(ratelimit.Config{Name: "lim", Store: store, Rules: []ratelimit.Rule{basic("r")},
		Breaker: ratelimit.BreakerConfig{Failures: 1}, Logger: slog.New(slog.DiscardHandler)})
	store.mode.Store(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := l.Check(ctx, ratelimit.Identifier{"user": "u"}); r.Err == nil {
		t.Fatal("cancelled check must report its error")
	}
	if s := l.BreakerState(); s != "closed" {
		t.Fatalf("a caller's cancellation opened the breaker: %s", s)
	}
}

func TestObserverPanicNeverChangesVerdict(t *testing.T) {
	var events []ratelimit.Event
	l, _ := ratelimit.New(ratelimit.Config{Name: "lim", Store: ratelimit.NewMemoryStore(), Rules: []ratelimit.Rule{basic("r")},
		Observer: func(_ context.Context, e ratelimit.Event) {
			events = append(events, e)
			panic("metrics bug")
		}})
	ctx := context.Background()
	id := ratelimit.Identifier{"user": "u"}
	for i := 0; i < 6; i++ {
		l.Check(ctx, id)
	}
	if r := l.Check(ctx, id); r.Action != ratelimit.ActionBlock {
		t.Fatalf("verdict changed: %+v", r)
	}
	l.Peek(ctx, id)
	if n, err := l.Clear(ctx, id); n != 1 || err != nil {
		t.Fatalf("clear = %d, %v", n, err)
	}
	if len(events) != 9 || events[6].Result.Action != ratelimit.ActionBlock || events[7].Kind != ratelimit.EventPeek ||
		events[8].Kind != ratelimit.EventClear || events[8].Cleared != 1 {
		t.Fatalf("events = %+v", events)
	}
}

func TestMemoryStoreReclaimsExpiredKeys(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := ratelimit.MemoryConfig{Now: clk.Now, SweepInterval: time.Second}.New()
	l, _ := ratelimit.New(ratelimit.Config{Name: "lim", Store: store, Now: clk.Now,
		Rules: []ratelimit.Rule{{Name: "r", Characteristics: []string{"user"}, Limit: 1, Period: time.Second}}})
	ctx := context.Background()
	peak := 0
	for i := 0; i < 50_000; i++ {
		l.Check(ctx, ratelimit.Identifier{"user": i})
		if i%100 == 99 {
			clk.Add(100 * time.Millisecond) // 1000 distinct keys per second of a 1s window
		}
		if n := store.Len(); n > peak {
			peak = n
		}
	}
	// live keys are at most ~1000 (one window); a sweep per shard per second
	// keeps at most about two windows' worth.
	if peak > 2500 {
		t.Fatalf("memory store held %d keys for ~1000 live ones", peak)
	}
}

func TestMatchFailures(t *testing.T) {
	r := ratelimit.Rule{Name: "r", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{
		"plan":   ratelimit.Equal("free"),
		"path":   ratelimit.Regex(`^/api/`),
		"method": ratelimit.OneOf("POST", "PUT"),
	}}
	tests := []struct {
		id   ratelimit.Identifier
		want string
	}{
		{ratelimit.Identifier{"plan": "free", "path": "/api/x", "method": "PUT"}, "[]"},
		{ratelimit.Identifier{"plan": "pro", "path": "/web", "method": "GET"},
			`[method: "GET" is not in {one_of: ["POST" "PUT"]} path: "/web" does not match {regex: "^/api/"} plan: "pro" is not "free"]`},
		{ratelimit.Identifier{"path": "/api/x", "method": "POST"}, `[plan: not in the identifier (want "free")]`},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(r.MatchFailures(tt.id)); got != tt.want {
			t.Errorf("MatchFailures(%v) = %s, want %s", tt.id, got, tt.want)
		}
	}
	if ratelimit.Regex(`(`).Matches("(") {
		t.Fatal("an invalid regex matched")
	}
}

// Concurrent failures open the breaker once; concurrent successes on a closed
// breaker never touch its lock (run under -race).
func TestBreakerUnderConcurrency(t *testing.T) {
	store := &flakyStore{inner: ratelimit.NewMemoryStore(), hang: make(chan struct{})}
	defer close(store.hang)
	var logs testlog.Buffer
	// An hour's timeout: under the default 100ms, a loaded machine that
	// descheduled the healthy checks that long would time them out, three
	// failures in a row, and open the breaker on a healthy store.
	l, _ := ratelimit.New(ratelimit.Config{Name: "lim", Store: store, Rules: []ratelimit.Rule{basic("r")}, Timeout: time.Hour,
		Breaker: ratelimit.BreakerConfig{Failures: 3, Cooldown: time.Hour}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	run := func() {
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				l.Check(context.Background(), ratelimit.Identifier{"user": g})
			}(g)
		}
		wg.Wait()
	}
	run()
	if s := l.BreakerState(); s != "closed" {
		t.Fatalf("healthy store: breaker %s", s)
	}
	store.mode.Store(1)
	run()
	if s := l.BreakerState(); s != "open" {
		t.Fatalf("failing store: breaker %s", s)
	}
	if n := strings.Count(logs.String(), "rate_limit_breaker_open"); n != 1 {
		t.Fatalf("breaker opened %d times, want once:\n%s", n, logs.String())
	}
}

// eventually waits for cond, with a deadline generous enough for a loaded machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestValidateLeavesTheRule: Validate only checks: it does not fill in the
// default Action of the caller's rule, so that goroutines validating one
// shared rule do not race on it (it wrote Action on every call).
func TestValidateLeavesTheRule(t *testing.T) {
	r := ratelimit.Rule{Name: "r", Limit: 1, Period: time.Minute}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := r.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if r.Action != "" {
		t.Fatalf("Validate set Action to %q", r.Action)
	}
}
