// Package rulecheck holds the checks a rule's name and regular expressions
// must pass, shared by package ratelimit (which enforces them when a limiter
// is built) and the config and rule-store packages (which report them early,
// with the position of the bad value in a file or a form).
package rulecheck

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// Limits on regular expressions in rules: RE2 already runs in linear time; these
// bound the memory and per-check work of a rule that operators may write.
const (
	MaxRegexLen   = 1024
	MaxRegexInsts = 10000
)

// MaxNameLen is the longest limiter or rule name, in bytes (nameRE's bound).
const MaxNameLen = 64

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// ValidName reports whether s is a valid limiter or rule name (^[a-z0-9_]{1,64}$).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NameError is the error for s, an invalid name of what ("limiter",
// "rule"). s may be as long as whatever sent it (a form, a request), so it
// is quoted at most 80 characters long: the error and the log lines that
// carry it stay short. A name that is valid once lowercased, with dashes
// as underscores (HTTP_request, api-request), is suggested: an operator's
// usual slip.
func NameError(what, s string) error {
	if fix := strings.ToLower(strings.ReplaceAll(s, "-", "_")); fix != s && ValidName(fix) {
		return fmt.Errorf("%s name %q must match ^[a-z0-9_]{1,64}$; did you mean %s?", what, s, fix)
	}
	return fmt.Errorf("%s name %.80q must match ^[a-z0-9_]{1,64}$", what, s)
}

// CompileRegex compiles a rule regex under the size bounds every rule obeys.
func CompileRegex(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexLen {
		return nil, fmt.Errorf("regex is %d bytes, the limit is %d", len(expr), MaxRegexLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("invalid RE2 regex %q: %w", expr, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil, fmt.Errorf("invalid RE2 regex %q: %w", expr, err)
	}
	if len(prog.Inst) > MaxRegexInsts {
		return nil, fmt.Errorf("regex %q compiles to %d instructions, the limit is %d", expr, len(prog.Inst), MaxRegexInsts)
	}
	return regexp.Compile(expr)
}
