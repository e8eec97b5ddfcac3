package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// storedDocument is a valid stored document of n published rules, each with
// a description of multi-byte characters so that columns (runes) differ from
// byte offsets, a regex and a set to match.
func storedDocument(tb testing.TB, n int) []byte {
	tb.Helper()
	rules := make([]*configv1.Rule, n)
	for i := range rules {
		rules[i] = richRule(i)
	}
	return marshalPublished(tb, rules)
}

// designDocument is a stored document of n rules shaped like the design's
// example (name, limit, period, action, one characteristic, no match).
func designDocument(tb testing.TB, n int) []byte {
	tb.Helper()
	rules := make([]*configv1.Rule, n)
	for i := range rules {
		rules[i] = autocompleteRule(uint32(100 + i))
		rules[i].Name = fmt.Sprintf("rule_%d", i)
	}
	return marshalPublished(tb, rules)
}

func marshalPublished(tb testing.TB, rules []*configv1.Rule) []byte {
	data, err := MarshalLimiterRules(&configv1.LimiterRules{PublishedRules: &configv1.RuleList{Rules: rules}})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func richRule(i int) *configv1.Rule {
	return &configv1.Rule{
		Name:            fmt.Sprintf("rule_%d", i),
		Description:     "débit limité — 制限",
		Limit:           proto.Uint32(uint32(100 + i)),
		PeriodS:         proto.Uint32(60),
		Action:          configv1.Action_ACTION_LIMIT,
		Characteristics: []string{"user", "ip"},
		Match: map[string]*configv1.MatchValue{
			"path": {Kind: &configv1.MatchValue_Regex{Regex: "^/api/v[0-9]+/"}},
			"tier": {Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{"free", "trial"}}}},
		},
	}
}

// BenchmarkUnmarshalLimiterRules decodes stored documents of growing size:
// the time per rule stays flat because positions are tracked in one forward
// pass rather than recounted from the start of the line for every token.
func BenchmarkUnmarshalLimiterRules(b *testing.B) {
	for _, bc := range []struct {
		shape string
		doc   func(testing.TB, int) []byte
	}{{"design", designDocument}, {"rich", storedDocument}} {
		for _, n := range []int{100, ratelimit.MaxRulesPerTier} {
			data := bc.doc(b, n)
			b.Run(fmt.Sprintf("%s/rules=%d", bc.shape, n), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := UnmarshalLimiterRules(data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// FuzzParseJSONPaths: a valid document gives the same nodes, positions
// included, through the scanner that trusts json.Valid as through
// encoding/json's tokenizer.
func FuzzParseJSONPaths(f *testing.F) {
	for _, s := range []string{
		designStored, `{"a":[1,-2.5e3,true,false,null,"x\"y\u00e9\ud83d\ude00"]}`, " \n{ \"a\" :\n[ ] , \"b\":{}}\n ",
		"\"caf\xc3\xa9 \xff\"", `[]`, `0`, `{"débit":"制限","k":"a\\b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(storedDocument(f, 3))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		fast := newValidJSON(data).value() // parseJSON's reader of valid JSON, before its check of UTF-8
		slow, err := parseJSONTokens(data)
		if err != nil {
			t.Fatalf("valid document, tokenizer: %v", err)
		}
		if a, b := dumpNode(fast), dumpNode(slow); a != b {
			t.Fatalf("nodes differ:\nscanner   %s\ntokenizer %s", a, b)
		}
	})
}

func dumpNode(n *yaml.Node) string {
	var b strings.Builder
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		fmt.Fprintf(&b, "(%d %s %q %d:%d", n.Kind, n.Tag, n.Value, n.Line, n.Column)
		for _, c := range n.Content {
			walk(c)
		}
		b.WriteString(")")
	}
	walk(n)
	return b.String()
}

// TestUnmarshalLargeDocumentErrorPositions proves positions stay exact deep
// into a long single-line document with multi-byte text, and after a line
// break: every error names the line and the rune column of its value.
func TestUnmarshalLargeDocumentErrorPositions(t *testing.T) {
	data := string(storedDocument(t, ratelimit.MaxRulesPerTier))
	// Break the line before rule 150, and give rules 10 and 200 a limit of 0
	// (which protovalidate rejects).
	data = strings.Replace(data, `{"name":"rule_150"`, "\n"+`{"name":"rule_150"`, 1)
	for _, i := range []int{10, 200} {
		old := fmt.Sprintf(`{"name":"rule_%d","description":"débit limité — 制限","limit":%d,`, i, 100+i)
		data = strings.Replace(data, old, fmt.Sprintf(`{"name":"rule_%d","description":"débit limité — 制限","limit":0,`, i), 1)
	}
	want := func(i int) string {
		off := strings.Index(data, fmt.Sprintf(`{"name":"rule_%d",`, i))
		off += strings.Index(data[off:], `"limit":`) + len(`"limit":`)
		line := 1 + strings.Count(data[:off], "\n")
		lineStart := strings.LastIndexByte(data[:off], '\n') + 1
		col := utf8.RuneCountInString(data[lineStart:off]) + 1
		return fmt.Sprintf("%d:%d: rule_%d: limit must be at least 1, got 0", line, col, i)
	}
	_, err := UnmarshalLimiterRules([]byte(data))
	assertErrors(t, err, []string{want(10), want(200)})
	if !strings.HasPrefix(want(200), "2:") {
		t.Fatalf("rule 200 should be on line 2: %s", want(200))
	}

	// Invalid JSON deep in the document goes through encoding/json's
	// tokenizer: its position is exact too.
	bad := strings.Replace(data, `"limit":0,`, `"limit":nope,`, 2) // rules 10 and 200: the first is reported
	off := strings.Index(bad, "nope")
	_, err = UnmarshalLimiterRules([]byte(bad))
	assertErrors(t, err, []string{fmt.Sprintf("%d:%d: invalid JSON: invalid character 'o' in literal null (expecting 'u')",
		1, utf8.RuneCountInString(bad[:off])+1)})
}

// BenchmarkUnmarshalInvalidLimiterRules reads a stored document whose every
// rule is badly shaped (an unknown field, and so no action): as many checks
// as shape errors. Telling the checks that echo a shape error once compared
// every pair: 13.7 s for bad=16000 (128 KB), 0.59 s with the index.
func BenchmarkUnmarshalInvalidLimiterRules(b *testing.B) {
	for _, n := range []int{1000, 16000} {
		doc := []byte(`{"published_rules":{"rules":[` + strings.TrimSuffix(strings.Repeat(`{"x":1},`, n), ",") + "]}}")
		b.Run(fmt.Sprintf("bad=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := UnmarshalLimiterRules(doc); err == nil {
					b.Fatal("an invalid document was read")
				}
			}
		})
	}
}
