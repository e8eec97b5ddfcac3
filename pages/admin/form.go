package admin

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// Match kinds of the form, as the config files spell them.
const (
	matchNone     = ""
	matchEquality = "equality"
	matchRegex    = "regex"
	matchOneOf    = "one_of"
)

// ruleForm is the rule editor: the values typed (kept as typed, so an
// invalid form comes back as it was sent) and the problems per field. The
// field keys are the schema's: name, action, limit, period_s, ban_for_s,
// algorithm, burst, count_distinct, characteristics, description, match.PROPERTY; "" is the
// rule as a whole.
type ruleForm struct {
	Edit        bool   // editing a published rule: the name is fixed
	Version     string // the document version the form was read at
	Name        string
	Description string
	Action      string
	Limit       string
	Period      string
	Ban         string
	Algorithm   string // "" (fixed window), sliding_window or token_bucket
	Burst       string
	Distinct    string
	Missing     bool // count_missing
	Chars       []string
	Match       map[string]matchField
	Errors      map[string][]string
}

type matchField struct{ Kind, Value string }

func newForm(version string) *ruleForm {
	return &ruleForm{Version: version, Action: "limit", Match: map[string]matchField{}, Errors: map[string][]string{}}
}

func (f *ruleForm) hasErrors() bool { return len(f.Errors) > 0 }

// errorSummary is the form's errors on one line, field by field in order
// (the form's own, field "", first), for the audit line of a refused save.
func (f *ruleForm) errorSummary() string {
	var parts []string
	for _, field := range slices.Sorted(maps.Keys(f.Errors)) {
		for _, e := range f.Errors[field] {
			if field != "" {
				e = field + ": " + e
			}
			parts = append(parts, e)
		}
	}
	return strings.Join(parts, "; ")
}

func (f *ruleForm) addError(field, format string, args ...any) {
	f.Errors[field] = append(f.Errors[field], fmt.Sprintf(format, args...))
}

// formFromRule fills the editor with a stored rule.
func formFromRule(r *configv1.Rule, version string, edit bool) *ruleForm {
	f := newForm(version)
	f.Edit, f.Name, f.Description = edit, r.GetName(), r.GetDescription()
	f.Action = strings.ToLower(strings.TrimPrefix(r.GetAction().String(), "ACTION_"))
	opt := func(p *uint32) string {
		if p == nil {
			return ""
		}
		return strconv.FormatUint(uint64(*p), 10)
	}
	f.Limit, f.Period, f.Ban = opt(r.Limit), opt(r.PeriodS), opt(r.BanForS)
	if a := r.GetAlgorithm(); a != configv1.Algorithm_ALGORITHM_UNSPECIFIED {
		f.Algorithm = strings.ToLower(strings.TrimPrefix(a.String(), "ALGORITHM_"))
	}
	f.Burst = opt(r.Burst)
	f.Distinct, f.Chars = r.GetCountDistinct(), slices.Clone(r.GetCharacteristics())
	f.Missing = r.GetCountMissing()
	for k, m := range r.GetMatch() {
		switch v := m.GetKind().(type) {
		case *configv1.MatchValue_Equality:
			f.Match[k] = matchField{matchEquality, v.Equality}
		case *configv1.MatchValue_Regex:
			f.Match[k] = matchField{matchRegex, v.Regex}
		case *configv1.MatchValue_OneOf:
			f.Match[k] = matchField{matchOneOf, oneOfText(v.OneOf.GetValues())}
		}
	}
	return f
}

// unshowable names the fields of r that the editor cannot carry: HTML reads
// a CR as a line break and a NUL as U+FFFD, so a text box holding one would
// save a changed value. one_of values are exempt: their box quotes them
// (oneOfText).
func unshowable(r *configv1.Rule) []string {
	bad := func(s string) bool { return strings.ContainsAny(s, "\r\x00") }
	var out []string
	if bad(r.GetDescription()) {
		out = append(out, "description")
	}
	keys := slices.Sorted(maps.Keys(r.GetMatch()))
	for _, k := range keys {
		if m := r.GetMatch()[k]; bad(m.GetEquality()) || bad(m.GetRegex()) {
			out = append(out, "match "+k)
		}
	}
	return out
}

// formBytes is about what a browser sends for the editor f of limiter lv,
// untouched: its text values percent-encoded with their line breaks as
// CR LF, every property's match row, and formOverhead for the other
// fields. The edit link refuses a rule whose form passes MaxBodyBytes.
func formBytes(f *ruleForm, lv *limiterView) int {
	enc := func(s string) int { return len(url.QueryEscape(strings.ReplaceAll(s, "\n", "\r\n"))) }
	n := formOverhead + len("&description=") + enc(f.Description)
	for _, p := range lv.Properties {
		m := f.Match[p]
		n += len("&match_kind.=&match_value.=&characteristics=") + 3*len(p) + len(m.Kind) + enc(m.Value)
	}
	return n
}

// formOverhead bounds the editor's fields but the description and the match
// rows: the token, the limiter, the version, the name, the numbers, the
// selects and their names.
const formOverhead = 1024

// parseForm reads a submitted editor. Match rows exist only for the
// limiter's available properties, so the form's size is the schema's.
func parseForm(v url.Values, lv *limiterView) *ruleForm {
	f := newForm(v.Get("version"))
	f.Edit = v.Get("mode") == "edit"
	f.Name = strings.TrimSpace(v.Get("name"))
	f.Description = textarea(v, "description")
	f.Action = v.Get("action")
	f.Limit, f.Period, f.Ban = strings.TrimSpace(v.Get("limit")), strings.TrimSpace(v.Get("period_s")), strings.TrimSpace(v.Get("ban_for_s"))
	f.Algorithm, f.Burst = v.Get("algorithm"), strings.TrimSpace(v.Get("burst"))
	f.Distinct = v.Get("count_distinct")
	f.Missing = v.Get("count_missing") == "on"
	var unknown []string // each once: a form may repeat a value thousands of times
	for _, c := range v["characteristics"] {
		if !slices.Contains(lv.Properties, c) {
			if !slices.Contains(unknown, c) && len(unknown) <= config.MaxListed {
				unknown = append(unknown, c)
			}
			continue
		}
		f.Chars = append(f.Chars, c)
	}
	if len(unknown) > 0 {
		quoted := make([]string, len(unknown))
		for i, c := range unknown {
			quoted[i] = fmt.Sprintf("%.80q", c)
		}
		if len(quoted) > config.MaxListed {
			quoted = append(quoted[:config.MaxListed], "...")
		}
		f.addError("characteristics", "%s: not one of the limiter's available properties (%s)", strings.Join(quoted, ", "), config.ListNames(lv.Properties))
	}
	for _, p := range lv.Properties {
		kind, val := v.Get("match_kind."+p), textarea(v, "match_value."+p)
		switch kind {
		case matchNone:
			if strings.TrimSpace(val) != "" {
				f.addError("match."+p, "choose how %s matches (equals, regex or one of) or clear the value", p)
			}
		case matchEquality, matchRegex, matchOneOf:
		default:
			f.addError("match."+p, "unknown match kind %.80q", kind)
		}
		if kind != matchNone || val != "" {
			f.Match[p] = matchField{kind, val}
		}
	}
	if f.Edit && lv.publishedProto(f.Name) == nil {
		f.addError("name", "limiter %s has no published rule %.80q to edit any more (deleted meanwhile?)", lv.Name, f.Name)
	}
	if !f.Edit && lv.publishedProto(f.Name) != nil {
		f.addError("name", "a published rule %.80q already exists: edit it instead, or choose another name", f.Name)
	}
	return f
}

// textarea returns the value of a <textarea>, whose line breaks a browser
// sends as CR LF (HTML's form submission): the LF that the page showed, and
// that a rule holds.
func textarea(v url.Values, name string) string {
	return strings.ReplaceAll(v.Get(name), "\r\n", "\n")
}

// toProto converts the form into a schema rule; problems a conversion can
// find (a number that is not one) become field errors.
func (f *ruleForm) toProto() *configv1.Rule {
	r := &configv1.Rule{Name: f.Name, Description: f.Description, CountDistinct: f.Distinct,
		Characteristics: slices.Clone(f.Chars), CountMissing: f.Missing}
	switch f.Action {
	case "limit":
		r.Action = configv1.Action_ACTION_LIMIT
	case "log":
		r.Action = configv1.Action_ACTION_LOG
	case "skip":
		r.Action = configv1.Action_ACTION_SKIP
	default:
		f.addError("action", "choose limit, log or skip")
	}
	num := func(field, s string) *uint32 {
		if s == "" {
			return nil
		}
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			f.addError(field, "%.80q is not a whole number from 1 to %d", s, uint32(1<<32-1))
			return nil
		}
		v := uint32(n)
		return &v
	}
	r.Limit, r.PeriodS, r.BanForS = num("limit", f.Limit), num("period_s", f.Period), num("ban_for_s", f.Ban)
	r.Burst = num("burst", f.Burst)
	switch f.Algorithm {
	case "", "fixed_window":
		// The default, stored as unset: a rule means what it meant.
	case "sliding_window":
		r.Algorithm = configv1.Algorithm_ALGORITHM_SLIDING_WINDOW
	case "token_bucket":
		r.Algorithm = configv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	default:
		f.addError("algorithm", "choose fixed_window, sliding_window or token_bucket")
	}
	if len(f.Match) > 0 {
		r.Match = map[string]*configv1.MatchValue{}
	}
	for k, m := range f.Match {
		switch m.Kind {
		case matchEquality:
			r.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_Equality{Equality: m.Value}}
		case matchRegex:
			r.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_Regex{Regex: m.Value}}
		case matchOneOf:
			vals, err := parseOneOf(m.Value)
			if err != nil {
				f.addError("match."+k, "%v", err)
			}
			r.Match[k] = &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: vals}}}
		}
	}
	return r
}

// oneOfText writes one_of values for the editor, one per line. A value that
// a plain line cannot hold (empty, blanks at either end, a line break or
// another character that is not printable, which HTML may change) or that
// starts with a double quote is written as a Go string literal, so the text
// reads back (parseOneOf) as the same values and shows each unambiguously.
func oneOfText(vals []string) string {
	lines := make([]string, len(vals))
	for i, v := range vals {
		lines[i] = shown(v)
	}
	return strings.Join(lines, "\n")
}

// shown is v as the page writes a value in text: v itself, or v as a Go
// string literal when a reader could not tell it from another value (empty,
// blanks at either end, a character that is not printable, such as a line
// break, a bidi override or a zero-width space) or when it starts with a
// double quote, as a literal does.
func shown(v string) string {
	if v == "" || v[0] == '"' || strings.TrimSpace(v) != v || !utf8.ValidString(v) ||
		strings.ContainsFunc(v, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(v)
	}
	return v
}

// parseOneOf reads the one_of box: one value per line, blanks around it
// trimmed, empty lines skipped; a line starting with a double quote is a Go
// string literal ("a\nb", " padded ", "").
func parseOneOf(text string) ([]string, error) {
	var vals []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line[0] == '"':
			v, err := strconv.Unquote(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %.80s is not a quoted value: a line starting with \" is a Go string literal, such as \"a\\nb\" or \" padded \"", i+1, line)
			}
			vals = append(vals, v)
		default:
			vals = append(vals, line)
		}
	}
	return vals, nil
}

// check runs the checks a file gets (protovalidate, the limiter's
// available properties, the skip guardrail), then the merged list's (the
// rule among the file and default tiers), and files every violation under
// its field.
func (f *ruleForm) check(lv *limiterView, rule *configv1.Rule, available *config.AvailableLimiters) {
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{lv.Name: {Rules: []*configv1.Rule{rule}}}}
	if err := config.ValidatePublishRulesRequest(req, available); err != nil {
		var ve *config.ValidationError
		if !errors.As(err, &ve) {
			f.addError("", "%v", err)
			return
		}
		for _, e := range ve.Errors {
			f.Errors[fieldOf(e)] = append(f.Errors[fieldOf(e)], e.Message)
		}
		return
	}
	core, err := config.RuleFromProto(rule)
	if err != nil {
		f.addError("", "%v", err)
		return
	}
	published := slices.Clone(lv.Tiers.Published)
	if i := slices.IndexFunc(published, func(r ratelimit.Rule) bool { return r.Name == core.Name }); i >= 0 {
		published[i] = core
	} else {
		published = append(published, core)
	}
	with := lv.Tiers
	with.Published = published
	if err := with.CheckBounds(); err != nil {
		f.addError("", "%v (docs/limits.md): delete a published rule first", err)
		return
	}
	if _, err := ratelimit.CompileRules("", with.Merged()); err != nil {
		f.addError("", "the limiter's rules with this one are invalid: %v", err)
	}
}

// fieldOf files a validation error under the form field it concerns: the
// first step of its path inside the rule, or, for a rule-level (CEL) rule,
// the field its message names.
func fieldOf(e *config.Error) string {
	at := e.Path
	if i := strings.Index(at, ".rules[0]"); i >= 0 {
		at = at[i+len(".rules[0]"):]
	}
	at = strings.TrimPrefix(at, ".")
	if at == "" {
		switch {
		case strings.Contains(e.Message, "require limit and period_s"):
			return "limit"
		case strings.HasPrefix(e.Message, "ban_for_s"):
			return "ban_for_s"
		case strings.HasPrefix(e.Message, "count_distinct"):
			return "count_distinct"
		case strings.HasPrefix(e.Message, "count_missing"):
			return "count_missing"
		case strings.HasPrefix(e.Message, "algorithm"):
			return "algorithm"
		case strings.HasPrefix(e.Message, "burst"):
			return "burst"
		}
		return ""
	}
	if strings.HasPrefix(at, "match[") {
		if k, err := strconv.Unquote(strings.SplitN(at[len("match["):], "]", 2)[0]); err == nil {
			return "match." + k
		}
		return "match"
	}
	return strings.FieldsFunc(at, func(r rune) bool { return r == '.' || r == '[' })[0]
}

// identifierField is one property input of the explain and clear forms.
type identifierField struct{ Property, Value string }

func identifierFields(props []string, v url.Values) []identifierField {
	out := make([]identifierField, len(props))
	for i, p := range props {
		out[i] = identifierField{p, v.Get("id." + p)}
	}
	return out
}

// identifierFrom reads the identifier of the explain and clear forms: one
// value per available property (empty: absent), each bounded.
func identifierFrom(v url.Values, props []string) (ratelimit.Identifier, []string) {
	id := ratelimit.Identifier{}
	var errs []string
	for _, p := range props {
		val := v.Get("id." + p)
		if val == "" {
			continue
		}
		if len(val) > MaxIdentifierValue {
			errs = append(errs, fmt.Sprintf("%s: the value has %d bytes, at most %d are accepted", p, len(val), MaxIdentifierValue))
			continue
		}
		id[p] = val
	}
	return id, errs
}
