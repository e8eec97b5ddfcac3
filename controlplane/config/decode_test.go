package config

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// decimal is a shortcut for yaml.Node.Decode: where it gives a value, the
// value must be Decode's.
func TestDecimalMatchesYAML(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "007", "0x1F", "0o17", "1_000", "+5", "4294967295", "4294967296",
		"999999999999999999", "9999999999999999999", "-9223372036854775808", "", "1e3", "12a"} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte("v: "+s), &n); err != nil {
			t.Fatal(err)
		}
		v := n.Content[0].Content[1]
		got, ok := decimal(v.Value)
		if !ok {
			continue
		}
		var want int64
		if err := v.Decode(&want); err != nil || v.ShortTag() != "!!int" || got != want {
			t.Errorf("decimal(%q) = %d; yaml gives %d (%s, %v)", s, got, want, v.ShortTag(), err)
		}
	}
}

// A repeated key is reported alike in a small mapping (searched in place)
// and in a large one (indexed), at the repeat, naming the first.
func TestDuplicateKeysSmallAndLargeMappings(t *testing.T) {
	for _, n := range []int{3, 40} {
		var b strings.Builder
		b.WriteString("rate_limits:\n")
		for i := range n {
			fmt.Fprintf(&b, "  l_%d: []\n", i)
		}
		b.WriteString("  l_1: []\n")
		_, err := ParsePublishRulesRequest("p.yaml", []byte(b.String()), nil)
		assertErrors(t, err, []string{fmt.Sprintf(`p.yaml:%d:3: l_1: limiter name "l_1" is given twice (first at line 3)`, n+2)})
	}
}

// Positions are worked out only when something is reported: a valid
// document is read without them, an invalid one with them.
func TestPositionsOnlyForProblems(t *testing.T) {
	read := func(data []byte) *doc {
		d := newDoc("")
		msg := &configv1.LimiterRules{}
		if d.decode(data, msg, parseJSON) {
			d.validateLimiterRules(msg)
		}
		_ = d.result(msg)
		return d
	}
	if d := read(storedDocument(t, 50)); d.valPos != nil || d.keyPos != nil {
		t.Fatalf("a valid document had its positions worked out (%d values)", len(d.valPos))
	}
	bad := strings.Replace(string(storedDocument(t, 50)), `"limit":120,`, `"limit":0,`, 1)
	if d := read([]byte(bad)); len(d.valPos) == 0 {
		t.Fatal("an invalid document was reported without positions")
	}
}

// Reads that run at once share no node: each gives the result it gives alone
// (run with -race, this also proves the recycled node slabs are not shared).
func TestConcurrentReadsAgree(t *testing.T) {
	good := storedDocument(t, 20)
	bad := []byte(strings.Replace(string(good), `"limit":105,`, `"limit":0,`, 1))
	want, err := UnmarshalLimiterRules(good)
	if err != nil {
		t.Fatal(err)
	}
	_, wantErr := UnmarshalLimiterRules(bad)
	if wantErr == nil {
		t.Fatal("no error for a limit of 0")
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if got, err := UnmarshalLimiterRules(good); err != nil || !proto.Equal(got, want) {
					errs <- fmt.Sprintf("valid document read as %v, %v", got, err)
					return
				}
				if _, err := UnmarshalLimiterRules(bad); err == nil || err.Error() != wantErr.Error() {
					errs <- fmt.Sprintf("invalid document read with %v, want %v", err, wantErr)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// echoes finds, through its index, exactly the pairs the rule of result
// states: a check at c echoes a shape error at s when c lies within s, or s
// is one element below c.
func TestEchoesAgreeWithWithin(t *testing.T) {
	a, b := "a", "b"
	rules := path{}.field("rate_limits").key(a).field("rules")
	paths := []path{
		{},
		path{}.field("rate_limits"),
		path{}.field("rate_limits").key(a),
		path{}.field("rate_limits").key(b),
		rules,
		rules.at(0),
		rules.at(1),
		rules.at(0).field("limit"),
		rules.at(1).field("limit"),
		rules.at(0).field("match"),
		rules.at(0).field("match").key(a),
		rules.at(0).field("match").key(b),
		rules.at(0).field("match").key(a).field("one_of"),
		rules.at(0).field("characteristics").at(3),
		path{}.field("rate_limits").key(b).field("rules").at(0),
	}
	for _, s := range paths {
		for _, c := range paths {
			want := len(s) == 0 || c.within(s) || (len(s) == len(c)+1 && s.within(c))
			if got := newEchoes([]problem{{at: s}}).of(c); got != want {
				t.Errorf("shape error at %q, check at %q: echo %v, want %v", s, c, got, want)
			}
		}
	}
	if newEchoes(nil).of(rules) {
		t.Error("a check echoes when there is no shape error")
	}
}

// An alias costs its node and, for a mapping, each of its keys: the walk
// reports an unknown field, a repeated key or a merge key without visiting
// its value, so an alias to a mapping of many bad keys used many times made
// one error per key per use, past the node budget (2,000 uses of 100 unknown
// keys: 200,000 errors from 9 KB). Each case here must stop at the budget,
// with no more errors than it has nodes.
func TestAliasedKeysChargeTheNodeBudget(t *testing.T) {
	keys := func(format string, n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(format, i)
		}
		return strings.Join(parts, ", ")
	}
	uses := strings.Repeat(", *r", 1000)
	limiters := make([]string, 300)
	for i := range limiters {
		limiters[i] = fmt.Sprintf("l%d: {description: d, allowed_skip_rules: *r}", i)
	}
	tests := []struct{ name, yaml string }{
		{"unknown fields", "available_limiters:\n  lim:\n    description: d\n    default_rules: [&r {" + keys("x%d: 1", 100) + "}" + uses + "]\n"},
		{"repeated keys", "available_limiters:\n  lim:\n    description: d\n    default_rules: [&r {name: a, " + keys("name: a%d", 100) + "}" + uses + "]\n"},
		{"keys that are not names", "available_limiters:\n  lim:\n    description: d\n    default_rules: [&r {" + keys("[x%d]: 1", 100) + "}" + uses + "]\n"},
		// One error per use, but each use scanned every key for `names`.
		{"list written as a mapping", "available_limiters:\n  l: {description: d, allowed_skip_rules: &r {" + keys("x%d: 1", 1000) + "}}\n  " +
			strings.Join(limiters, "\n  ") + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDoc("a.yaml")
			d.budget, d.nodes = 1, 1 // so the budget is the document's bytes, a few thousand nodes
			msg := &configv1.AvailableLimiters{}
			if !d.decode([]byte(tt.yaml), msg, parseYAML) {
				t.Fatalf("not parsed: %v", d.result(msg))
			}
			d.validate(msg)
			err := d.result(msg)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValidationError", err)
			}
			if n := len(ve.Errors); n > d.nodes {
				t.Errorf("%d errors from a document of %d nodes at most", n, d.nodes)
			}
			if !strings.Contains(err.Error(), "the document is too large") {
				t.Errorf("the walk did not stop at the budget of %d nodes", d.nodes)
			}
		})
	}
}
