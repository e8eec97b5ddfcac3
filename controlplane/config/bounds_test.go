package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	validate "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const boundsAvailable = `available_limiters:
  api:
    description: bounds
    available_properties: [p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15, p16, p17, p18, p19, p20, p21, p22, p23, p24, p25, p26, p27, p28, p29, p30, p31, p32, p33]
`

// rulesYAML writes n rules for limiter api, one line each.
func rulesYAML(n int, extra string) string {
	var b strings.Builder
	b.WriteString("rate_limits:\n  api:\n")
	for i := range n {
		fmt.Fprintf(&b, "    - {name: r%d, action: limit, limit: 1, period_s: 60%s}\n", i, extra)
	}
	return b.String()
}

func props(n int, format string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(parts, ", ")
}

// Every bound of the rule model is reported by the YAML loader (and so by
// ratekit validate) with file, line and rule.
func TestBoundsInRateLimitsYAML(t *testing.T) {
	available := mustAvailable(t, boundsAvailable)
	values := props(ratelimit.MaxOneOfValues+1, "v%d")
	tests := []struct {
		name, yaml string
		want       string // "" when valid
	}{
		{"MaxRulesPerTier rules", rulesYAML(ratelimit.MaxRulesPerTier, ""), ""},
		{"one rule over the tier's bound", rulesYAML(ratelimit.MaxRulesPerTier+1, ""),
			"r.yaml:259:7: api/r256: 257 rules in this list, at most 256 per tier (docs/limits.md); this is the first rule over the limit"},
		{"characteristics", rulesYAML(1, ", characteristics: ["+props(ratelimit.MaxCharacteristics+1, "p%d")+"]"),
			"r.yaml:3:74: api/r0: 17 characteristics, at most 16 (docs/limits.md)"},
		{"match entries", rulesYAML(1, ", match: {"+props(ratelimit.MaxMatchEntries+1, "p%d: x")+"}"),
			"r.yaml:3:64: api/r0: 33 match entries, at most 32 (docs/limits.md)"},
		{"one_of values", rulesYAML(1, ", match: {p0: {one_of: ["+values+"]}}"),
			"r.yaml:3:69: api/r0: match \"p0\": one_of has 1025 values, at most 1024 (docs/limits.md)"},
		{"regex", rulesYAML(1, ", match: {p0: {regex: "+strings.Repeat("a", ratelimit.MaxRegexLen+1)+"}}"),
			`r.yaml:3:77: api/r0: match "p0": regex is 1025 bytes long; at most 1024 are allowed`},
		{"MaxMatchValueLen", rulesYAML(1, ", match: {p0: "+strings.Repeat("v", ratelimit.MaxMatchValueLen)+", p1: {one_of: [a, "+strings.Repeat("v", ratelimit.MaxMatchValueLen)+"]}}"), ""},
		{"one_of value", rulesYAML(1, ", match: {p0: {one_of: [a, "+strings.Repeat("v", 1<<19)+"]}}"),
			`r.yaml:3:69: api/r0: match "p0": one_of value #2 is 524288 bytes, at most 4096 (docs/limits.md)`},
		{"equality value's bytes", rulesYAML(1, ", match: {p0: "+strings.Repeat("é", ratelimit.MaxMatchValueLen/2+1)+"}"),
			`r.yaml:3:69: api/r0: match "p0" is 4098 bytes long; at most 4096 are allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRateLimits("r.yaml", []byte(tt.yaml), available)
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tt.want)
			}
		})
	}
}

// A value a rule matches is bounded by its bytes (ratelimit.MaxMatchValueLen)
// on the write path and the read path alike, as the core bounds it: a one_of
// value had no bound but the document's 1 MiB, and an equality value was
// bounded in characters (4096 of up to 4 bytes).
func TestMatchValueBoundsInStoredDocumentsAndPublish(t *testing.T) {
	limit, period := uint32(1), uint32(60)
	rule := func(v *configv1.MatchValue) *configv1.Rule {
		return &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: &limit, PeriodS: &period,
			Match: map[string]*configv1.MatchValue{"p": v}}
	}
	oneOf := func(vs ...string) *configv1.MatchValue {
		return &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: vs}}}
	}
	equal := func(v string) *configv1.MatchValue {
		return &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: v}}
	}
	const hole = "placeholder"
	tests := []struct {
		name  string
		v     func(string) *configv1.MatchValue
		value string
		want  string // "" when valid
		core  string // the core's words when they differ from want
	}{
		{"one_of at the bound", func(v string) *configv1.MatchValue { return oneOf("a", v) }, strings.Repeat("v", ratelimit.MaxMatchValueLen), "", ""},
		{"equality at the bound", equal, strings.Repeat("é", ratelimit.MaxMatchValueLen/2), "", ""},
		{"one_of value", func(v string) *configv1.MatchValue { return oneOf("a", v) }, strings.Repeat("v", 1<<19), `match "p": one_of value #2 is 524288 bytes, at most 4096`, ""},
		{"equality value", equal, strings.Repeat("é", ratelimit.MaxMatchValueLen/2+1), `match "p" is 4098 bytes long; at most 4096 are allowed`, `match "p": the value is 4098 bytes, at most 4096`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rule(tt.v(tt.value))
			req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{r}}}}
			// The stored document as any writer would write it, the value
			// put in after the encoding, as the writer refuses it.
			b, err := MarshalRule(rule(tt.v(hole)))
			if err != nil {
				t.Fatal(err)
			}
			stored := `{"published_rules":{"rules":[` + strings.Replace(string(b), hole, tt.value, 1) + `]}}`
			_, readErr := UnmarshalLimiterRules([]byte(stored))
			core, convErr := RuleFromProto(r)
			if convErr == nil {
				_, convErr = ratelimit.CompileRules("", []ratelimit.Rule{core})
			}
			for what, err := range map[string]error{"publish": ValidatePublishRulesRequest(req, nil), "read": readErr, "core": convErr} {
				want := tt.want
				if what == "core" && tt.core != "" {
					want = tt.core
				}
				switch {
				case want == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
					t.Errorf("%s: error %v, want one containing %q", what, err, want)
				}
			}
		})
	}
}

// The same bounds hold for a document of the rule store and a publish
// request: what the write path refuses, the read path refuses too.
func TestBoundsInStoredDocumentsAndPublish(t *testing.T) {
	rules := &configv1.RuleList{}
	for i := range ratelimit.MaxRulesPerTier + 1 {
		limit, period := uint32(1), uint32(60)
		rules.Rules = append(rules.Rules, &configv1.Rule{Name: fmt.Sprintf("r%d", i), Action: configv1.Action_ACTION_LIMIT, Limit: &limit, PeriodS: &period})
	}
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": rules}}
	if err := ValidatePublishRulesRequest(req, nil); err == nil || !strings.Contains(err.Error(), "api/r256: 257 rules in this list") {
		t.Fatalf("publish: %v", err)
	}
	doc := &configv1.LimiterRules{PublishedRules: rules}
	if err := ValidateLimiterRules(doc); err == nil || !strings.Contains(err.Error(), "257 rules in this list") {
		t.Fatalf("validate document: %v", err)
	}
	if _, err := MarshalLimiterRules(doc); err == nil {
		t.Fatal("a document over the bound was marshalled")
	}
	raw := []byte(`{"published_rules":{"rules":[`)
	for i, r := range rules.Rules {
		b, err := MarshalRule(r)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = append(raw, b...)
	}
	raw = append(raw, "]}}"...)
	if _, err := UnmarshalLimiterRules(raw); err == nil || !strings.Contains(err.Error(), "r256: 257 rules in this list") {
		t.Fatalf("read document: %v", err)
	}
}

// A document over MaxFileSize is refused before it is parsed: refusing an
// 8 MiB one allocates far less than parsing it would (hundreds of MB).
func TestOversizedDocumentIsRefusedBeforeParsing(t *testing.T) {
	big := []byte(rulesYAML(1, "")) // valid, then padded with a comment
	big = append(big, '#')
	for len(big) < 8<<20 {
		big = append(big, 'x')
	}
	available := mustAvailable(t, boundsAvailable)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseRateLimits("r.yaml", big, available)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "r.yaml:1:1: the document is 8388608 bytes, at most 1048576") {
		t.Fatalf("ParseRateLimits: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Errorf("refusing an 8 MiB document allocated %d bytes", alloc)
	}
	if _, err := UnmarshalLimiterRules(big); err == nil || !strings.Contains(err.Error(), "at most 1048576") {
		t.Fatalf("UnmarshalLimiterRules: %v", err)
	}

	path := filepath.Join(t.TempDir(), "rate_limits.yaml")
	if err := os.WriteFile(path, big, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = LoadRateLimits(path, available)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "rate_limits.yaml:1:1: the file is larger than 1048576 bytes") {
		t.Fatalf("LoadRateLimits: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing an 8 MiB file allocated %d bytes: it was read", alloc)
	}
}

// A document within every bound of docs/limits.md is read whatever its node
// count: without aliases a document has at most one node per byte, and the
// YAML walk's budget of 200,000 nodes refused this valid file of 0.6 MiB
// (the stored JSON reader always allowed one node per byte).
func TestDenseDocumentWithinBounds(t *testing.T) {
	// Distinct values of one to three bytes; longer ones start with a
	// letter, as YAML would read 00 as the number 0.
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	vals := make([]string, 0, ratelimit.MaxOneOfValues)
	for _, c := range alphabet {
		vals = append(vals, string(c))
	}
	for _, first := range alphabet[:26] {
		for _, c := range alphabet {
			vals = append(vals, string(first)+string(c))
		}
	}
	for i := 0; len(vals) < ratelimit.MaxOneOfValues; i++ {
		vals = append(vals, fmt.Sprintf("z%02d", i))
	}
	oneOf := "{one_of: [" + strings.Join(vals, ",") + "]}"
	// 215,040 values, in two limiters: the rule store's document of one
	// limiter is bounded too, and JSON writes more than YAML.
	rules := rulesYAML(35, ", match: {p0: "+oneOf+", p1: "+oneOf+", p2: "+oneOf+"}")
	doc := rules + strings.Replace(rules, "rate_limits:\n  api:\n", "  api2:\n", 1)
	if len(doc) > MaxFileSize {
		t.Fatalf("the document is %d bytes, over MaxFileSize", len(doc))
	}
	available := boundsAvailable + "  api2:\n    description: bounds\n    available_properties: [p0, p1, p2]\n"
	if _, err := ParseRateLimits("r.yaml", []byte(doc), mustAvailable(t, available)); err != nil {
		t.Fatalf("a valid document was refused: %.300v", err)
	}
}

// A document that breaks a rule on every line gives at most
// MaxReportedErrors problems, the first in file order, each with its place,
// and says how many more it found: one error per problem of a 1 MiB document
// was many times its size.
func TestValidationErrorIsBounded(t *testing.T) {
	const rules = 300 // one unknown field each
	yamlDoc := rulesYAML(rules, ", bogus: 1")
	var js strings.Builder
	js.WriteString(`{"published_rules":{"rules":[`)
	for i := range rules {
		if i > 0 {
			js.WriteByte(',')
		}
		fmt.Fprintf(&js, "\n"+`{"name":"r%d","action":"limit","limit":1,"period_s":60,"bogus":1}`, i)
	}
	js.WriteString("]}}")
	available := mustAvailable(t, boundsAvailable)
	tests := []struct {
		name  string
		parse func() error
		file  string
	}{
		{"rate_limits.yaml", func() error { _, err := ParseRateLimits("r.yaml", []byte(yamlDoc), available); return err }, "r.yaml"},
		{"stored document", func() error { _, err := UnmarshalLimiterRules([]byte(js.String())); return err }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValidationError", err)
			}
			if len(ve.Errors) != MaxReportedErrors || ve.Omitted != rules-MaxReportedErrors {
				t.Fatalf("%d errors and %d omitted, want %d and %d", len(ve.Errors), ve.Omitted, MaxReportedErrors, rules-MaxReportedErrors)
			}
			for i, e := range ve.Errors {
				if e.File != tt.file || e.Line == 0 || e.Rule != fmt.Sprintf("r%d", i) {
					t.Fatalf("error %d: %q in file %q, rule %q: want the rules in file order, each placed", i, e, e.File, e.Rule)
				}
			}
			want := fmt.Sprintf("\n... and %d more (only the first %d problems are reported)", rules-MaxReportedErrors, MaxReportedErrors)
			if !strings.HasSuffix(err.Error(), want) {
				t.Errorf("error ends %q, want %q", err.Error()[max(0, len(err.Error())-120):], want)
			}
		})
	}
}

// The schema's property names (^[a-z0-9_]{1,64}$) and the core's
// ratelimit.MaxPropertyLen are one bound: a name the config accepts, the core
// accepts, and one byte more both refuse.
func TestPropertyNameBoundIsTheCore(t *testing.T) {
	limit, period := uint32(1), uint32(60)
	for _, n := range []int{ratelimit.MaxPropertyLen, ratelimit.MaxPropertyLen + 1} {
		name := strings.Repeat("p", n)
		r := &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: &limit, PeriodS: &period, Characteristics: []string{name}}
		configErr := ValidateLimiterRules(&configv1.LimiterRules{PublishedRules: &configv1.RuleList{Rules: []*configv1.Rule{r}}})
		_, coreErr := ratelimit.CompileRules("", []ratelimit.Rule{{Name: "r", Limit: 1, Period: time.Minute, Characteristics: []string{name}}})
		if valid := n <= ratelimit.MaxPropertyLen; (configErr == nil) != valid || (coreErr == nil) != valid {
			t.Errorf("a property name of %d bytes: config %v, core %v; want both valid: %v", n, configErr, coreErr, valid)
		}
	}
}

// The schema bounds a value a rule matches in bytes, as the core does
// (ratelimit.MaxMatchValueLen), so that every reader that runs protovalidate
// alone (the rules client, the rules server's requests) refuses what the core
// refuses: an equality value was bounded in characters, 4096 of up to 4 bytes.
func TestSchemaBoundsMatchValuesInBytes(t *testing.T) {
	tests := []struct {
		name  string
		value *configv1.MatchValue
		want  string // the violated rule's id, "" when valid
	}{
		{"equality of MaxMatchValueLen bytes", &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: strings.Repeat("é", ratelimit.MaxMatchValueLen/2)}}, ""},
		{"equality of MaxMatchValueLen multi-byte characters", &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: strings.Repeat("é", ratelimit.MaxMatchValueLen)}}, "string.max_bytes"},
		{"equality one byte over", &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: strings.Repeat("v", ratelimit.MaxMatchValueLen+1)}}, "string.max_bytes"},
		{"regex of MaxRegexLen bytes", &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: strings.Repeat("é", ratelimit.MaxRegexLen/2)}}, ""},
		{"regex of MaxRegexLen multi-byte characters", &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: strings.Repeat("é", ratelimit.MaxRegexLen)}}, "string.max_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := protovalidate.Validate(tt.value)
			var ve *protovalidate.ValidationError
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("valid value refused: %v", err)
			case tt.want != "" && !errors.As(err, &ve):
				t.Fatalf("error %v, want a violation of %s", err, tt.want)
			case tt.want != "" && (len(ve.Violations) != 1 || ve.Violations[0].Proto.GetRuleId() != tt.want):
				t.Fatalf("violations %v, want one of %s", ve.Violations, tt.want)
			}
		})
	}
}

// A document names at most MaxLimiters limiters, as the rule store holds at
// most as many: available_limiters.yaml declaring more was accepted, and the
// service then failed to seed them. rate_limits.yaml is bounded alike (its
// limiters must be declared, so it can name no more than the list does).
func TestLimitersPerDocumentBounded(t *testing.T) {
	available := func(n int) string {
		var b strings.Builder
		b.WriteString("available_limiters:\n")
		for i := range n {
			fmt.Fprintf(&b, "  l%04d: {description: x}\n", i)
		}
		return b.String()
	}
	full, err := ParseAvailableLimiters("a.yaml", []byte(available(MaxLimiters)))
	if err != nil {
		t.Fatalf("MaxLimiters limiters: %v", err)
	}
	_, err = ParseAvailableLimiters("a.yaml", []byte(available(MaxLimiters+1)))
	if err == nil || !strings.Contains(err.Error(), "a.yaml:2:3: 1025 limiters, at most 1024 (config.MaxLimiters, docs/limits.md)") {
		t.Fatalf("MaxLimiters+1 limiters: %v", err)
	}
	var b strings.Builder
	b.WriteString("rate_limits:\n")
	for i := range MaxLimiters + 1 {
		fmt.Fprintf(&b, "  l%04d: []\n", i)
	}
	_, err = ParseRateLimits("r.yaml", []byte(b.String()), full)
	if err == nil || !strings.Contains(err.Error(), "1025 limiters, at most 1024") {
		t.Fatalf("rate_limits.yaml of MaxLimiters+1 limiters: %v", err)
	}
}

// A limiter declares at most MaxAvailableProperties properties and
// MaxAllowedSkipRules allowed skip rules; the error names the line of the
// first over the bound.
func TestSpecListsBounded(t *testing.T) {
	list := func(prefix string, n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return "[" + strings.Join(names, ", ") + "]"
	}
	doc := func(props, skips int) string {
		return "available_limiters:\n  l:\n    description: x\n    available_properties: " + list("p", props) +
			"\n    allowed_skip_rules: " + list("s", skips) + "\n"
	}
	if _, err := ParseAvailableLimiters("a.yaml", []byte(doc(MaxAvailableProperties, MaxAllowedSkipRules))); err != nil {
		t.Fatalf("at the bounds: %v", err)
	}
	for _, c := range []struct {
		name         string
		props, skips int
		want         string
	}{
		{"properties", MaxAvailableProperties + 1, 1, "a.yaml:4:"},
		{"skip rules", 1, MaxAllowedSkipRules + 1, "a.yaml:5:"},
	} {
		_, err := ParseAvailableLimiters("a.yaml", []byte(doc(c.props, c.skips)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "at most") || !strings.Contains(err.Error(), "docs/limits.md") {
			t.Errorf("%s over the bound: %v", c.name, err)
		}
	}
}

// An error quotes at most maxQuoted characters of each piece of the document
// (a name, a key, a value) and lists at most MaxListed names: a piece may be
// as large as the document, and through aliases each of the
// MaxReportedErrors problems quoted it again (0.5 MiB of YAML made an error
// of 99 MiB).
func TestErrorsQuoteTheDocumentInPart(t *testing.T) {
	const maxErrorBytes = 1024 // one problem, with its file, place, limiter, rule and path
	big := strings.Repeat("a", 100_000)
	cut := `"` + big[:maxQuoted] + `"...`
	available := mustAvailable(t, boundsAvailable)
	many := mustAvailable(t, "available_limiters:\n  api:\n    description: many\n    available_properties: ["+props(MaxAvailableProperties, "p%d")+"]\n")
	aliased := func(value, rule string) string { // 150 rules, each using the anchor
		var b strings.Builder
		b.WriteString("x: &big " + value + "\nrate_limits:\n  api:\n")
		for i := range 150 {
			fmt.Fprintf(&b, "    - {"+rule+"}\n", i)
		}
		return b.String()
	}
	// A long limiter name is repeated by every problem under it.
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{big: {}}}
	for i := range 150 {
		req.RateLimits[big].Rules = append(req.RateLimits[big].Rules, &configv1.Rule{Name: fmt.Sprintf("r%d", i), Action: configv1.Action_ACTION_LIMIT})
	}
	// A rule whose keys are explicit: an implicit key is at most 1024
	// characters.
	rule := func(keys ...string) string {
		return "rate_limits:\n  api:\n    - name: r\n" + strings.Join(keys, "")
	}
	tests := []struct {
		name  string
		parse func() error
		want  string // in one of the errors
	}{
		{"aliased rule name", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(aliased(big[:10_000], "name: *big, action: limit, limit: 1, period_s: %d")), available)
			return err
		}, "api/" + big[:maxQuoted] + "...: rule name " + cut + " must be 1 to 64 characters, each a-z, 0-9 or _"},
		{"aliased value of another type", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(aliased(big, "name: r%d, action: limit, limit: *big, period_s: 1")), available)
			return err
		}, "api/r7: limit must be a whole number, got the value " + cut},
		{"aliased enum", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(aliased(big, "name: r%d, action: *big")), available)
			return err
		}, "api/r7: action must be one of limit, log, skip, got the value " + cut},
		{"limiter name of a publish request", func() error {
			return ValidatePublishRulesRequest(req, available)
		}, big[:maxQuoted] + "...: limiter name " + cut + " must be 1 to 64 characters"},
		{"rule under a long limiter name", func() error {
			return ValidatePublishRulesRequest(req, available)
		}, big[:maxQuoted] + ".../r1: limit and log rules require limit and period_s"},
		{"unknown field", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(rule("      ? "+big+"\n      : 1\n")), available)
			return err
		}, "api/r: unknown field " + cut},
		{"repeated key", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(rule("      ? "+big+"\n      : 1\n", "      ? "+big+"\n      : 1\n")), available)
			return err
		}, "api/r: field " + cut + " is given twice"},
		{"match property", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(rule("      action: skip\n      match:\n        ? "+big+"\n        : x\n")), available)
			return err
		}, "api/r: match property " + cut + " must be 1 to 64 characters"},
		{"undeclared property of a limiter of many", func() error {
			_, err := ParseRateLimits("r.yaml", []byte("rate_limits:\n  api:\n    - {name: r, action: log, limit: 1, period_s: 1, characteristics: [zz]}\n"), many)
			return err
		}, `characteristic "zz" is not one of the limiter's available_properties (` + props(MaxListed, "p%d") + fmt.Sprintf(", ... (%d in all))", MaxAvailableProperties)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValidationError", err)
			}
			found := false
			for _, e := range ve.Errors {
				if n := len(e.Error()) + len(e.Path); n > maxErrorBytes {
					t.Fatalf("an error of %d bytes (%.200s...), want at most %d", n, e, maxErrorBytes)
				}
				found = found || strings.Contains(e.Error(), tt.want)
			}
			if !found {
				t.Errorf("no error says %.300q; got\n%.2000s", tt.want, err)
			}
		})
	}
}

// A map key longer than a name is refused and its value left unread: the
// path of every node under a key repeats the key, so a stored document of
// 130 KB, a 100 KB match key over 4,000 one_of values, allocated 1.8 GB to
// be refused, and a 1 MiB one would take every replica that reads it down.
func TestLongMapKeyIsNotWalked(t *testing.T) {
	big := strings.Repeat("a", 100_000)
	stored := `{"published_rules":{"rules":[{"name":"r","action":"skip","characteristics":[],"match":{"` + big +
		`":{"one_of":[` + props(4000, `"v%d"`) + `]}}}]}}`
	var yamlDoc strings.Builder // an explicit key: an implicit one is at most 1024 characters
	yamlDoc.WriteString("rate_limits:\n  ? " + big + "\n  :\n")
	for i := range 1000 {
		fmt.Fprintf(&yamlDoc, "    - {name: r%d, action: skip}\n", i)
	}
	available := mustAvailable(t, boundsAvailable)
	tests := []struct {
		name  string
		parse func() error
		want  string
	}{
		{"stored match key", func() error { _, err := UnmarshalLimiterRules([]byte(stored)); return err },
			`1:88: r: match property "` + big[:maxQuoted] + `"... must be 1 to 64 characters, each a-z, 0-9 or _`},
		{"limiter name", func() error {
			_, err := ParseRateLimits("r.yaml", []byte(yamlDoc.String()), available)
			return err
		}, `r.yaml:2:5: ` + big[:maxQuoted] + `...: limiter name "` + big[:maxQuoted] + `"... must be 1 to 64 characters, each a-z, 0-9 or _`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := tt.parse()
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("refusing a document of 0.1 MiB allocated %d MiB", alloc>>20)
			}
			assertErrors(t, err, []string{tt.want})
		})
	}
}

// Every map of the schema is keyed by names (^[a-z0-9_]{1,64}$), which the
// walk relies on to refuse a longer key without reading its value.
func TestMapKeysAreNames(t *testing.T) {
	msgs := configv1.File_ratelimit_config_v1_config_proto.Messages()
	maps := 0
	for i := range msgs.Len() {
		fields := msgs.Get(i).Fields()
		for j := range fields.Len() {
			fd := fields.Get(j)
			if !fd.IsMap() {
				continue
			}
			maps++
			rules, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
			if p := rules.GetMap().GetKeys().GetString().GetPattern(); p != "^[a-z0-9_]{1,64}$" {
				t.Errorf("%s: keys are %q, want names", fd.FullName(), p)
			}
		}
	}
	if maps == 0 {
		t.Fatal("no map field found in the schema")
	}
}

// A matched value that is not UTF-8 (a rule built in code) is refused
// before it is written: the stored JSON holds UTF-8 only, so the writer put
// U+FFFD, three bytes, for each other byte, and every reader then refused
// the document (2,000 such bytes are 6,000, over MaxMatchValueLen) or
// matched other requests than the rule published.
func TestMatchValuesAreUTF8(t *testing.T) {
	limit, period := uint32(1), uint32(60)
	rule := func(v *configv1.MatchValue) *configv1.Rule {
		return &configv1.Rule{Name: "r", Action: configv1.Action_ACTION_LIMIT, Limit: &limit, PeriodS: &period,
			Match: map[string]*configv1.MatchValue{"p": v}}
	}
	tests := []struct {
		name string
		v    *configv1.MatchValue
	}{
		{"equality", &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: "a\xffb"}}},
		{"long equality", &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: strings.Repeat("\xff", 2000)}}},
		{"one_of value", &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: []string{"a", "\xc3"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const want = `r: match "p": a value is not UTF-8 text`
			doc := &configv1.LimiterRules{PublishedRules: &configv1.RuleList{Rules: []*configv1.Rule{rule(tt.v)}}}
			b, err := MarshalLimiterRules(doc)
			if err == nil {
				_, readErr := UnmarshalLimiterRules(b)
				t.Fatalf("MarshalLimiterRules wrote %.200s, read back with error %v; want it refused", b, readErr)
			}
			assertErrors(t, err, []string{want})
			req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": doc.GetPublishedRules()}}
			assertErrors(t, ValidatePublishRulesRequest(req, nil), []string{"api/" + want})
		})
	}
}

// A stored document that is not UTF-8 (written by hand: the writers write
// UTF-8 only) is refused at its first bad byte, as a YAML file is. It was
// read with each bad byte as U+FFFD, so a rule matched other values than
// the bytes stored, which the write path refuses.
func TestStoredDocumentIsUTF8(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"match value", "{\"published_rules\":{\"rules\":[{\"name\":\"r\",\"limit\":1,\"period_s\":60,\"action\":\"limit\",\"characteristics\":[],\"match\":{\"p\":\"a\xffb\"}}]}}",
			"1:119: invalid JSON: invalid UTF-8 (byte 0xff; the document must be UTF-8 text)"},
		{"one_of value, invalid JSON too", "{\"published_rules\":{\"rules\":[{\"name\":\"r\",\n\"match\":{\"p\":{\"one_of\":[\"\xc3\"]}}",
			"2:26: invalid JSON: invalid UTF-8 (byte 0xc3; the document must be UTF-8 text)"},
		{"description", "{\"published_rules\":{\"rules\":[{\"name\":\"r\",\"description\":\"caf\xe9\",\"limit\":1,\"period_s\":60,\"action\":\"limit\",\"characteristics\":[],\"match\":{}}]}}",
			"1:60: invalid JSON: invalid UTF-8 (byte 0xe9; the document must be UTF-8 text)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := UnmarshalLimiterRules([]byte(tt.doc))
			assertErrors(t, err, []string{tt.want})
		})
	}
}

// A document expands to at most maxText bytes of text, aliases included: an
// alias of a long value is one node, so the node budget let a valid
// rate_limits.yaml of 116 KB give 320 MiB of stored documents (which no
// store takes, and every seed built again). A document without aliases
// whose text is over 1 MiB is still read.
func TestExpandedTextIsBounded(t *testing.T) {
	var av strings.Builder
	av.WriteString("available_limiters:\n")
	for l := range 10 {
		fmt.Fprintf(&av, "  l%d:\n    description: x\n    available_properties: [%s]\n", l, props(32, "p%d"))
	}
	available := mustAvailable(t, av.String())
	value := strings.Repeat("v", ratelimit.MaxMatchValueLen)
	aliases := make([]string, 31)
	for i := range aliases {
		aliases[i] = fmt.Sprintf("p%d: *v", i+1)
	}
	var aliased strings.Builder // 2,560 rules, each matching 32 values of 4096 bytes
	aliased.WriteString("rate_limits:\n")
	for l := range 10 {
		fmt.Fprintf(&aliased, "  l%d:\n", l)
		for i := range ratelimit.MaxRulesPerTier {
			if l == 0 && i == 0 {
				fmt.Fprintf(&aliased, "    - {name: r0, action: skip, match: &m {p0: &v %s, %s}}\n", value, strings.Join(aliases, ", "))
				continue
			}
			fmt.Fprintf(&aliased, "    - {name: r%d, action: skip, match: *m}\n", i)
		}
	}
	// 1.2 MiB of text in a document of 0.8 MiB: "\L" (U+2028) is three
	// bytes of text.
	escapes := `"` + strings.Repeat(`\L`, 800) + `"`
	unaliased := rulesYAML(ratelimit.MaxRulesPerTier, ", description: "+escapes+", match: {p0: "+escapes+"}")
	available = mustAvailable(t, av.String()+"  api:\n    description: x\n    available_properties: [p0]\n")
	tests := []struct {
		name, doc string
		want      string // "" when valid
	}{
		{"aliased values", aliased.String(), "r.yaml:3:47: the document is too large: over 2097152 bytes of text once aliases are expanded"},
		{"escapes without aliases", unaliased, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.doc) > MaxFileSize {
				t.Fatalf("the document is %d bytes, over MaxFileSize", len(tt.doc))
			}
			// A publish payload: the file's tiers, over 1 MiB as a stored
			// document, would be refused for that.
			_, err := ParsePublishRulesRequest("r.yaml", []byte(tt.doc), available)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("a valid document was refused: %.300v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %.300v, want %q", err, tt.want)
			}
		})
	}
}

// The tiers a service seeds from its two files make one rule store document,
// which must be within MaxFileSize as each file is: JSON writes more than
// YAML, and a rate_limits.yaml of 0.95 MiB, which ratekit validate and the
// service accepted, gave a document of 1.1 MiB that no store takes (the seed
// failed at every start and retry) and no reader reads.
func TestSeededDocumentWithinBounds(t *testing.T) {
	rules := func(indent string, values int) string { // MaxRulesPerTier rules, one a line
		var b strings.Builder
		for i := range ratelimit.MaxRulesPerTier {
			fmt.Fprintf(&b, "%s- {name: r%d, action: limit, limit: 1, period_s: 60, match: {p0: {one_of: [%s]}}}\n", indent, i, props(values, "v%d"))
		}
		return b.String()
	}
	const over, within = 640, 400 // one_of values per rule
	// The premise: the file is within MaxFileSize, its document is not.
	req, err := ParsePublishRulesRequest("p.yaml", []byte("rate_limits:\n  api:\n"+rules("    ", over)), nil)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := MarshalLimiterRules(&configv1.LimiterRules{FileRules: req.GetRateLimits()["api"]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UnmarshalLimiterRules(stored); err == nil || len(stored) <= MaxFileSize {
		t.Fatalf("the document of %d bytes was read: the test needs one over MaxFileSize", len(stored))
	}
	tests := []struct {
		name   string
		values int
		want   string // "" when valid
	}{
		{"over", over, "the rule store's document of this limiter"},
		{"within", within, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := "rate_limits:\n  api:\n" + rules("    ", tt.values)
			defaults := "available_limiters:\n  api:\n    description: x\n    available_properties: [p0]\n    default_rules:\n" + rules("      ", tt.values)
			if len(file) > MaxFileSize || len(defaults) > MaxFileSize {
				t.Fatalf("the files are %d and %d bytes, over MaxFileSize", len(file), len(defaults))
			}
			_, availErr := ParseAvailableLimiters("a.yaml", []byte(defaults))
			_, fileErr := ParseRateLimits("r.yaml", []byte(file), mustAvailable(t, boundsAvailable))
			for what, tc := range map[string]struct {
				err  error
				want string
			}{
				"available_limiters.yaml": {availErr, "a.yaml:2:3: api: " + tt.want + " (its default rules) would be "},
				"rate_limits.yaml":        {fileErr, "r.yaml:2:3: api: " + tt.want + " (its rules here and its default rules) would be "},
			} {
				switch {
				case tt.want == "" && tc.err != nil:
					t.Errorf("%s: %.300v", what, tc.err)
				case tt.want != "" && (tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want)):
					t.Errorf("%s: got %.300v, want %q...", what, tc.err, tc.want)
				}
			}
		})
	}
}

// A stored document nested deeper than the YAML files may be (10,000, as
// json.Valid too) is refused at that depth. The reader of invalid JSON
// recursed once per level: 1 MiB of "[" took 270 MB of stack (a fatal stack
// overflow where a goroutine's stack is limited to 250 MB) and 210 MB of heap.
func TestStoredDocumentNestingIsBounded(t *testing.T) {
	tests := []struct {
		name, doc string
	}{
		{"1 MiB of [", strings.Repeat("[", MaxFileSize)},
		{"well formed, 20,000 deep", `{"published_rules":{"rules":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			var err error
			done := make(chan struct{})
			runtime.GC()
			runtime.ReadMemStats(&before)
			go func() { // a fresh stack, measured before it returns
				defer close(done)
				_, err = UnmarshalLimiterRules([]byte(tt.doc))
				runtime.ReadMemStats(&after)
			}()
			<-done
			if err == nil || !strings.Contains(err.Error(), "exceeded max depth of 10000") {
				t.Errorf("UnmarshalLimiterRules: %v", err)
			}
			if stack := int64(after.StackInuse) - int64(before.StackInuse); stack > 32<<20 {
				t.Errorf("refusing it took %d MiB more stack", stack>>20)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
				t.Errorf("refusing it allocated %d MiB", alloc>>20)
			}
		})
	}
}
