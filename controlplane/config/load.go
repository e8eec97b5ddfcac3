package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"

	"google.golang.org/protobuf/proto"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/suggest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// MaxFileSize bounds the configuration files read by the Load functions, and
// every document the Parse and Unmarshal functions accept: the core's
// MaxDocumentBytes (docs/limits.md). A larger one is refused before it is
// read whole or parsed.
const MaxFileSize = ratelimit.MaxDocumentBytes

// AvailableLimiters is a valid available_limiters.yaml: the contract of which
// limiters exist, their properties and default rules, shipped with the
// application (docs/design.md#configuration-files).
type AvailableLimiters struct {
	File  string // as given to Load or Parse
	Proto *configv1.AvailableLimiters
	doc   *doc
}

// RateLimits is a valid rate_limits.yaml, the operators' rules that override
// or add to the defaults, checked against an AvailableLimiters.
type RateLimits struct {
	File  string
	Proto *configv1.RateLimits
	doc   *doc
}

// ParseAvailableLimiters reads available_limiters.yaml from data. file names
// the source in errors. An invalid document gives a *ValidationError with
// its problems (the first MaxReportedErrors); a valid one is returned whole.
func ParseAvailableLimiters(file string, data []byte) (*AvailableLimiters, error) {
	if err := conflictMarkers(file, data); err != nil {
		return nil, err
	}
	d := newDoc(file)
	msg := &configv1.AvailableLimiters{}
	if d.decode(data, msg, parseYAML) {
		d.validate(msg)
		d.checkLimiterCount("available_limiters", len(msg.GetAvailableLimiters()))
		for _, name := range sortedKeys(msg.GetAvailableLimiters()) {
			spec := msg.GetAvailableLimiters()[name]
			d.checkSpecLists(path{}.field("available_limiters").key(name), spec)
			at := path{}.field("available_limiters").key(name).field("default_rules")
			rules := make([]*configv1.Rule, len(spec.GetDefaultRules()))
			for i, r := range spec.GetDefaultRules() {
				rules[i] = DefaultRuleToRule(r)
			}
			d.checkRules(spec, at, rules)
		}
	}
	if err := d.result(msg); err != nil {
		return nil, err
	}
	a := &AvailableLimiters{File: file, Proto: msg, doc: d}
	for _, name := range a.Names() {
		d.checkStored(path{}.field("available_limiters").key(name), nil, a.defaultRules(name))
	}
	if err := d.result(msg); err != nil {
		return nil, err
	}
	return a, nil
}

// defaultRules returns a declared limiter's default rules in the Rule shape.
func (a *AvailableLimiters) defaultRules(limiter string) *configv1.RuleList {
	l := &configv1.RuleList{}
	for _, r := range a.Spec(limiter).GetDefaultRules() {
		l.Rules = append(l.Rules, DefaultRuleToRule(r))
	}
	return l
}

// checkStored refuses, at the limiter at, tiers from the files that a
// service would seed as a rule store document over MaxFileSize: no store
// takes it (the seed fails at every start and retry) and no reader reads it,
// though each file is within its bounds (JSON writes more than YAML: quotes,
// the fields always written). The tiers must be valid.
func (d *doc) checkStored(at path, file, defaults *configv1.RuleList) {
	if n := len(encodeLimiterRules(&configv1.LimiterRules{FileRules: file, DefaultRules: defaults})); n > MaxFileSize {
		what := "its default rules"
		if file != nil {
			what = "its rules here and its default rules"
		}
		d.check(at, true, "the rule store's document of this limiter (%s) would be %d bytes, at most %d (docs/limits.md)", what, n, MaxFileSize)
	}
}

// LoadAvailableLimiters reads and validates the file at path. The file is
// required: a missing file is an error (unlike rate_limits.yaml).
func LoadAvailableLimiters(path string) (*AvailableLimiters, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("load available limiters: %w", err)
	}
	return ParseAvailableLimiters(path, data)
}

// ParseRateLimits reads rate_limits.yaml from data and checks it against
// available (required): limiters must be declared there, and rules may only
// use their limiter's available_properties and allowed skip rules.
func ParseRateLimits(file string, data []byte, available *AvailableLimiters) (*RateLimits, error) {
	if available == nil {
		return nil, errors.New("config: ParseRateLimits needs the available limiters to check against")
	}
	msg := &configv1.RateLimits{}
	d, err := parseRuleMap(file, data, msg, msg.GetRateLimits, available)
	if err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(msg.GetRateLimits()) {
		d.checkStored(path{}.field("rate_limits").key(name), msg.GetRateLimits()[name], available.defaultRules(name))
	}
	if err := d.result(msg); err != nil {
		return nil, err
	}
	return &RateLimits{File: file, Proto: msg, doc: d}, nil
}

// LoadRateLimits reads and checks the file at path. The file is optional
// (a deployment need not have one): when it does not exist the result is empty and the
// error nil. An invalid file is an error and nothing of it is applied: the
// caller keeps its defaults or its last good rules, and logs the error.
func LoadRateLimits(path string, available *AvailableLimiters) (*RateLimits, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &RateLimits{File: path, Proto: &configv1.RateLimits{}, doc: newDoc(path)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load rate limits: %w", err)
	}
	return ParseRateLimits(path, data, available)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadBounded(path, f)
}

// ReadBounded reads a configuration document of at most MaxFileSize bytes
// from f (opened from path, which names it in errors). A regular file whose
// size is over the bound is refused before any of it is read; any other
// reader stops one byte past it. A file over the bound is an invalid
// document: the error is a *ValidationError at its first line.
func ReadBounded(path string, f *os.File) ([]byte, error) {
	tooLarge := func() error {
		return &ValidationError{Errors: []*Error{{File: path, Line: 1, Column: 1,
			Message: fmt.Sprintf("the file is larger than %d bytes, the bound of every rules document (docs/limits.md)", MaxFileSize)}}}
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileSize {
		return nil, tooLarge()
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return nil, err // "read PATH: is a directory": it names the file
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge()
	}
	return data, nil
}

func (a *AvailableLimiters) source() string {
	if a.File == "" {
		return "available_limiters.yaml"
	}
	return a.File
}

// Names returns the declared limiter names, sorted.
func (a *AvailableLimiters) Names() []string { return sortedKeys(a.Proto.GetAvailableLimiters()) }

// NoLimiter is the error for a limiter that a does not declare: it names the
// file and the limiters it declares, and the one a typo meant ("did you mean
// "http_request"?"), for the config checks and for a service that looks a
// limiter up by name.
func (a *AvailableLimiters) NoLimiter(name string) error {
	return fmt.Errorf("no limiter %q in %s (it declares %s)%s", name, a.source(), ListNames(a.Names()), suggest.Hint(name, a.Names()))
}

// Spec returns the declaration of a limiter, or nil when it is not declared.
func (a *AvailableLimiters) Spec(limiter string) *configv1.LimiterSpec {
	return a.Proto.GetAvailableLimiters()[limiter]
}

// DefaultRules returns the default rules a limiter declares, as core rules.
// It is an error to ask for a limiter that is not declared.
func (a *AvailableLimiters) DefaultRules(limiter string) ([]ratelimit.Rule, error) {
	spec := a.Spec(limiter)
	if spec == nil {
		return nil, fmt.Errorf("config: %w", a.NoLimiter(limiter))
	}
	rules, err := RulesFromProto(a.defaultRules(limiter))
	if err != nil {
		return nil, fmt.Errorf("config: limiter %s default rules: %w", limiter, err)
	}
	return rules, nil
}

// Limiters returns the limiters that have rules in the file, sorted.
func (r *RateLimits) Limiters() []string { return sortedKeys(r.Proto.GetRateLimits()) }

// Rules returns a limiter's rules from the file as core rules, in file order
// (nil when the file has none for it).
func (r *RateLimits) Rules(limiter string) ([]ratelimit.Rule, error) {
	rules, err := RulesFromProto(r.Proto.GetRateLimits()[limiter])
	if err != nil {
		return nil, fmt.Errorf("config: limiter %s rules: %w", limiter, err)
	}
	return rules, nil
}

// Tiers returns a limiter's tiers from the two files: File and Mode from
// rate_limits.yaml (rateLimits may be nil: none) and Defaults from
// available_limiters.yaml, as core rules. The limiter must be declared. The
// rule store keeps them as separate tiers; Set.Merged gives the list they
// evaluate to without one.
func Tiers(available *AvailableLimiters, rateLimits *RateLimits, limiter string) (tiers.Set, error) {
	defaults, err := available.DefaultRules(limiter)
	if err != nil {
		return tiers.Set{}, err
	}
	t := tiers.Set{Defaults: defaults}
	if rateLimits != nil {
		if t.File, err = rateLimits.Rules(limiter); err != nil {
			return tiers.Set{}, err
		}
		if e, ok := ModeFromProto(rateLimits.Mode(limiter)); ok {
			t.Mode = &e
		}
	}
	return t, nil
}

// Rules returns the list a limiter evaluates from the two files
// (Tiers(...).Merged()): the exemptions opening its default rules (skip
// rules, such as skip_health_checks) first, then its file rules, then its
// other default rules, a file rule replacing the default of the same name,
// exemption or not (docs/design.md#tiers, docs/design.md#exemptions).
func Rules(available *AvailableLimiters, rateLimits *RateLimits, limiter string) ([]ratelimit.Rule, error) {
	t, err := Tiers(available, rateLimits, limiter)
	if err != nil {
		return nil, err
	}
	return t.Merged(), nil
}

// SkipRule is a skip rule and where it is declared. Skip rules bypass their
// limiter for every request they match, so `ratekit validate` lists each one.
type SkipRule struct {
	File         string
	Line, Column int
	Limiter      string
	Rule         *configv1.Rule
	Default      bool // from available_limiters.yaml default_rules
}

// SkipRules returns the skip rules among the default rules, in file order.
func (a *AvailableLimiters) SkipRules() []SkipRule {
	var out []SkipRule
	for _, name := range a.Names() {
		at := path{}.field("available_limiters").key(name).field("default_rules")
		for i, dr := range a.Spec(name).GetDefaultRules() {
			if dr.GetAction() == configv1.Action_ACTION_SKIP {
				out = append(out, a.doc.skipRule(name, at.at(i), DefaultRuleToRule(dr), true))
			}
		}
	}
	sortSkipRules(out)
	return out
}

// SkipRules returns the skip rules of the file, in file order.
func (r *RateLimits) SkipRules() []SkipRule {
	var out []SkipRule
	for _, name := range r.Limiters() {
		at := path{}.field("rate_limits").key(name).field("rules")
		for i, rule := range r.Proto.GetRateLimits()[name].GetRules() {
			if rule.GetAction() == configv1.Action_ACTION_SKIP {
				out = append(out, r.doc.skipRule(name, at.at(i), rule, false))
			}
		}
	}
	sortSkipRules(out)
	return out
}

func (d *doc) skipRule(limiter string, at path, r *configv1.Rule, def bool) SkipRule {
	pos := d.lookup(at, false)
	return SkipRule{File: d.file, Line: pos.line, Column: pos.col, Limiter: limiter, Rule: r, Default: def}
}

// ParsePublishRulesRequest reads a publish payload (rules to add to the
// rule store's published tier, docs/design.md#the-rule-store) written like
// rate_limits.yaml (`rate_limits:` limiter → rule list, YAML or JSON) and
// checks it as ValidatePublishRulesRequest does.
func ParsePublishRulesRequest(file string, data []byte, available *AvailableLimiters) (*configv1.PublishRulesRequest, error) {
	p, err := ParsePublishFile(file, data, available)
	if err != nil {
		return nil, err
	}
	return p.Proto, nil
}

// PublishFile is a valid publish payload read from a file, which knows where
// each of its rules is (for its ExemptionWarnings).
type PublishFile struct {
	File  string
	Proto *configv1.PublishRulesRequest
	doc   *doc
}

// ParsePublishFile is ParsePublishRulesRequest, keeping the place of each
// rule in data.
func ParsePublishFile(file string, data []byte, available *AvailableLimiters) (*PublishFile, error) {
	msg := &configv1.PublishRulesRequest{}
	d, err := parseRuleMap(file, data, msg, msg.GetRateLimits, available)
	if err != nil {
		return nil, err
	}
	return &PublishFile{File: file, Proto: msg, doc: d}, nil
}

// parseRuleMap reads a document whose one field, rate_limits, maps limiters
// to rule lists (rate_limits.yaml, a publish payload) into msg.
func parseRuleMap(file string, data []byte, msg proto.Message, rules func() map[string]*configv1.RuleList, available *AvailableLimiters) (*doc, error) {
	if err := conflictMarkers(file, data); err != nil {
		return nil, err
	}
	d := newDoc(file)
	if d.decode(data, msg, parseYAML) {
		d.validate(msg)
		d.checkRuleMap("rate_limits", rules(), available)
	}
	return d, d.result(msg)
}

// ValidatePublishRulesRequest checks a publish payload built in code before
// the rule store applies it: protovalidate, then the checks of rate_limits.yaml
// against available (which may be nil to skip the cross-document part). The
// error is a *ValidationError naming limiter and rule (there are no lines).
func ValidatePublishRulesRequest(req *configv1.PublishRulesRequest, available *AvailableLimiters) error {
	d := newDoc("")
	d.validate(req)
	d.checkRuleMap("rate_limits", req.GetRateLimits(), available)
	return d.result(req)
}

// sortSkipRules orders skip rules by file position.
func sortSkipRules(s []SkipRule) {
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].File != s[j].File {
			return s[i].File < s[j].File
		}
		return s[i].Line < s[j].Line
	})
}
