package config

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The walk fills messages through protoreflect, which converts every value
// through package reflect and allocates for most of them. A stored document
// is mostly rules, so for the messages of a rule (RuleList's rules, Rule,
// MatchValue, StringSet) the walk stores values through the generated Go
// structs instead; it walks, checks and reports exactly as for any other
// message, only the stores differ. TestTypedWalkSameResult decodes random
// documents both ways (doc.reflective) and compares the messages and errors.

// The fields stored through the structs, by number: the pinned schema
// (TestValidRuleSchemaPinned) lists them.
var (
	ruleFields       = (&configv1.Rule{}).ProtoReflect().Descriptor().Fields()
	ruleDescription  = ruleFields.ByName("description").Number()
	ruleAction       = ruleFields.ByName("action").Number()
	ruleChars        = ruleFields.ByName("characteristics").Number()
	ruleMatch        = ruleFields.ByName("match").Number()
	ruleLimit        = ruleFields.ByName("limit").Number()
	rulePeriodS      = ruleFields.ByName("period_s").Number()
	ruleCountDist    = ruleFields.ByName("count_distinct").Number()
	ruleBanForS      = ruleFields.ByName("ban_for_s").Number()
	ruleNameField    = ruleFields.ByName("name").Number()
	ruleCountMissing = ruleFields.ByName("count_missing").Number()
	ruleAlgorithm    = ruleFields.ByName("algorithm").Number()
	ruleBurst        = ruleFields.ByName("burst").Number()

	matchValueFields = (&configv1.MatchValue{}).ProtoReflect().Descriptor().Fields()
	matchEquality    = matchValueFields.ByName("equality").Number()
	matchRegex       = matchValueFields.ByName("regex").Number()
	matchOneOf       = matchValueFields.ByName("one_of").Number()

	stringSetValues = (&configv1.StringSet{}).ProtoReflect().Descriptor().Fields().ByName("values").Number()
)

// uint32Ptr returns a pointer to v for an optional uint32 field, cut from a
// block: one allocation for many rules.
func (d *doc) uint32Ptr(v uint32) *uint32 {
	if len(d.u32) == 0 {
		d.u32 = make([]uint32, 64)
	}
	p := &d.u32[0]
	d.u32 = d.u32[1:]
	*p = v
	return p
}

// setTyped stores v in field fd of m through m's Go struct, and reports
// whether it did (false: m is not one of the messages stored so).
func (d *doc) setTyped(m protoreflect.Message, fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	if d.reflective {
		return false
	}
	switch x := m.Interface().(type) {
	case *configv1.Rule:
		switch fd.Number() {
		case ruleNameField:
			x.Name = v.String()
		case ruleDescription:
			x.Description = v.String()
		case ruleAction:
			x.Action = configv1.Action(v.Enum())
		case ruleLimit:
			x.Limit = d.uint32Ptr(uint32(v.Uint()))
		case rulePeriodS:
			x.PeriodS = d.uint32Ptr(uint32(v.Uint()))
		case ruleBanForS:
			x.BanForS = d.uint32Ptr(uint32(v.Uint()))
		case ruleCountDist:
			x.CountDistinct = v.String()
		case ruleCountMissing:
			x.CountMissing = v.Bool()
		case ruleAlgorithm:
			x.Algorithm = configv1.Algorithm(v.Enum())
		case ruleBurst:
			x.Burst = d.uint32Ptr(uint32(v.Uint()))
		default:
			return false
		}
		return true
	case *configv1.MatchValue:
		switch fd.Number() {
		case matchEquality:
			x.Kind = &configv1.MatchValue_Equality{Equality: v.String()}
		case matchRegex:
			x.Kind = &configv1.MatchValue_Regex{Regex: v.String()}
		default:
			return false
		}
		return true
	}
	return false
}

// mutableTyped returns the message of singular message field fd of m, made
// through m's Go struct, or nil when m is not one of the messages stored so.
func (d *doc) mutableTyped(m protoreflect.Message, fd protoreflect.FieldDescriptor) protoreflect.Message {
	if d.reflective {
		return nil
	}
	if x, ok := m.Interface().(*configv1.MatchValue); ok && fd.Number() == matchOneOf {
		if k, ok := x.Kind.(*configv1.MatchValue_OneOf); ok && k.OneOf != nil {
			return k.OneOf.ProtoReflect()
		}
		set := &configv1.StringSet{}
		x.Kind = &configv1.MatchValue_OneOf{OneOf: set}
		return set.ProtoReflect()
	}
	return nil
}

// typedList is a repeated field stored through its message's Go struct.
type typedList struct {
	strs  *[]string         // Rule.characteristics, StringSet.values
	rules *[]*configv1.Rule // RuleList.rules
}

// listTyped returns repeated field fd of m as a typedList with room for n
// more elements; ok is false when m is not one of the messages stored so.
func (d *doc) listTyped(m protoreflect.Message, fd protoreflect.FieldDescriptor, n int) (l typedList, ok bool) {
	if d.reflective {
		return l, false
	}
	switch x := m.Interface().(type) {
	case *configv1.Rule:
		if fd.Number() == ruleChars {
			l.strs = &x.Characteristics
		}
	case *configv1.StringSet:
		if fd.Number() == stringSetValues {
			l.strs = &x.Values
		}
	case *configv1.RuleList:
		if fd == ruleListRules {
			if x.Rules == nil {
				x.Rules = make([]*configv1.Rule, 0, n)
			}
			return typedList{rules: &x.Rules}, true
		}
	}
	if l.strs == nil {
		return l, false
	}
	if *l.strs == nil {
		*l.strs = make([]string, 0, n)
	}
	return l, true
}

// matchTyped returns the match map of m, made when m has none, when m is a
// Rule and fd its match field (else nil).
func (d *doc) matchTyped(m protoreflect.Message, fd protoreflect.FieldDescriptor, n int) map[string]*configv1.MatchValue {
	if d.reflective {
		return nil
	}
	if x, ok := m.Interface().(*configv1.Rule); ok && fd.Number() == ruleMatch {
		if x.Match == nil {
			x.Match = make(map[string]*configv1.MatchValue, n)
		}
		return x.Match
	}
	return nil
}
