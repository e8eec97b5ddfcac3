package config

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Error is one problem in a configuration document. Its text is
// `FILE:LINE:COL: limiter/rule: message`; parts that are unknown are left out
// (a stored JSON document has no file name, a top-level problem no limiter).
type Error struct {
	File    string
	Line    int    // 1-based; 0 when the problem has no place in the file (an empty document)
	Column  int    // 1-based; 0 when the parser does not say
	Limiter string // limiter name, when the problem is inside one
	Rule    string // rule name, or "#N" (1-based position) when the rule has no usable name
	Path    string // field path in the schema, e.g. rate_limits["x"].rules[0].limit
	Message string // plain words
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
		if e.Column > 0 {
			b.WriteString(strconv.Itoa(e.Column))
			b.WriteByte(':')
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	switch {
	case e.Limiter != "" && e.Rule != "":
		b.WriteString(label(e.Limiter) + "/" + label(e.Rule) + ": ")
	case e.Limiter != "":
		b.WriteString(label(e.Limiter) + ": ")
	case e.Rule != "":
		b.WriteString(label(e.Rule) + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// MaxReportedErrors bounds the problems a ValidationError holds
// (docs/limits.md): a document of 1 MiB can break a rule on every line, and
// an error of every one of them would be many times the document's bytes.
// The first ones in file order are kept; the count of the others is in
// Omitted.
const MaxReportedErrors = 100

// MaxLimiters bounds the limiters one document names: those
// available_limiters.yaml declares, and those of rate_limits.yaml or of a
// publish request. The rule store holds at most as many limiters
// (rulestore.MaxLimiters), so a service declaring more could not seed them.
const MaxLimiters = 1024

// MaxAvailableProperties bounds the available_properties of one limiter in
// available_limiters.yaml, and MaxAllowedSkipRules its allowed_skip_rules:
// each is copied into every service's memory and quoted by its errors, and
// no limiter needs more (a rule uses at most ratelimit.MaxCharacteristics
// properties, a tier holds at most ratelimit.MaxRulesPerTier rules).
const (
	MaxAvailableProperties = 256
	MaxAllowedSkipRules    = ratelimit.MaxRulesPerTier
)

// ValidationError is an invalid document: the problems found, in file order,
// at most MaxReportedErrors of them. A document with any problem is rejected
// whole.
type ValidationError struct {
	Errors []*Error
	// Omitted counts the problems found past the first MaxReportedErrors,
	// left out of Errors.
	Omitted int
}

// newValidationError sorts errs into file order and keeps the first
// MaxReportedErrors of them: the one place a document's problems are bounded.
func newValidationError(errs []*Error) *ValidationError {
	sortErrors(errs)
	ve := &ValidationError{Errors: errs}
	if n := len(errs); n > MaxReportedErrors {
		ve.Errors = slices.Clip(errs[:MaxReportedErrors])
		ve.Omitted = n - MaxReportedErrors
	}
	return ve
}

// OmittedLine is the line that says how many problems Errors left out, ""
// when none were.
func (e *ValidationError) OmittedLine() string {
	if e.Omitted == 0 {
		return ""
	}
	return fmt.Sprintf("... and %d more (only the first %d problems are reported)", e.Omitted, len(e.Errors))
}

// Error returns one problem per line, and the OmittedLine when problems were
// left out.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Errors), len(e.Errors)+1)
	for i, x := range e.Errors {
		lines[i] = x.Error()
	}
	if l := e.OmittedLine(); l != "" {
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, len(e.Errors))
	for i, x := range e.Errors {
		out[i] = x
	}
	return out
}

func sortErrors(errs []*Error) {
	sort.SliceStable(errs, func(i, j int) bool {
		a, b := errs[i], errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Column != b.Column {
			return a.Column < b.Column
		}
		if a.Path != b.Path { // protovalidate walks maps in random order
			return a.Path < b.Path
		}
		return a.Message < b.Message
	})
}

// elem is one step of a field path: a field, optionally subscripted by a map
// key or a list index.
type elem struct {
	field string
	key   *string
	index int // -1 when not a list element
}

type path []elem

func (p path) field(name string) path {
	return append(p[:len(p):len(p)], elem{field: name, index: -1})
}

// at subscripts the last element.
func (p path) at(i int) path {
	q := append(path(nil), p...)
	q[len(q)-1].index = i
	return q
}

func (p path) key(k string) path {
	q := append(path(nil), p...)
	q[len(q)-1].key = &k
	return q
}

// String renders the path as protovalidate.FieldPathString does, so paths of
// violations and of YAML nodes compare equal.
func (p path) String() string {
	var b strings.Builder
	for i, e := range p {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.field)
		switch {
		case e.key != nil:
			b.WriteString("[" + strconv.Quote(*e.key) + "]")
		case e.index >= 0:
			b.WriteString("[" + strconv.Itoa(e.index) + "]")
		}
	}
	return b.String()
}

// clipped is p with each field name and map key cut as clip cuts it, for an
// error to show (a field of the document that the schema has not).
func (p path) clipped() path {
	var q path
	for i, e := range p {
		if len(e.field) > maxQuoted || (e.key != nil && len(*e.key) > maxQuoted) {
			if q == nil {
				q = append(path(nil), p...)
			}
			q[i].field = clip(e.field)
			if e.key != nil {
				k := clip(*e.key)
				q[i].key = &k
			}
		}
	}
	if q == nil {
		return p
	}
	return q
}

// fieldString is String with the subscript of the last element left out:
// the field that holds p.
func (p path) fieldString() string {
	q := append(path(nil), p...)
	q[len(q)-1].key, q[len(q)-1].index = nil, -1
	return q.String()
}

// within reports whether p is q or lies inside q.
func (p path) within(q path) bool {
	if len(q) > len(p) {
		return false
	}
	for i, e := range q {
		f := p[i]
		if f.field != e.field {
			return false
		}
		last := i == len(q)-1
		if e.key != nil || e.index >= 0 || !last {
			if (e.key == nil) != (f.key == nil) || (e.key != nil && *e.key != *f.key) || e.index != f.index {
				return false
			}
		}
	}
	return true
}

// maxQuoted bounds, in characters, each piece of a document that an error
// quotes (a name, a key, a value): a piece may be as large as the document,
// and through YAML aliases every one of the MaxReportedErrors problems may
// quote it again (a document of 0.5 MiB made an error of 99 MiB). A longer
// piece is cut, and "..." follows it. A valid name is never cut.
const maxQuoted = 80

// MaxListed bounds the names an error lists (ListNames): the limiters a file
// declares, a limiter's properties or skip rules, which every error about
// them repeats. The admin page's messages list them so too.
const MaxListed = 16

// clip returns s cut to maxQuoted characters, "..." marking the cut.
func clip(s string) string {
	if len(s) <= maxQuoted { // no character is less than a byte
		return s
	}
	n := 0
	for i := range s {
		if n == maxQuoted {
			return s[:i] + "..."
		}
		n++
	}
	return s
}

// label is a limiter's or a rule's name as an error's label writes it: the
// name itself, or quoted as %q quotes it when a reader could not tell it
// from another (blanks at either end, a character that is not printable: a
// bidi override, a zero-width space, a line break). The names of a
// hand-written document are what is being checked: shown raw, a bidi
// override turned the rest of the line around on the admin page and in a
// terminal.
func label(s string) string {
	if strings.TrimSpace(s) != s || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// quote returns s quoted as %q quotes it, cut to maxQuoted characters: a cut
// piece is followed by "..." after its closing quote.
func quote(s string) string {
	if c := clip(s); c != s {
		return strconv.Quote(strings.TrimSuffix(c, "...")) + "..."
	}
	return strconv.Quote(s)
}

// ListNames lists names for an error, at most MaxListed of them, then their
// count ("none" for no name).
func ListNames(vs []string) string {
	if len(vs) == 0 {
		return "none"
	}
	if len(vs) > MaxListed {
		return strings.Join(vs[:MaxListed], ", ") + fmt.Sprintf(", ... (%d in all)", len(vs))
	}
	return strings.Join(vs, ", ")
}
