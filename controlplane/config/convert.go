package config

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

var actionToCore = map[configv1.Action]ratelimit.Action{
	configv1.Action_ACTION_LIMIT: ratelimit.ActionLimit,
	configv1.Action_ACTION_LOG:   ratelimit.ActionLog,
	configv1.Action_ACTION_SKIP:  ratelimit.ActionSkip,
}

var algorithmToCore = map[configv1.Algorithm]ratelimit.Algorithm{
	configv1.Algorithm_ALGORITHM_UNSPECIFIED:    "",
	configv1.Algorithm_ALGORITHM_FIXED_WINDOW:   ratelimit.FixedWindow,
	configv1.Algorithm_ALGORITHM_SLIDING_WINDOW: ratelimit.SlidingWindow,
	configv1.Algorithm_ALGORITHM_TOKEN_BUCKET:   ratelimit.TokenBucket,
}

var algorithmFromCore = map[ratelimit.Algorithm]configv1.Algorithm{
	"":                      configv1.Algorithm_ALGORITHM_UNSPECIFIED,
	ratelimit.FixedWindow:   configv1.Algorithm_ALGORITHM_FIXED_WINDOW,
	ratelimit.SlidingWindow: configv1.Algorithm_ALGORITHM_SLIDING_WINDOW,
	ratelimit.TokenBucket:   configv1.Algorithm_ALGORITHM_TOKEN_BUCKET,
}

var actionFromCore = map[ratelimit.Action]configv1.Action{
	ratelimit.ActionLimit: configv1.Action_ACTION_LIMIT,
	ratelimit.ActionLog:   configv1.Action_ACTION_LOG,
	ratelimit.ActionSkip:  configv1.Action_ACTION_SKIP,
}

// RuleFromProto converts a schema rule into a core rule: period_s and
// ban_for_s become durations, a scalar match becomes ratelimit.Equal,
// {regex} ratelimit.Regex and {one_of} ratelimit.OneOf. It checks only what
// the conversion needs; validate documents with the Parse functions.
func RuleFromProto(r *configv1.Rule) (ratelimit.Rule, error) {
	out := ratelimit.Rule{
		Name:            r.GetName(),
		Description:     r.GetDescription(),
		Characteristics: append([]string(nil), r.GetCharacteristics()...),
		CountMissing:    r.GetCountMissing(),
		CountDistinct:   r.GetCountDistinct(),
	}
	a, ok := actionToCore[r.GetAction()]
	if !ok {
		return ratelimit.Rule{}, fmt.Errorf("rule %s: action %v is not limit, log or skip", r.GetName(), r.GetAction())
	}
	out.Action = a
	alg, ok := algorithmToCore[r.GetAlgorithm()]
	if !ok {
		return ratelimit.Rule{}, fmt.Errorf("rule %s: algorithm %v is not fixed_window, sliding_window or token_bucket", r.GetName(), r.GetAlgorithm())
	}
	out.Algorithm = alg
	if r.Burst != nil {
		out.Burst = int64(r.GetBurst())
	}
	if r.Limit != nil {
		out.Limit = int64(r.GetLimit())
	}
	if r.PeriodS != nil {
		out.Period = time.Duration(r.GetPeriodS()) * time.Second
	}
	if r.BanForS != nil {
		out.BanFor = time.Duration(r.GetBanForS()) * time.Second
	}
	if len(r.GetMatch()) > 0 {
		out.Match = make(map[string]ratelimit.Matcher, len(r.GetMatch()))
		for k, v := range r.GetMatch() {
			switch x := v.GetKind().(type) {
			case *configv1.MatchValue_Equality:
				out.Match[k] = ratelimit.Equal(x.Equality)
			case *configv1.MatchValue_Regex:
				out.Match[k] = ratelimit.Regex(x.Regex)
			case *configv1.MatchValue_OneOf:
				vals := x.OneOf.GetValues()
				set := make([]any, len(vals))
				for i, s := range vals {
					set[i] = s
				}
				out.Match[k] = ratelimit.OneOf(set...)
			default:
				return ratelimit.Rule{}, fmt.Errorf("rule %s: match %q has no value", r.GetName(), k)
			}
		}
	}
	return out, nil
}

// RulesFromProto converts a rule list (nil gives nil). Errors name each bad
// rule and are joined.
func RulesFromProto(l *configv1.RuleList) ([]ratelimit.Rule, error) {
	if l == nil || len(l.GetRules()) == 0 {
		return nil, nil
	}
	out := make([]ratelimit.Rule, 0, len(l.GetRules()))
	var errs []error
	for _, r := range l.GetRules() {
		c, err := RuleFromProto(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// DefaultRuleToRule turns a default rule of available_limiters.yaml into the
// Rule shape that every tier of the rule store holds.
func DefaultRuleToRule(d *configv1.DefaultRule) *configv1.Rule {
	r := &configv1.Rule{
		Name:            d.GetName(),
		Description:     d.GetDescription(),
		Action:          d.GetAction(),
		Characteristics: append([]string(nil), d.GetCharacteristics()...),
		Limit:           d.Limit,
		PeriodS:         d.PeriodS,
		BanForS:         d.BanForS,
		CountDistinct:   d.GetCountDistinct(),
		CountMissing:    d.GetCountMissing(),
		Algorithm:       d.GetAlgorithm(),
		Burst:           d.Burst,
	}
	if len(d.GetMatch()) > 0 {
		r.Match = make(map[string]*configv1.MatchValue, len(d.GetMatch()))
		for k, v := range d.GetMatch() {
			r.Match[k] = proto.CloneOf(v)
		}
	}
	return proto.CloneOf(r) // detach the optional field pointers from d
}

// RuleToProto converts a core rule into the schema, for the rule store and
// the publisher. Only static values can be stored: a rule whose limit is a
// LimitFunc or whose period is a PeriodFunc is an error (resolve it into
// Limit / Period, as rulestore.Publisher does).
// Period and BanFor must be whole seconds, and the limit must fit uint32.
func RuleToProto(r ratelimit.Rule) (*configv1.Rule, error) {
	out := &configv1.Rule{
		Name:            r.Name,
		Description:     r.Description,
		Characteristics: append([]string(nil), r.Characteristics...),
		CountMissing:    r.CountMissing,
		CountDistinct:   r.CountDistinct,
	}
	var errs []error
	action := r.Action
	if action == "" {
		action = ratelimit.ActionLimit
	}
	if a, ok := actionFromCore[action]; ok {
		out.Action = a
	} else {
		errs = append(errs, fmt.Errorf("action %q is not limit, log or skip", r.Action))
	}
	if a, ok := algorithmFromCore[r.Algorithm]; ok {
		out.Algorithm = a
	} else {
		errs = append(errs, fmt.Errorf("algorithm %q is not fixed_window, sliding_window or token_bucket", r.Algorithm))
	}
	switch n := r.Burst; {
	case n == 0: // unset: the limit
	case n < 1 || n > math.MaxUint32:
		errs = append(errs, fmt.Errorf("burst %d is outside 1..%d", n, uint32(math.MaxUint32)))
	default:
		out.Burst = proto.Uint32(uint32(n))
	}
	switch n := r.Limit; {
	case r.LimitFunc != nil:
		errs = append(errs, errors.New("limit is a LimitFunc: only a resolved, static limit can be stored (set Limit)"))
	case n == 0: // unset
	case n < 1 || n > math.MaxUint32:
		errs = append(errs, fmt.Errorf("limit %d is outside 1..%d", n, uint32(math.MaxUint32)))
	default:
		out.Limit = proto.Uint32(uint32(n))
	}
	switch {
	case r.PeriodFunc != nil:
		errs = append(errs, errors.New("period is a PeriodFunc: only a resolved, static period can be stored (set Period)"))
	case r.Period == 0: // unset
	default:
		if s, err := wholeSeconds("period", r.Period); err != nil {
			errs = append(errs, err)
		} else {
			out.PeriodS = proto.Uint32(s)
		}
	}
	if r.BanFor != 0 {
		if s, err := wholeSeconds("ban_for", r.BanFor); err != nil {
			errs = append(errs, err)
		} else {
			out.BanForS = proto.Uint32(s)
		}
	}
	if len(r.Match) > 0 {
		out.Match = make(map[string]*configv1.MatchValue, len(r.Match))
		for _, k := range sortedKeys(r.Match) {
			m := r.Match[k]
			switch {
			case m.IsEqual():
				out.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: m.Value()}}
			case m.IsRegex():
				out.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: m.Value()}}
			case m.IsOneOf():
				out.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: m.Values()}}}
			default:
				errs = append(errs, fmt.Errorf("match %q: empty matcher", k))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("rule %s: %w", r.Name, errors.Join(errs...))
	}
	return out, nil
}

// RulesToProto converts a rule list; errors name each bad rule and are joined.
func RulesToProto(rules []ratelimit.Rule) (*configv1.RuleList, error) {
	out := &configv1.RuleList{Rules: make([]*configv1.Rule, 0, len(rules))}
	var errs []error
	for _, r := range rules {
		p, err := RuleToProto(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out.Rules = append(out.Rules, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func wholeSeconds(what string, d time.Duration) (uint32, error) {
	if d < time.Second || d%time.Second != 0 || d/time.Second > math.MaxUint32 {
		return 0, fmt.Errorf("%s %v is not a whole number of seconds from 1s to %ds", what, d, uint32(math.MaxUint32))
	}
	return uint32(d / time.Second), nil
}
