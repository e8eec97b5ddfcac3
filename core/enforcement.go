package ratelimit

import "fmt"

// Enforcement is a limiter's mode: whether its block verdicts are obeyed.
// Migrating a checkpoint from a legacy limiter runs the new one in Shadow
// beside the legacy check, watches how often the two disagree, and then
// switches it to Enforce (see the rollout package and the README).
//
// The mode is per limiter, not per rule: operators flip a whole limiter with
// Config.Enforcement, Limiter.SetEnforcement, or the mode field of a rule
// tier (rate_limits.yaml and the published document).
type Enforcement int32

const (
	// Enforce obeys the rules: an exceeded limit rule blocks. The default.
	Enforce Enforcement = 0
	// Shadow counts exactly as Enforce would (same keys, same bans, same
	// rules evaluated and skipped) but never blocks: Result.Action is always
	// ActionAllow, Result.Shadow is set and Result.WouldBlock tells the
	// verdict enforcement would have given.
	Shadow Enforcement = 1
)

// String returns "enforce" or "shadow", the spelling of the config files.
func (e Enforcement) String() string {
	switch e {
	case Enforce:
		return "enforce"
	case Shadow:
		return "shadow"
	}
	return fmt.Sprintf("Enforcement(%d)", int32(e))
}

func (e Enforcement) valid() bool { return e == Enforce || e == Shadow }

// Enforcement returns the limiter's current mode.
func (l *Limiter) Enforcement() Enforcement { return Enforcement(l.mode.Load()) }

// SetEnforcement switches the limiter's mode at once, for checks that start
// after it returns; checks in flight finish in the mode they started in. It is
// safe to call while checks run: the hot path reads one atomic value.
func (l *Limiter) SetEnforcement(e Enforcement) error {
	if !e.valid() {
		return fmt.Errorf("ratelimit: limiter %s: invalid mode %d (want Enforce or Shadow)", l.name, int32(e))
	}
	l.mode.Store(int32(e))
	return nil
}

// applyMode turns a block into a shadowed allow when the limiter runs in
// shadow mode. The evaluations are left as the rules gave them (an exceeded
// limit rule keeps Blocked), so that WouldBlock, metrics and logs still see
// which rule would have blocked.
func (l *Limiter) applyMode(res *Result, mode Enforcement) {
	if mode != Shadow {
		return
	}
	res.Shadow = true
	if res.Action == ActionBlock {
		res.Action = ActionAllow
	}
}
