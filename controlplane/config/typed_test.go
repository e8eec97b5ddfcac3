package config

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// ruleJSON writes r as MarshalLimiterRules would, valid or not: an action or
// algorithm that has no word is written as its number (which the walk
// refuses).
func ruleJSON(w *jsonWriter, r *configv1.Rule) {
	a, alg := r.GetAction(), r.GetAlgorithm()
	validAction := a >= 1 && int(a) <= len(enumWords(a.Descriptor()))
	validAlg := alg >= 0 && int(alg) <= len(enumWords(alg.Descriptor()))
	if validAction && validAlg {
		w.rule(r)
		return
	}
	c := proto.Clone(r).(*configv1.Rule)
	if !validAction {
		c.Action = configv1.Action_ACTION_LIMIT
	}
	if !validAlg {
		c.Algorithm = configv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	}
	var inner jsonWriter
	inner.rule(c)
	out := inner.String()
	if !validAction {
		out = strings.Replace(out, `"action":"limit"`, fmt.Sprintf(`"action":%d`, a), 1)
	}
	if !validAlg {
		out = strings.Replace(out, `"algorithm":"token_bucket"`, fmt.Sprintf(`"algorithm":%d`, alg), 1)
	}
	w.WriteString(out)
}

// randomStoredDocument writes a document of random rules, valid or not, in
// the stored spelling, and the document itself when every rule is valid.
func randomStoredDocument(rng *rand.Rand) ([]byte, *configv1.LimiterRules) {
	doc := &configv1.LimiterRules{}
	w := &jsonWriter{}
	w.WriteByte('{')
	allValid := true
	for i, tier := range []string{"default_rules", "file_rules", "published_rules"} {
		if rng.IntN(3) == 0 {
			continue
		}
		if w.Len() > 1 {
			w.WriteByte(',')
		}
		list := &configv1.RuleList{Mode: configv1.Mode(rng.IntN(3))}
		w.str(tier)
		w.WriteString(":{")
		if list.Mode != configv1.Mode_MODE_UNSPECIFIED {
			w.WriteString(`"mode":`)
			w.str(ModeWord(list.Mode))
			w.WriteByte(',')
		}
		w.WriteString(`"rules":[`)
		for j := range rng.IntN(6) {
			r := randomRule(rng)
			if validRule(r) && rng.IntN(8) != 0 {
				r.Name = fmt.Sprintf("r%d", j) // mostly unique names, so that whole documents are valid
			}
			if j > 0 {
				w.WriteByte(',')
			}
			ruleJSON(w, r)
			allValid = allValid && validRule(r) && !slices.ContainsFunc(list.Rules, func(o *configv1.Rule) bool { return o.GetName() == r.GetName() })
			// The bounds of docs/limits.md are checked beside the schema's rules.
			allValid = allValid && len(r.GetCharacteristics()) <= ratelimit.MaxCharacteristics
			for _, v := range r.GetMatch() {
				if re, ok := v.GetKind().(*configv1.MatchValue_Regex); ok && checkRegex(re.Regex) != nil {
					allValid = false
				}
			}
			list.Rules = append(list.Rules, r)
		}
		w.WriteString("]}")
		switch i {
		case 0:
			doc.DefaultRules = list
		case 1:
			doc.FileRules = list
		case 2:
			doc.PublishedRules = list
		}
	}
	w.WriteByte('}')
	if !allValid {
		doc = nil
	}
	return w.Bytes(), doc
}

// mutate breaks data in one of the ways documents go wrong: a wrong type, an
// unknown field, a repeated key, two kinds of one match value, a bad word.
func mutate(rng *rand.Rand, data []byte) []byte {
	s := string(data)
	edits := [][2]string{
		{`"limit":`, `"limit":"ten","x":`},
		{`"period_s":`, `"period_s":-`},
		{`"name":`, `"nmae":`},
		{`"name":`, `"name":"dup","name":`},
		{`{"regex":`, `{"equality":"x","regex":`},
		{`{"one_of":[`, `{"one_of":[{},`},
		{`{"one_of":[`, `{"one_of":[1,true,null,`},
		{`"characteristics":[`, `"characteristics":[["x"],`},
		{`"characteristics":[`, `"characteristics":{"a":1},"z":[`},
		{`"action":"`, `"action":"nope","y":"`},
		{`"match":{`, `"match":{"p":7,"q":{},"r":null,`},
		{`"rules":[`, `"rules":[7,{},null,`},
		{`"mode":"`, `"mode":"loud","w":"`},
		{`:{"rules"`, `:[],"v":{"rules"`},
		{`"count_missing":true`, `"count_missing":false`},
		{`"count_missing":true`, `"count_missing":"yes"`},
		{`"ban_for_s":`, `"ban_for_s":1e3,"u":`},
	}
	for range 1 + rng.IntN(3) {
		e := edits[rng.IntN(len(edits))]
		if n := strings.Count(s, e[0]); n > 0 {
			k := rng.IntN(n)
			at := 0
			for range k + 1 {
				at += strings.Index(s[at:], e[0]) + 1
			}
			at--
			s = s[:at] + e[1] + s[at+len(e[0]):]
		}
	}
	return []byte(s)
}

// The walk stores the values of rules through the Go structs (setTyped and
// the others): on random documents, valid, invalid and badly shaped, stored
// JSON or YAML, it gives the same messages and the same errors as storing
// every value through protoreflect.
func TestTypedWalkSameResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	valid, invalid := 0, 0
	for i := range 1200 {
		data, want := randomStoredDocument(rng)
		if i%2 == 1 {
			data, want = mutate(rng, data), nil
		}
		typed, errTyped := unmarshalLimiterRules(data, false)
		refl, errRefl := unmarshalLimiterRules(data, true)
		if fmt.Sprint(errTyped) != fmt.Sprint(errRefl) || !proto.Equal(typed, refl) {
			t.Fatalf("document %d: typed and reflective walks differ\n%s\ntyped: %v\n%v\nreflective: %v\n%v", i, data, errTyped, typed, errRefl, refl)
		}
		if want != nil && (errTyped != nil || !proto.Equal(typed, want)) {
			t.Fatalf("document %d: a valid document does not read back: %v\n%s", i, errTyped, data)
		}
		if errTyped == nil {
			valid++
		} else {
			invalid++
		}

		// The same rules as YAML (JSON is YAML), through the YAML parser
		// and the checks of a publish payload.
		yml := []byte(strings.Replace(string(data), `"published_rules"`, `"rate_limits":{"l"`, 1))
		var errs [2]string
		var msgs [2]*configv1.PublishRulesRequest
		for k, reflective := range []bool{false, true} {
			d := newDoc("p.yaml")
			d.reflective = reflective
			msgs[k] = &configv1.PublishRulesRequest{}
			if d.decode(yml, msgs[k], parseYAML) {
				d.validate(msgs[k])
				d.checkRuleMap("rate_limits", msgs[k].GetRateLimits(), nil)
			}
			errs[k] = fmt.Sprint(d.result(msgs[k]))
		}
		if errs[0] != errs[1] || !proto.Equal(msgs[0], msgs[1]) {
			t.Fatalf("YAML document %d: typed and reflective walks differ\n%s\ntyped: %s\n%v\nreflective: %s\n%v", i, yml, errs[0], msgs[0], errs[1], msgs[1])
		}
	}
	if valid < 100 || invalid < 100 {
		t.Fatalf("%d valid and %d invalid documents: the draw tests too little", valid, invalid)
	}
}

// FuzzTypedWalk: on any input, storing rules through the Go structs and
// through protoreflect give the same message and the same errors.
func FuzzTypedWalk(f *testing.F) {
	f.Add([]byte(designStored))
	f.Add(storedDocument(f, 3))
	rng := rand.New(rand.NewPCG(7, 8))
	for range 8 {
		data, _ := randomStoredDocument(rng)
		f.Add(data)
		f.Add(mutate(rng, data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		typed, errTyped := unmarshalLimiterRules(data, false)
		refl, errRefl := unmarshalLimiterRules(data, true)
		if fmt.Sprint(errTyped) != fmt.Sprint(errRefl) || !proto.Equal(typed, refl) {
			t.Fatalf("typed and reflective walks differ\ntyped: %v\n%v\nreflective: %v\n%v", errTyped, typed, errRefl, refl)
		}
	})
}
