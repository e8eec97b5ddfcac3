package config

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// schemaRules lists the protovalidate rules of the messages validRule
// checks, one line per message, oneof and field.
func schemaRules(md protoreflect.MessageDescriptor) []string {
	text := func(m proto.Message) string {
		b, err := prototext.MarshalOptions{}.Marshal(m)
		if err != nil {
			panic(err)
		}
		if len(b) == 0 {
			return ""
		}
		return " " + strings.Join(strings.Fields(string(b)), " ") // prototext varies its spaces on purpose
	}
	lines := []string{fmt.Sprintf("message %s:%s", md.Name(), text(md.Options()))}
	for i := 0; i < md.Oneofs().Len(); i++ {
		od := md.Oneofs().Get(i)
		lines = append(lines, fmt.Sprintf("  oneof %s:%s", od.Name(), text(od.Options())))
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		lines = append(lines, fmt.Sprintf("  field %d %s %s %s presence=%v:%s", fd.Number(), fd.Name(), fd.Cardinality(), fd.Kind(), fd.HasPresence(), text(fd.Options())))
	}
	return lines
}

// validRule restates the schema's rules of Rule, MatchValue and StringSet:
// when they change, this test fails until validRule (and then wantSchema)
// are brought in line.
func TestValidRuleSchemaPinned(t *testing.T) {
	var got []string
	for _, m := range []proto.Message{&configv1.Rule{}, &configv1.MatchValue{}, &configv1.StringSet{}} {
		got = append(got, schemaRules(m.ProtoReflect().Descriptor())...)
	}
	if g := strings.Join(got, "\n"); g != strings.TrimSpace(wantSchema) {
		t.Fatalf("the schema's rules of the messages validRule checks changed: bring validRule in line, then update wantSchema to\n%s", g)
	}
}

const wantSchema = `
message Rule: [buf.validate.message]:{cel:{id:"limit_requires_threshold" message:"limit and log rules require limit and period_s" expression:"this.action == 3 || (has(this.limit) && has(this.period_s))"} cel:{id:"ban_excludes_count_distinct" message:"ban_for_s cannot be combined with count_distinct" expression:"!has(this.ban_for_s) || this.count_distinct == ''"} cel:{id:"ban_requires_threshold" message:"ban_for_s is not valid on skip rules" expression:"!has(this.ban_for_s) || this.action != 3"} cel:{id:"count_missing_requires_characteristics" message:"count_missing needs characteristics and is not valid on skip rules" expression:"!this.count_missing || (size(this.characteristics) > 0 && this.action != 3)"} cel:{id:"count_distinct_requires_threshold" message:"count_distinct is not valid on skip rules" expression:"this.count_distinct == '' || this.action != 3"} cel:{id:"algorithm_requires_threshold" message:"algorithm and burst are not valid on skip rules" expression:"(this.algorithm == 0 && !has(this.burst)) || this.action != 3"} cel:{id:"count_distinct_fixed_window" message:"count_distinct counts in fixed windows only" expression:"this.count_distinct == '' || this.algorithm <= 1"} cel:{id:"burst_requires_token_bucket" message:"burst is valid with algorithm token_bucket only" expression:"!has(this.burst) || this.algorithm == 3"}}
  oneof _limit:
  oneof _period_s:
  oneof _ban_for_s:
  oneof _burst:
  field 1 description optional string presence=false: [buf.validate.field]:{string:{max_len:1024}}
  field 2 action optional enum presence=false: [buf.validate.field]:{required:true enum:{defined_only:true}}
  field 3 characteristics repeated string presence=false: [buf.validate.field]:{repeated:{unique:true items:{string:{pattern:"^[a-z0-9_]{1,64}$"}}}}
  field 4 match repeated message presence=false: [buf.validate.field]:{map:{keys:{string:{pattern:"^[a-z0-9_]{1,64}$"}}}}
  field 5 limit optional uint32 presence=true: [buf.validate.field]:{uint32:{gte:1}}
  field 6 period_s optional uint32 presence=true: [buf.validate.field]:{uint32:{gte:1}}
  field 7 count_distinct optional string presence=false: [buf.validate.field]:{ignore:IGNORE_IF_ZERO_VALUE string:{pattern:"^[a-z0-9_]{1,64}$"}}
  field 8 ban_for_s optional uint32 presence=true: [buf.validate.field]:{uint32:{gte:1}}
  field 9 name optional string presence=false: [buf.validate.field]:{string:{pattern:"^[a-z0-9_]{1,64}$"}}
  field 10 count_missing optional bool presence=false:
  field 11 algorithm optional enum presence=false: [buf.validate.field]:{enum:{defined_only:true}}
  field 12 burst optional uint32 presence=true: [buf.validate.field]:{uint32:{gte:1}}
message MatchValue:
  oneof kind: [buf.validate.oneof]:{required:true}
  field 1 equality optional string presence=true: [buf.validate.field]:{string:{max_bytes:4096}}
  field 2 regex optional string presence=true: [buf.validate.field]:{string:{min_len:1 max_bytes:1024}}
  field 3 one_of optional message presence=true:
message StringSet:
  field 1 values repeated string presence=false: [buf.validate.field]:{repeated:{min_items:1 unique:true}}
`

// randomRule draws a rule: a valid one, then none to three of its fields
// drawn again from values at and around the edges of the schema's rules
// (nil messages included), so that valid and invalid rules both come often.
func randomRule(rng *rand.Rand) *configv1.Rule {
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	name := func() string {
		return pick("", "a", "ip", "user", "rule_1", "A", "a-b", "é", "a\n", strings.Repeat("a", 64), strings.Repeat("a", 65))
	}
	names := func() []string {
		var out []string
		for range rng.IntN(4) {
			out = append(out, pick("ip", "user", "path", "ip", "Bad", ""))
		}
		if rng.IntN(8) == 0 {
			for i := range 20 {
				out = append(out, fmt.Sprintf("p%d", i))
			}
			if rng.IntN(2) == 0 {
				out = append(out, "p7")
			}
		}
		return out
	}
	num := func() *uint32 {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return proto.Uint32(0)
		}
		return proto.Uint32(uint32(1 + rng.IntN(100)))
	}

	// A valid rule.
	r := &configv1.Rule{
		Name:   pick("a", "rule_1", strings.Repeat("z", 64)),
		Action: configv1.Action(1 + rng.IntN(3)),
	}
	skip := r.Action == configv1.Action_ACTION_SKIP
	if rng.IntN(2) == 0 {
		r.Description = pick("x", "débit — 制限", strings.Repeat("é", 1024))
	}
	for _, c := range []string{"ip", "user", "path"} {
		if rng.IntN(2) == 0 {
			r.Characteristics = append(r.Characteristics, c)
		}
	}
	if !skip || rng.IntN(2) == 0 {
		r.Limit, r.PeriodS = proto.Uint32(uint32(1+rng.IntN(9))), proto.Uint32(60)
	}
	if !skip {
		switch rng.IntN(3) {
		case 0:
			r.BanForS = proto.Uint32(1)
		case 1:
			r.CountDistinct = "ip"
		}
		r.CountMissing = len(r.Characteristics) > 0 && rng.IntN(2) == 0
		if r.CountDistinct == "" && rng.IntN(2) == 0 {
			r.Algorithm = configv1.Algorithm(rng.IntN(4))
			if r.Algorithm == configv1.Algorithm_ALGORITHM_TOKEN_BUCKET && rng.IntN(2) == 0 {
				r.Burst = proto.Uint32(uint32(1 + rng.IntN(20)))
			}
		}
	}
	for range rng.IntN(3) {
		if r.Match == nil {
			r.Match = map[string]*configv1.MatchValue{}
		}
		var v *configv1.MatchValue
		switch rng.IntN(3) {
		case 0:
			v = &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: pick("", "x")}}
		case 1:
			v = &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: pick("^a", strings.Repeat("a", 1024))}}
		default:
			v = &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{"a", "b"}}}}
		}
		r.Match[pick("path", "tier", "ip")] = v
	}

	// Then some fields drawn again.
	for range rng.IntN(4) {
		switch rng.IntN(12) {
		case 0:
			r.Name = name()
		case 1:
			r.Description = pick("", "x", strings.Repeat("é", 1024), strings.Repeat("é", 1025), strings.Repeat("a", 1025))
		case 2:
			r.Action = configv1.Action(rng.IntN(5))
		case 3:
			r.Characteristics = names()
		case 4:
			r.Limit = num()
		case 5:
			r.PeriodS = num()
		case 6:
			r.BanForS = num()
		case 7:
			r.CountDistinct = pick("", "ip", "Bad")
		case 8:
			r.CountMissing = !r.CountMissing
		case 9:
			if r.Match == nil || rng.IntN(4) == 0 {
				r.Match = map[string]*configv1.MatchValue{}
			}
			r.Match[pick("path", "tier", "ip", "Bad", "")] = randomMatchValue(rng)
		case 10:
			r.Algorithm = configv1.Algorithm(rng.IntN(6))
		case 11:
			r.Burst = num()
		}
	}
	return r
}

func randomMatchValue(rng *rand.Rand) *configv1.MatchValue {
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }
	switch rng.IntN(8) {
	case 0:
		if rng.IntN(4) == 0 {
			return nil
		}
		return &configv1.MatchValue{}
	case 1, 2:
		return &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: pick("", "x", strings.Repeat("a", 4096), strings.Repeat("a", 4097), strings.Repeat("é", 2048), strings.Repeat("é", 2049), strings.Repeat("é", 4096))}}
	case 3, 4:
		return &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: pick("", "^a", "(", strings.Repeat("a", 1024), strings.Repeat("a", 1025), strings.Repeat("é", 512), strings.Repeat("é", 513))}}
	}
	var set *configv1.StringSet
	switch rng.IntN(6) {
	case 0:
	case 1:
		set = &configv1.StringSet{}
	default:
		set = &configv1.StringSet{}
		for range 1 + rng.IntN(3) {
			set.Values = append(set.Values, pick("a", "b", "", "é"))
		}
		if rng.IntN(4) == 0 {
			for i := range 20 {
				set.Values = append(set.Values, fmt.Sprint(i))
			}
		}
	}
	return &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: set}}
}

// validRule accepts exactly the rules protovalidate finds no violation in:
// it must never accept more (a violation would go unreported); accepting
// fewer would only be slower, but it is exact.
func TestValidRuleAgreesWithProtovalidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	valid := 0
	for i := range 30_000 {
		r := randomRule(rng)
		err := protovalidate.Validate(r)
		if got := validRule(r); got != (err == nil) {
			t.Fatalf("rule %d: validRule says %v, protovalidate %v\n%v", i, got, err, prototext.Format(r))
		}
		if err == nil {
			valid++
		}
	}
	if valid < 5000 || valid > 25_000 {
		t.Fatalf("%d valid rules drawn of 30000: the draw tests too little", valid)
	}
}

// Skipping the rules validRule accepts changes nothing protovalidate
// reports on a document: the same violations, in the same order.
func TestSkipValidRulesSameViolations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	list := func() *configv1.RuleList {
		if rng.IntN(5) == 0 {
			return nil
		}
		l := &configv1.RuleList{Mode: configv1.Mode(rng.IntN(4))}
		for range rng.IntN(6) {
			r := randomRule(rng)
			if rng.IntN(2) == 0 { // mostly valid lists too
				r = richRule(rng.IntN(10))
			}
			l.Rules = append(l.Rules, r)
		}
		return l
	}
	dump := func(err error) string {
		if err == nil {
			return "valid"
		}
		var ve *protovalidate.ValidationError
		if !errors.As(err, &ve) {
			return err.Error()
		}
		lines := make([]string, 0, len(ve.Violations))
		for _, v := range ve.Violations {
			lines = append(lines, fmt.Sprintf("%s %s key=%v %q %v", protovalidate.FieldPathString(v.Proto.GetField()), v.Proto.GetRuleId(),
				v.Proto.GetForKey(), v.Proto.GetMessage(), v.FieldValue))
		}
		sort.Strings(lines) // maps are walked in random order
		return strings.Join(lines, "\n")
	}
	for i := range 3_000 {
		var msg proto.Message
		if i%2 == 0 {
			msg = &configv1.LimiterRules{FileRules: list(), PublishedRules: list(), DefaultRules: list()}
		} else {
			req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{}}
			for range rng.IntN(4) {
				req.RateLimits[fmt.Sprintf("l%d", rng.IntN(5))] = list()
			}
			msg = req
		}
		all := dump(protovalidate.Validate(msg))
		skipped := dump(protovalidate.Validate(msg, protovalidate.WithFilter(&skipValidRules{})))
		if all != skipped {
			t.Fatalf("document %d: skipping valid rules changes the violations\nall:\n%s\nskipping:\n%s\n%v", i, all, skipped, prototext.Format(msg))
		}
	}
}
