package ratelimit

import "fmt"

// Action names what a rule does (ActionLimit, ActionLog, ActionSkip) and what a
// Result tells the caller to do (ActionAllow, ActionBlock). One type keeps the
// spelling of the design (docs/design.md#actions): rule.Action == ActionLimit, result.Action ==
// ActionBlock.
type Action string

const (
	// ActionLimit counts and blocks once the limit is exceeded. Terminal when it blocks.
	ActionLimit Action = "limit"
	// ActionLog counts like ActionLimit but never blocks (shadow mode). Never terminal.
	ActionLog Action = "log"
	// ActionSkip stops evaluation and allows the request without counting.
	ActionSkip Action = "skip"

	// ActionAllow is a Result's verdict: proceed.
	ActionAllow Action = "allow"
	// ActionBlock is a Result's verdict: reject (429, ResourceExhausted, retry the job later).
	ActionBlock Action = "block"
)

func (a Action) String() string { return string(a) }

// ParseAction parses the lower-case rule action spelling of the config files.
func ParseAction(s string) (Action, error) {
	switch Action(s) {
	case ActionLimit, ActionLog, ActionSkip:
		return Action(s), nil
	}
	return "", fmt.Errorf("unknown rule action %q (want limit, log or skip)", s)
}

func (a Action) isRuleAction() bool { return a == ActionLimit || a == ActionLog || a == ActionSkip }

func (a Action) counts() bool { return a == ActionLimit || a == ActionLog }
