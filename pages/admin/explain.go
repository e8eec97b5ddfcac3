package admin

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/keys"
)

// explainView is the explain box's answer: what a check would decide now
// for an identifier, and each rule's part, read without counting (a peek).
type explainView struct {
	Identifier []string // property=value, sorted as the properties are
	Verdict    string
	Blocked    bool
	Error      string
	Rules      []explainRule
	Keys       int // counter and ban keys a clear would delete
	// Shared names the counting rules whose counter the identifier shares
	// with other clients, and why: a clear leaves them (Limiter.Clear).
	Shared []string
	// Gateway says how a value too long for ratekit-envoy to keep is
	// counted there (keys.GatewayIdentifier), and which counters are shown.
	Gateway string
}

type explainRule struct {
	Index                 int
	Name, Tier, Action    string
	Matched               bool
	State                 string
	Detail                string
	Count, Limit, ResetIn string
	Banned                bool
}

func (h *Handler) explain(ctx context.Context, lv *limiterView, id ratelimit.Identifier) *explainView {
	ex := &explainView{}
	for _, p := range lv.Properties {
		if v, ok := id[p]; ok {
			// Quoted when it holds what a reader cannot see: a crafted link's
			// "\u202eecila" read "alice" in the clear's confirmation.
			ex.Identifier = append(ex.Identifier, p+"="+shown(fmt.Sprint(v)))
		}
	}
	l, err := h.counterLimiter(lv)
	if err != nil {
		ex.Error = err.Error()
		return ex
	}
	// A clear removes the counters of the gateway's stand-in too.
	gid, long := keys.GatewayIdentifier(id)
	ex.Keys = len(l.Keys(id))
	if long {
		ex.Keys += len(l.Keys(gid))
	}
	for _, r := range lv.Effective {
		if r.Action != ratelimit.ActionLimit && r.Action != ratelimit.ActionLog {
			continue
		}
		if why := keys.Shared(r.Characteristics, id); why != "" {
			ex.Shared = append(ex.Shared, r.Name+" ("+why+")")
		}
	}
	res := l.Peek(ctx, id)
	if long {
		// The stand-in's counters decide when they are the ones counted.
		gres := l.Peek(ctx, gid)
		note := fmt.Sprintf("A value is over %d bytes: ratekit-envoy counts a descriptor value so long as its first %d bytes, a tilde and a digest of the whole, under counters of their own", keys.GatewayMaxValueLen, keys.GatewayMaxValueLen-33)
		switch {
		case gres.Err == nil && counted(gres) && !counted(res):
			id, res = gid, gres
			ex.Gateway = note + ": shown, the identifier as the gateway counts it."
		case gres.Err == nil && counted(gres):
			ex.Gateway = note + ": they count too and are not shown; a clear removes both."
		default:
			ex.Gateway = note + ": none counts now."
		}
	}
	now := h.opts.Now()
	evals := map[string]*ratelimit.Evaluation{}
	for i := range res.Evaluations {
		evals[res.Evaluations[i].Rule.Name] = &res.Evaluations[i]
	}
	tierOf := map[string]string{}
	for _, row := range lv.Rows {
		tierOf[row.Name] = row.Tier
	}
	stopped := ""
	if res.Err != nil {
		stopped = "the store failed"
	}
	for i, r := range l.Rules() {
		er := explainRule{Index: i + 1, Name: r.Name, Tier: tierOf[r.Name], Action: string(r.Action)}
		miss := r.MatchFailures(id)
		er.Matched = len(miss) == 0
		ev := evals[r.Name]
		switch {
		case !er.Matched:
			er.State, er.Detail = "no match", config.ClipMiddle(strings.Join(miss, "; "), maxDetailLen)
		case stopped != "":
			er.State, er.Detail = "not evaluated", stopped
		case r.Action == ratelimit.ActionSkip:
			er.State, er.Detail = "skip", "allowed without counting: evaluation ends here (a bypass)"
			stopped = "after skip rule " + r.Name
		case ev == nil:
			er.State, er.Detail = "not evaluated", "a characteristic or the count_distinct property is missing from the identifier"
		default:
			er.Count = countText(ev.Info.Count)
			er.Limit = fmt.Sprint(ev.Info.Limit)
			if r.Algorithm == ratelimit.TokenBucket { // its tokens in use are of the burst, its capacity
				er.Limit = fmt.Sprint(cmp.Or(r.Burst, ev.Info.Limit))
			}
			er.ResetIn = max(ev.Info.ResetAt.Sub(now), 0).Round(time.Second).String()
			er.Banned = ev.Info.Banned
			switch { // banned first: the check that starts a ban blocks too
			case ev.Info.Banned:
				er.State = "banned"
			case ev.Blocked:
				er.State = "block"
			case ev.Exceeded:
				er.State = "exceeded (log only)"
			default:
				er.State = "allow"
			}
			if res.Shadow && (ev.Blocked || ev.Info.Banned) {
				er.State += " (shadow mode: not enforced)"
			}
			if ev.Blocked {
				stopped = "after the blocking rule " + r.Name
			}
		}
		ex.Rules = append(ex.Rules, er)
	}
	switch {
	case res.Err != nil:
		ex.Error = res.Err.Error()
		ex.Verdict = "unknown: the counters' store failed (a check would fail open and allow)"
	case res.Shadow && res.WouldBlock() && res.Rule != nil:
		ex.Verdict = fmt.Sprintf("allow: the limiter is in shadow mode, it counts and never blocks (enforcing, it would block by %s)", res.Rule.Name)
	case res.Blocked():
		ex.Blocked = true
		ex.Verdict = fmt.Sprintf("block by %s, retry after %s", res.Rule.Name, res.Info.RetryAfter(now))
	case res.Rule == nil:
		ex.Verdict = "allow: no rule counts this identifier"
	case res.Skipped:
		// The result's rule is the skip; a log rule before it may have
		// exceeded (the result's Exceeded), which the rules list shows.
		ex.Verdict = fmt.Sprintf("allow: skip rule %s ends the evaluation (the rules after it are not evaluated)", res.Rule.Name)
		var exceeded []string
		for _, r := range ex.Rules {
			if strings.HasPrefix(r.State, "exceeded") {
				exceeded = append(exceeded, r.Name)
			}
		}
		if len(exceeded) > 0 {
			ex.Verdict += fmt.Sprintf("; log rule %s exceeded before it: reported, not enforced", strings.Join(exceeded, ", "))
		}
	case res.Exceeded:
		ex.Verdict = fmt.Sprintf("allow (log rule %s exceeded: reported, not enforced)", res.Rule.Name)
	default:
		ex.Verdict = fmt.Sprintf("allow (most constraining rule: %s)", res.Rule.Name)
	}
	return ex
}

// counted reports whether a peek found a count or a ban.
func counted(res ratelimit.Result) bool {
	for _, e := range res.Evaluations {
		if e.Info.Count > 0 || e.Info.Banned {
			return true
		}
	}
	return false
}

// maxDetailLen bounds, in characters, the mismatches the explain box shows
// for one rule. Each quotes the identifier's value (up to
// MaxIdentifierValue bytes) and the rule's match: whole, every rule of a
// limiter repeated the identifier, and 256 rules explained for three values
// of 4096 bytes made a page of 18 MB. The rules tables show each match
// whole, and the form the identifier.
const maxDetailLen = 512

// countText shows a count: a whole one as it is, a fractional one (a
// sliding window's estimate, a token bucket's refilling tokens) to two
// decimals, where all 17 digits told nothing more.
func countText(c float64) string {
	if c != math.Trunc(c) {
		c = math.Round(c*100) / 100
	}
	return strconv.FormatFloat(c, 'f', -1, 64)
}
