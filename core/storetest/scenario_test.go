package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/redisstore"
	"github.com/ratekit/ratekit/internal/redistest"
)

// TestParseScenarioRefusesStepsThatCheckNothing: a step is exactly one
// operation, and an expectation or option it cannot use is an error, as an
// unknown key is: otherwise a misplaced `cleared`, a check beside an advance
// or an `expect` on an advance would be dropped, and the scenario would pass
// without checking it.
func TestParseScenarioRefusesStepsThatCheckNothing(t *testing.T) {
	const rules = "rules:\n  - {name: r, limit: 1, period_s: 60, action: limit}\nsteps:\n"
	tests := []struct {
		name string
		step string
		want string // "" for valid
	}{
		{"check", "  - check: {user: a}\n    cost: 2\n    repeat: 2\n    expect: {action: allow}\n", ""},
		{"clear", "  - clear: {user: a}\n    expect: {cleared: 0}\n", ""},
		{"advance", "  - advance_s: 1\n  - check: {user: a}\n    expect: {action: allow}\n", ""},
		{"check and peek", "  - check: {user: a}\n    peek: {user: a}\n", "exactly one of"},
		{"check and advance", "  - check: {user: a}\n    advance_s: 5\n", "exactly one of"},
		{"clear and set_rules", "  - clear: {user: a}\n    set_rules: []\n", "exactly one of"},
		{"empty", "  - expect: {action: allow}\n", "exactly one of"},
		{"negative advance", "  - advance_s: -1\n", "advance_s"},
		{"cleared on a check", "  - check: {user: a}\n    expect: {cleared: 1}\n", "cleared"},
		{"action on a clear", "  - clear: {user: a}\n    expect: {action: allow}\n", "expect"},
		{"expect on an advance", "  - advance_s: 1\n    expect: {action: allow}\n", "expect"},
		{"cost on a clear", "  - clear: {user: a}\n    cost: 2\n", "cost"},
		{"repeat on set_rules", "  - set_rules: []\n    repeat: 2\n", "repeat"},
		{"batch", "  - batch:\n      - check: {user: a}\n        cost: 2\n        expect: {action: allow}\n      - check: {user: b}\n", ""},
		{"empty batch", "  - batch: []\n  - check: {user: a}\n    expect: {action: allow}\n", "at least one"},
		{"peek in a batch", "  - batch:\n      - peek: {user: a}\n        expect: {action: allow}\n", "want a check"},
		{"repeat in a batch", "  - batch:\n      - check: {user: a}\n        repeat: 2\n        expect: {action: allow}\n", "no repeat"},
		{"expect on a batch", "  - batch:\n      - check: {user: a}\n    expect: {action: allow}\n", "on its checks"},
		{"cleared in a batch", "  - batch:\n      - check: {user: a}\n        expect: {cleared: 1}\n", "cleared"},
		{"check beside a batch", "  - check: {user: a}\n    batch:\n      - check: {user: a}\n        expect: {action: allow}\n", "exactly one of"},
		{"batch in a batch", "  - batch:\n      - batch:\n          - check: {user: a}\n            expect: {action: allow}\n", "want a check"},
		{"set_mode", "  - set_mode: shadow\n  - check: {user: a}\n    limiter: conformance\n    expect: {shadow: true, would_block: false}\n", ""},
		{"set_mode and check", "  - set_mode: shadow\n    check: {user: a}\n", "exactly one of"},
		{"expect on set_mode", "  - set_mode: shadow\n    expect: {shadow: true}\n", "expect"},
		{"misspelt mode", "  - set_mode: shadw\n", "shadw"},
		{"unknown limiter", "  - check: {user: a}\n    limiter: api\n    expect: {action: allow}\n", "no limiter"},
		{"limiter on an advance", "  - advance_s: 1\n    limiter: conformance\n", "act on no limiter"},
		{"limiter on a batch", "  - batch:\n      - check: {user: a}\n        expect: {action: allow}\n    limiter: conformance\n", "act on no limiter"},
		{"unknown limiter in a batch", "  - batch:\n      - check: {user: a}\n        limiter: api\n        expect: {action: allow}\n", "no limiter"},
		{"error on a clear", "  - clear: {user: a}\n    expect: {error: true}\n", "expect"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseScenario([]byte(rules + tt.step))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestParseScenarioRefusesWhatWouldBeDropped: a scenario is refused, not
// run with less than it says, when it names a match form the runner does not
// know (a misspelt regex would match nothing and the rule never apply), has a
// second YAML document (never read), asserts nothing at all, or repeats a step
// a negative number of times.
func TestParseScenarioRefusesWhatWouldBeDropped(t *testing.T) {
	const steps = "steps:\n  - check: {user: a}\n    expect: {action: allow}\n"
	tests := []struct {
		name string
		file string
		want string // "" for valid
	}{
		{"valid", "rules:\n  - {name: r, match: {ua: {regex: x}, m: {one_of: [A]}, k: v}, limit: 1, period_s: 60, action: limit}\n" + steps, ""},
		{"misspelt regex", "rules:\n  - {name: r, match: {ua: {regx: x}}, limit: 1, period_s: 60, action: limit}\n" + steps, "regx"},
		{"regex and one_of", "rules:\n  - {name: r, match: {ua: {regex: x, one_of: [y]}}, limit: 1, period_s: 60, action: limit}\n" + steps, "one of"},
		{"empty matcher", "rules:\n  - {name: r, match: {ua: {}}, limit: 1, period_s: 60, action: limit}\n" + steps, "one of"},
		{"misspelt regex in a tier", "tiers:\n  file:\n    - {name: r, match: {ua: {regx: x}}, limit: 1, period_s: 60, action: limit}\n" + steps, "regx"},
		{"misspelt regex in set_rules", "rules: []\nsteps:\n  - set_rules:\n      - {name: r, match: {ua: {regx: x}}, limit: 1, period_s: 60, action: limit}\n  - check: {user: a}\n    expect: {action: allow}\n", "regx"},
		{"second document", "rules: []\n" + steps + "---\nrules: []\n" + steps, "document"},
		{"no expectation", "rules: []\nsteps:\n  - check: {user: a}\n", "expects nothing"},
		{"empty expectation", "rules: []\nsteps:\n  - check: {user: a}\n    expect: {}\n", "expect"},
		{"negative repeat", "rules: []\nsteps:\n  - check: {user: a}\n    repeat: -2\n    expect: {action: allow}\n", "repeat"},
		{"mode", "mode: shadow\nrules: []\n" + steps, ""},
		{"misspelt mode", "mode: shadw\nrules: []\n" + steps, "shadw"},
		{"limiters", "limiters:\n  - {name: a, rules: []}\n  - {name: b, mode: shadow, tiers: {file: []}}\nsteps:\n  - check: {user: a}\n    limiter: b\n    expect: {action: allow}\n", ""},
		{"limiters and rules", "rules: []\nlimiters:\n  - {name: a, rules: []}\n" + steps, "beside limiters"},
		{"limiters and mode", "mode: shadow\nlimiters:\n  - {name: a, rules: []}\n" + steps, "beside limiters"},
		{"no limiter", "limiters: []\n" + steps, "at least one"},
		{"limiter named twice", "limiters:\n  - {name: a, rules: []}\n  - {name: a, rules: []}\n" + steps, "named twice"},
		{"invalid limiter name", "limiters:\n  - {name: A-b, rules: []}\n" + steps, "limiter"},
		{"limiter without rules", "limiters:\n  - {name: a}\n" + steps, "exactly one of rules and tiers"},
		{"misspelt limiter key", "limiters:\n  - {name: a, rule: []}\n" + steps, "rule"},
		{"step without its limiter", "limiters:\n  - {name: a, rules: []}\n  - {name: b, rules: []}\n" + steps, "name the one"},
		{"set_mode without its limiter", "limiters:\n  - {name: a, rules: []}\n  - {name: b, rules: []}\nsteps:\n  - set_mode: shadow\n  - check: {user: a}\n    limiter: a\n    expect: {action: allow}\n", "name the one"},
		{"batch check without its limiter", "limiters:\n  - {name: a, rules: []}\n  - {name: b, rules: []}\nsteps:\n  - batch:\n      - check: {user: a}\n        expect: {action: allow}\n", "name the one"},
		{"limit_from", "rules:\n  - {name: r, limit_from: q, period_s: 60, action: limit}\nsteps:\n  - set_values: {q: 2}\n" + strings.TrimPrefix(steps, "steps:\n"), ""},
		{"limit and limit_from", "rules:\n  - {name: r, limit: 1, limit_from: q, period_s: 60, action: limit}\nsteps:\n  - set_values: {q: 2}\n" + strings.TrimPrefix(steps, "steps:\n"), "give one"},
		{"limit_from never set", "rules:\n  - {name: r, limit_from: q, period_s: 60, action: limit}\n" + steps, "no set_values step sets it"},
		{"limit_from in set_rules never set", "rules: []\nsteps:\n  - set_rules:\n      - {name: r, limit_from: q, period_s: 60, action: limit}\n  - check: {user: a}\n    expect: {action: allow}\n", "no set_values step sets it"},
		{"value no rule reads", "rules:\n  - {name: r, limit_from: q, period_s: 60, action: limit}\nsteps:\n  - set_values: {q: 2, qq: 3}\n" + strings.TrimPrefix(steps, "steps:\n"), "no rule reads it"},
		{"empty set_values", "rules: []\nsteps:\n  - set_values: {}\n" + strings.TrimPrefix(steps, "steps:\n"), "at least one value"},
		{"limiter on set_values", "rules:\n  - {name: r, limit_from: q, period_s: 60, action: limit}\nsteps:\n  - set_values: {q: 2}\n    limiter: conformance\n" + strings.TrimPrefix(steps, "steps:\n"), "act on no limiter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseScenario([]byte(tt.file))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("parse: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestBatchStepChecksEveryResult: a batch step makes its checks in one
// CheckBatch and compares each check's result with its own expect, so a
// wrong expectation of any check of the batch fails the scenario, naming it.
func TestBatchStepChecksEveryResult(t *testing.T) {
	const file = `rules:
  - {name: r, characteristics: [user], limit: 2, period_s: 60, action: limit}
steps:
  - batch:
      - check: {user: a}
        expect: {action: allow, count: 1}
      - check: {user: a}
        expect: {action: allow, count: %v}
      - check: {user: a}
        expect: {action: %v, count: 3}
`
	tests := []struct {
		name   string
		count  int
		action string
		fail   string // "" for a correct scenario
	}{
		{"correct", 2, "block", ""},
		{"wrong count", 1, "block", "batch check 2: count 2, want 1"},
		{"wrong action", 2, "allow", "batch check 3: action block, want allow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := parseScenario(fmt.Appendf(nil, file, tt.count, tt.action))
			if err != nil {
				t.Fatal(err)
			}
			now := func() time.Time { return time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) }
			h := &Harness{Store: ratelimit.MemoryConfig{Now: now}.New(), Now: now, Advance: func(testing.TB, time.Duration) {}, Prefix: "test:"}
			err = sc.runSteps(t, "batch.yaml", h, false)
			switch {
			case tt.fail == "" && err != nil:
				t.Fatalf("a correct scenario: %v", err)
			case tt.fail != "" && (err == nil || !strings.Contains(err.Error(), tt.fail)):
				t.Fatalf("a wrong expectation: %v, want an error with %q", err, tt.fail)
			}
		})
	}
}

// TestExpectNoInfoBothWays: no_info: false asserts that the result carries
// info, as no_info: true asserts it carries none; neither is a no-op.
func TestExpectNoInfoBothWays(t *testing.T) {
	yes, no := true, false
	withInfo := ratelimit.Result{Info: &ratelimit.Info{}}
	tests := []struct {
		name   string
		noInfo *bool
		result ratelimit.Result
		fails  bool
	}{
		{"true, none", &yes, ratelimit.Result{}, false},
		{"true, info", &yes, withInfo, true},
		{"false, info", &no, withInfo, false},
		{"false, none", &no, ratelimit.Result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := scenarioExpect{NoInfo: tt.noInfo}
			err := e.verify(&Harness{Now: time.Now}, &tt.result)
			if (err != nil) != tt.fails {
				t.Fatalf("verify: %v, want failure %v", err, tt.fails)
			}
		})
	}
}

// TestExpectModeAndErrorBothWays: shadow, would_block and error are each
// compared both ways, and a check that fails open is a failure unless its
// expect says error: true.
func TestExpectModeAndErrorBothWays(t *testing.T) {
	yes, no := true, false
	blocking := []ratelimit.Evaluation{{Blocked: true}}
	shadowBlock := ratelimit.Result{Shadow: true, Action: ratelimit.ActionAllow, Evaluations: blocking}
	shadowAllow := ratelimit.Result{Shadow: true, Action: ratelimit.ActionAllow}
	enforced := ratelimit.Result{Action: ratelimit.ActionBlock, Evaluations: blocking}
	failed := ratelimit.Result{Action: ratelimit.ActionAllow, Err: fmt.Errorf("resolve")}
	tests := []struct {
		name   string
		expect scenarioExpect
		result ratelimit.Result
		fails  bool
	}{
		{"shadow, shadow", scenarioExpect{Shadow: &yes}, shadowAllow, false},
		{"shadow, enforced", scenarioExpect{Shadow: &yes}, enforced, true},
		{"not shadow, enforced", scenarioExpect{Shadow: &no}, enforced, false},
		{"not shadow, shadow", scenarioExpect{Shadow: &no}, shadowBlock, true},
		{"would block, shadow block", scenarioExpect{WouldBlock: &yes}, shadowBlock, false},
		{"would block, block", scenarioExpect{WouldBlock: &yes}, enforced, false},
		{"would block, shadow allow", scenarioExpect{WouldBlock: &yes}, shadowAllow, true},
		{"would not block, shadow allow", scenarioExpect{WouldBlock: &no}, shadowAllow, false},
		{"would not block, shadow block", scenarioExpect{WouldBlock: &no}, shadowBlock, true},
		{"error, failed", scenarioExpect{Error: &yes}, failed, false},
		{"error, none", scenarioExpect{Error: &yes}, shadowAllow, true},
		{"no error, none", scenarioExpect{Error: &no}, shadowAllow, false},
		{"no error, failed", scenarioExpect{Error: &no}, failed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.expect.verify(&Harness{Now: time.Now}, &tt.result)
			if (err != nil) != tt.fails {
				t.Fatalf("verify: %v, want failure %v", err, tt.fails)
			}
		})
	}
}

// TestCheckFailingOpenIsAFailure: a check that fails open (here a limit
// value that is not set) fails the step unless it expects error: true; it
// would otherwise pass for an allow.
func TestCheckFailingOpenIsAFailure(t *testing.T) {
	const file = `rules:
  - {name: r, characteristics: [user], limit_from: q, period_s: 60, action: limit}
steps:
  - %s: {user: a}
    expect: {action: allow%s}
  - set_values: {q: 1}
`
	tests := []struct {
		name, op, expect string
		fail             string // "" for a correct scenario
	}{
		{"check, error expected", "check", ", error: true", ""},
		{"check, error not expected", "check", "", "unexpected error"},
		{"check, no error expected", "check", ", error: false", "unexpected error"},
		{"peek, error expected", "peek", ", error: true", ""},
		{"peek, error not expected", "peek", "", "unexpected error"},
	}
	for _, tt := range tests {
		for _, batched := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, batched %v", tt.name, batched), func(t *testing.T) {
				sc, err := parseScenario(fmt.Appendf(nil, file, tt.op, tt.expect))
				if err != nil {
					t.Fatal(err)
				}
				now := func() time.Time { return time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) }
				h := &Harness{Store: ratelimit.MemoryConfig{Now: now}.New(), Now: now, Advance: func(testing.TB, time.Duration) {}, Prefix: "test:"}
				err = sc.runSteps(t, "fails_open.yaml", h, batched)
				switch {
				case tt.fail == "" && err != nil:
					t.Fatalf("a correct scenario: %v", err)
				case tt.fail != "" && (err == nil || !strings.Contains(err.Error(), tt.fail)):
					t.Fatalf("a check failing open: %v, want an error with %q", err, tt.fail)
				}
			})
		}
	}
}

// TestExpectNever: never is compared both ways, and asks for info like the
// other fields of a rule's info.
func TestExpectNever(t *testing.T) {
	yes, no := true, false
	never, may := ratelimit.Result{Info: &ratelimit.Info{Never: true}}, ratelimit.Result{Info: &ratelimit.Info{}}
	tests := []struct {
		name   string
		never  *bool
		result ratelimit.Result
		fails  bool
	}{
		{"true, never", &yes, never, false},
		{"true, may pass", &yes, may, true},
		{"false, may pass", &no, may, false},
		{"false, never", &no, never, true},
		{"false, no info", &no, ratelimit.Result{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := scenarioExpect{Never: tt.never}
			err := e.verify(&Harness{Now: time.Now}, &tt.result)
			if (err != nil) != tt.fails {
				t.Fatalf("verify: %v, want failure %v", err, tt.fails)
			}
		})
	}
}

// TestScenarioOutlastsAStallOnARealClock: on a store that counts on a real
// clock (Redis), a loaded machine that stalls between two steps for longer
// than TTLTolerance ages everything the scenario stored by that much: resets
// come sooner, a token bucket refills. The comparison allows the real time
// the scenario took, measured, so a correct scenario passes through a 1.5s
// stall (with TTLTolerance alone, 1s, its resets and the bucket's count
// failed), and a wrong expectation still fails.
func TestScenarioOutlastsAStallOnARealClock(t *testing.T) {
	const stall = 1500 * time.Millisecond
	client := redistest.Client(t)
	// 10 a minute: a token every 6s, so the stall moves the bucket's count
	// by 0.25, more than TTLTolerance's 1s moves it (0.17).
	const rules = `rules:
  - {name: fixed, characteristics: [user], limit: 10, period_s: 60, action: limit}
  - {name: sliding, characteristics: [user], limit: 10, period_s: 60, action: limit, algorithm: sliding_window}
  - {name: bucket, characteristics: [user], limit: 10, period_s: 60, action: limit, algorithm: token_bucket}
steps:
  - check: {user: a}
    repeat: 4
  - advance_s: 0.01 # the harness stalls here
  - check: {user: a}
    expect:
      evaluations:
`
	tests := []struct {
		name        string
		evaluations string
		fail        string // "" for a correct scenario
	}{
		{"correct", `
        - {rule: fixed, count: 5, remaining: 5, reset_s: 60}
        - {rule: sliding, count: 5, remaining: 5, reset_s: 60}
        - {rule: bucket, count: 5, remaining: 5, reset_s: 30}
`, ""},
		{"wrong count", `
        - {rule: fixed, count: 6}
        - {rule: sliding}
        - {rule: bucket}
`, "evaluation 1: count 5, want 6"},
		{"wrong bucket count", `
        - {rule: fixed}
        - {rule: sliding}
        - {rule: bucket, count: 8}
`, "evaluation 3: count"},
		{"reset later than the window", `
        - {rule: fixed, reset_s: 50}
        - {rule: sliding}
        - {rule: bucket}
`, "evaluation 1: reset in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each sleeps through its stall
			sc, err := parseScenario([]byte(rules + tt.evaluations))
			if err != nil {
				t.Fatal(err)
			}
			h := &Harness{
				Store: redisstore.New(client),
				Now:   time.Now,
				// Redis counts on its own clock: sleeping advances every
				// key, and the stall on top is the loaded machine's.
				Advance:      func(_ testing.TB, d time.Duration) { time.Sleep(d + stall) },
				Prefix:       redistest.Prefix(t),
				TTLTolerance: time.Second,
			}
			err = sc.runSteps(t, "stall.yaml", h, false)
			switch {
			case tt.fail == "" && err != nil:
				t.Fatalf("a correct scenario through a %v stall: %v", stall, err)
			case tt.fail != "" && (err == nil || !strings.Contains(err.Error(), tt.fail)):
				t.Fatalf("a wrong expectation through a %v stall: %v, want an error with %q", stall, err, tt.fail)
			}
		})
	}
}
