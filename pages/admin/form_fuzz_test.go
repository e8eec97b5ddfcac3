package admin

import (
	"bytes"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const fuzzAvailable = `available_limiters:
  api:
    description: the API
    available_properties: [ip, user, path]
`

// FuzzEditUnchanged: a valid published rule opened in the editor and saved
// as it is shown is published unchanged. The form goes through the page's
// own template and a browser's rules for text controls (see submit), so a
// value the page cannot carry, such as a description's line breaks, shows
// up as a changed rule.
func FuzzEditUnchanged(f *testing.F) {
	f.Add("per_user", "a rule", "x", "^/api/", "a\x00b", uint8(0), uint32(10), uint32(60))
	f.Add("per_ip", "first line\nsecond line", "a\nb", "^a\n", "10.0.0.1", uint8(1), uint32(1), uint32(1))
	f.Add("skip_it", "\nstarts with a line break", "\n", "\n\n", "x", uint8(2), uint32(0), uint32(0))
	f.Add("x", "a&b", "<textarea>&amp;", "</textarea>", "y\x00z", uint8(0), uint32(5), uint32(5))
	f.Add("path_then_ip", "", "x", "y", "z", uint8(4), uint32(5), uint32(5))
	f.Add("odd_values", "", "x", "y", "a\nb\x00 padded \x00\x00\"quoted\"\x00cr\rlf\x00\u00a0nbsp\x00back\\slash", uint8(0), uint32(5), uint32(5))
	available, err := config.ParseAvailableLimiters("available_limiters.yaml", []byte(fuzzAvailable))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, description, equality, regex, oneOf string, action uint8, limit, period uint32) {
		r := &configv1.Rule{Name: name, Description: description, Match: map[string]*configv1.MatchValue{
			"ip":   {Kind: &configv1.MatchValue_Equality{Equality: equality}},
			"user": {Kind: &configv1.MatchValue_Regex{Regex: regex}},
		}}
		// The one_of box writes a value a plain line cannot hold as a Go
		// string literal, so its values may hold anything (NUL separates
		// them here).
		vals := strings.Split(oneOf, "\x00")
		r.Match["path"] = &configv1.MatchValue{Kind: &configv1.MatchValue_OneOf{OneOf: &configv1.StringSet{Values: vals}}}
		if action&4 != 0 { // against the properties' order (ip, user, path): a rule's keys follow its order
			r.Characteristics = []string{"path", "ip"}
		}
		switch action % 3 {
		case 0:
			r.Action, r.Limit, r.PeriodS = configv1.Action_ACTION_LIMIT, &limit, &period
		case 1:
			r.Action, r.Limit, r.PeriodS = configv1.Action_ACTION_LOG, &limit, &period
		case 2:
			r.Action = configv1.Action_ACTION_SKIP
		}
		req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{"api": {Rules: []*configv1.Rule{r}}}}
		if config.ValidatePublishRulesRequest(req, available) != nil {
			return // only a valid rule can be published, and so edited
		}
		// HTML reads CR as a line break and NUL as U+FFFD: no text box
		// carries them, and the page refuses to edit such a rule.
		if strings.ContainsAny(description+equality+regex, "\r\x00") {
			if len(unshowable(r)) == 0 {
				t.Fatalf("the editor offers a rule it cannot carry: %v", r)
			}
			return
		}
		lv := &limiterView{Name: "api", Declared: true, Properties: []string{"ip", "user", "path"},
			published: &configv1.RuleList{Rules: []*configv1.Rule{r}}}
		v := submit(t, pageData{Session: session{CanWrite: true}, Limiter: lv, Form: formFromRule(r, "v1", true)})
		form := parseForm(v, lv)
		got := form.toProto()
		if form.hasErrors() {
			t.Fatalf("the editor refuses the published rule it showed: %v\nrule %v\nform %v", form.Errors, r, v)
		}
		if !proto.Equal(got, r) {
			t.Fatalf("saving the rule as shown changes it:\nwas %v\nnow %v\nform %v", r, got, v)
		}
	})
}

var (
	textareaRE = regexp.MustCompile(`(?s)<textarea[^>]* name="([^"]+)"[^>]*>(.*?)</textarea>`)
	inputRE    = regexp.MustCompile(`<input type="(?:text|number|hidden)"[^>]* name="([^"]+)" value="([^"]*)"`)
	selectRE   = regexp.MustCompile(`(?s)<select[^>]* name="([^"]+)"[^>]*>(.*?)</select>`)
	selectedRE = regexp.MustCompile(`<option value="([^"]*)" selected>`)
	optionRE   = regexp.MustCompile(`<option value="([^"]*)"`)
	checkedRE  = regexp.MustCompile(`<input type="checkbox"[^>]* name="([^"]+)"(?: value="([^"]*)")? checked>`)
)

// submit renders the editor of d with the page's template and returns what a
// browser sends when it is submitted untouched. It follows the HTML
// standard: the parser reads CR LF and CR as LF and drops one LF right after
// a <textarea> start tag; a text input's value loses its line breaks; a form
// is sent with every line break of a textarea's value as CR LF.
func submit(t *testing.T, d pageData) url.Values {
	t.Helper()
	var buf bytes.Buffer
	if err := page.Execute(&buf, d); err != nil {
		t.Fatal(err)
	}
	doc := buf.String()
	i := strings.Index(doc, `id="rule-form"`)
	if i < 0 {
		t.Fatal("no rule form on the page")
	}
	doc = doc[i:]
	doc = doc[:strings.Index(doc, "</form>")]
	v := url.Values{}
	for _, m := range textareaRE.FindAllStringSubmatch(doc, -1) {
		val := html.UnescapeString(strings.TrimPrefix(lf(m[2]), "\n"))
		v.Add(m[1], strings.ReplaceAll(lf(val), "\n", "\r\n"))
	}
	for _, m := range inputRE.FindAllStringSubmatch(doc, -1) {
		v.Add(m[1], strings.NewReplacer("\r", "", "\n", "").Replace(html.UnescapeString(m[2])))
	}
	for _, m := range selectRE.FindAllStringSubmatch(doc, -1) {
		if s := selectedRE.FindStringSubmatch(m[2]); s != nil {
			v.Add(m[1], html.UnescapeString(s[1]))
		} else if s := optionRE.FindStringSubmatch(m[2]); s != nil {
			v.Add(m[1], html.UnescapeString(s[1])) // none selected: the first option
		}
	}
	for _, m := range checkedRE.FindAllStringSubmatch(doc, -1) {
		val := html.UnescapeString(m[2])
		if m[2] == "" {
			val = "on"
		}
		v.Add(m[1], val)
	}
	return v
}

// lf normalises line breaks as HTML does: CR LF and CR become LF.
func lf(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}
