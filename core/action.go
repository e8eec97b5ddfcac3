package ratelimit

// Action is what a rule does: ActionLimit, ActionLog or ActionSkip. The verdict
// of a Result has its own type, Verdict, so that a rule can never be given a
// verdict by mistake (docs/design.md#actions):
//
//	rule.Action = ratelimit.ActionLimit    // a rule's action
//	result.Action == ratelimit.ActionBlock // a result's verdict
//	rule.Action = ratelimit.ActionBlock    // does not compile: ActionBlock is a Verdict
type Action string

const (
	// ActionLimit counts and blocks once the limit is exceeded. Terminal when it blocks.
	ActionLimit Action = "limit"
	// ActionLog counts like ActionLimit but never blocks (shadow mode). Never terminal.
	ActionLog Action = "log"
	// ActionSkip stops evaluation and allows the request without counting.
	ActionSkip Action = "skip"
)

// Verdict is what a Result tells the caller to do: ActionAllow or ActionBlock.
// The two share the Action prefix of the design's spelling
// (result.Action == ratelimit.ActionBlock).
type Verdict string

const (
	// ActionAllow is a Result's verdict: proceed.
	ActionAllow Verdict = "allow"
	// ActionBlock is a Result's verdict: reject (429, ResourceExhausted, retry the job later).
	ActionBlock Verdict = "block"
)

func (a Action) String() string { return string(a) }

func (v Verdict) String() string { return string(v) }

func (a Action) isRuleAction() bool { return a == ActionLimit || a == ActionLog || a == ActionSkip }

func (a Action) counts() bool { return a == ActionLimit || a == ActionLog }
