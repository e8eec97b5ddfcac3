package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ratekit/ratekit/controlplane/config"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const validateUsage = `usage: ratekit validate --available-limiters FILE [--rate-limits FILE] [--json]

Checks available_limiters.yaml and, when given, rate_limits.yaml against it:
YAML well-formed, the schema (unknown fields are errors), the protovalidate
rules, and the cross-document checks (limiters declared, properties in the
limiter's available_properties, rule names unique, regexes valid RE2, skip
rules within allowed_skip_rules).

On success it prints a summary that lists every skip rule the limiters
evaluate, since each one bypasses its limiter for every request it matches
(a default skip rule that rate_limits.yaml replaces by name is left out).
A limit or log rule of rate_limits.yaml that matches what a default
exemption skips (skip_health_checks: it stays exempt), or that replaces one,
is valid and named in a warning on stderr (in "warnings" with --json), the
first 100 of them; a skip rule that replaces one is not. So is a skip rule
without a match that comes before every counting rule of its list: nothing
after it counts.

flags:
  --available-limiters FILE   the application's available_limiters.yaml (required)
  --rate-limits FILE          an operator's rate_limits.yaml (optional)
  --json                      print the result as one JSON object on stdout:
                              {"valid", "errors": [{file, line, column,
                              limiter, rule, path, message}], "errors_omitted",
                              "limiters" (each with rate_limits_rules and
                              rate_limits_mode where rate_limits.yaml sets
                              them), "skip_rules", "warnings": [as errors],
                              "warnings_omitted", "not_checked"}; errors_omitted
                              and warnings_omitted count the problems and the
                              warnings past the first 100, left out;
                              not_checked names --rate-limits when
                              available_limiters.yaml is invalid (it is
                              checked against that file)

A file that still holds merge conflict markers (<<<<<<<, =======, >>>>>>>)
is refused with its file and line.

exit codes: 0 valid; 1 invalid, one error per line as
FILE:LINE:COL: limiter/rule: message (the first 100 of a file, then a line
with the count of the others); 2 usage error or unreadable file`

func init() {
	commands["validate"] = command{
		summary: "check available_limiters.yaml and rate_limits.yaml (for CI)",
		usage:   validateUsage,
		run:     runValidate,
	}
}

func runValidate(_ context.Context, out output, args []string) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	availablePath := fs.String("available-limiters", "", "")
	rateLimitsPath := fs.String("rate-limits", "", "")
	asJSON := fs.Bool("json", false, "")
	pos, ok, code := parseArgs(fs, validateUsage, args, out)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(out, validateUsage, "validate takes no arguments, got %q (name files with the flags)", pos)
	}
	if *availablePath == "" {
		return usageError(out, validateUsage, "validate needs --available-limiters FILE")
	}
	res := validateResult{Errors: []validateError{}, Limiters: []validateLimiter{}, SkipRules: []validateSkip{}, Warnings: []validateError{}}
	fail := func(err error) int {
		if !*asJSON {
			return report(out.stderr, "validate", err)
		}
		code := exitCode(err)
		if code == exitUsage {
			fmt.Fprintf(out.stderr, "ratekit validate: %v\n", err)
			return code
		}
		res.Errors = jsonErrors(err)
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			res.ErrorsOmitted = ve.Omitted
		}
		writeJSON(out.stdout, res)
		return code
	}

	available, err := loadAvailable(*availablePath)
	if err != nil {
		if exitCode(err) == exitInvalid && *rateLimitsPath != "" {
			if *asJSON {
				res.NotChecked = []string{*rateLimitsPath}
			} else {
				defer fmt.Fprintf(out.stderr, "%s: not checked: %s is invalid\n", *rateLimitsPath, *availablePath)
			}
		}
		return fail(err)
	}
	var rateLimits *config.RateLimits
	if *rateLimitsPath != "" {
		// The runtime treats a missing rate_limits.yaml as "no rules"; a file
		// named on the command line must exist.
		if rateLimits, err = loadRateLimits(*rateLimitsPath, available); err != nil {
			return fail(err)
		}
	}
	var warnings []*config.Error
	var omitted int
	if rateLimits != nil {
		warnings, omitted = rateLimits.ExemptionWarnings(available)
	}
	if *asJSON {
		res.Valid = true
		res.Limiters, res.SkipRules = jsonSummary(available, rateLimits)
		res.Warnings = jsonErrors(&config.ValidationError{Errors: warnings})
		res.WarningsOmitted = omitted
		writeJSON(out.stdout, res)
		return exitOK
	}
	printWarnings(out.stderr, warnings, omitted)
	summarize(out.stdout, available, rateLimits)
	return exitOK
}

// validateResult is the output of `ratekit validate --json`.
type validateResult struct {
	Valid     bool              `json:"valid"`
	Errors    []validateError   `json:"errors"`
	Limiters  []validateLimiter `json:"limiters"`
	SkipRules []validateSkip    `json:"skip_rules"`
	// Warnings are counting rules that a default exemption
	// (skip_health_checks) still overrules, or that replace one: valid, but
	// worth a look. It
	// holds the first config.MaxReportedErrors; WarningsOmitted counts the
	// others.
	Warnings        []validateError `json:"warnings"`
	WarningsOmitted int             `json:"warnings_omitted,omitempty"`
	// ErrorsOmitted counts the problems left out of Errors, which holds the
	// first config.MaxReportedErrors of a file.
	ErrorsOmitted int `json:"errors_omitted,omitempty"`
	// NotChecked names the files given that were not checked: a
	// rate_limits.yaml is checked against available_limiters.yaml, so not
	// when that is invalid (no error of its own does not make it valid).
	NotChecked []string `json:"not_checked,omitempty"`
}

type validateError struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Limiter string `json:"limiter,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
}

type validateLimiter struct {
	Name             string   `json:"name"`
	Properties       []string `json:"available_properties"`
	DefaultRules     int      `json:"default_rules"`
	RateLimitsRules  *int     `json:"rate_limits_rules,omitempty"` // nil: rate_limits.yaml has none
	RateLimitsMode   string   `json:"rate_limits_mode,omitempty"`  // "shadow" or "enforce" when rate_limits.yaml sets one
	AllowedSkipRules []string `json:"allowed_skip_rules,omitempty"`
}

type validateSkip struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Limiter string `json:"limiter"`
	Rule    string `json:"rule"`
	Match   string `json:"match"`
}

func jsonErrors(err error) []validateError {
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		out := make([]validateError, len(ve.Errors))
		for i, e := range ve.Errors {
			out[i] = validateError{File: e.File, Line: e.Line, Column: e.Column, Limiter: e.Limiter, Rule: e.Rule, Path: e.Path, Message: e.Message}
		}
		return out
	}
	return []validateError{{Message: err.Error()}}
}

func jsonSummary(available *config.AvailableLimiters, rateLimits *config.RateLimits) ([]validateLimiter, []validateSkip) {
	lims := []validateLimiter{}
	for _, n := range available.Names() {
		spec := available.Spec(n)
		l := validateLimiter{Name: n, Properties: spec.GetAvailableProperties(), DefaultRules: len(spec.GetDefaultRules())}
		if l.Properties == nil {
			l.Properties = []string{}
		}
		if allow := spec.GetAllowedSkipRules(); allow != nil {
			l.AllowedSkipRules = append([]string{}, allow.GetNames()...)
		}
		if rl, ok := rateLimitsOf(rateLimits)[n]; ok {
			k := len(rl.GetRules())
			l.RateLimitsRules = &k
			l.RateLimitsMode = modeName(rl.GetMode())
		}
		lims = append(lims, l)
	}
	skips := skipRules(available, rateLimits)
	out := []validateSkip{}
	for _, s := range skips {
		out = append(out, validateSkip{File: s.File, Line: s.Line, Column: s.Column, Limiter: s.Limiter, Rule: s.Rule.GetName(), Match: describeMatch(s.Rule)})
	}
	return lims, out
}

// modeName is the mode a rate_limits.yaml sets, as the file writes it
// ("shadow", "enforce"), or "" when it sets none.
func modeName(m configv1.Mode) string {
	if m == configv1.Mode_MODE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(m.String(), "MODE_"))
}

// skipRules lists the skip rules the limiters evaluate: the default ones of
// available_limiters.yaml, less those a rule of rateLimits replaces by name
// (they no longer apply), then rateLimits' own.
func skipRules(available *config.AvailableLimiters, rateLimits *config.RateLimits) []config.SkipRule {
	var out []config.SkipRule
	for _, s := range available.SkipRules() {
		replaced := slices.ContainsFunc(rateLimitsOf(rateLimits)[s.Limiter].GetRules(), func(r *configv1.Rule) bool {
			return r.GetName() == s.Rule.GetName()
		})
		if !replaced {
			out = append(out, s)
		}
	}
	if rateLimits != nil {
		out = append(out, rateLimits.SkipRules()...)
	}
	return out
}

func rateLimitsOf(r *config.RateLimits) map[string]*configv1.RuleList {
	if r == nil {
		return nil
	}
	return r.Proto.GetRateLimits()
}

// printWarnings prints exemption warnings, one a line, and the count of
// those left out.
func printWarnings(w io.Writer, warnings []*config.Error, omitted int) {
	for _, x := range warnings {
		fmt.Fprintf(w, "warning: %v\n", x)
	}
	if omitted > 0 {
		fmt.Fprintf(w, "warning: ... and %d more (only the first %d warnings are reported)\n", omitted, len(warnings))
	}
}

// exitCode is the exit code of a load error: 1 for invalid content, 2 when
// the file could not be read.
func exitCode(err error) int {
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		return exitInvalid
	}
	return exitUsage
}

// report prints a load error: each validation problem on its own line (exit
// 1), or why the file could not be read (exit 2), under the command cmd.
func report(w io.Writer, cmd string, err error) int {
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for _, e := range ve.Errors {
			fmt.Fprintln(w, e.Error())
		}
		if l := ve.OmittedLine(); l != "" {
			fmt.Fprintln(w, l)
		}
		return exitInvalid
	}
	fmt.Fprintf(w, "ratekit %s: %v\n", cmd, err)
	return exitUsage
}

func summarize(w io.Writer, available *config.AvailableLimiters, rateLimits *config.RateLimits) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	names := available.Names()
	fmt.Fprintf(tw, "%s: %s\n", available.File, count(len(names), "limiter"))
	for _, n := range names {
		spec := available.Spec(n)
		line := fmt.Sprintf("  %s\t%s\t%s", n, count(len(spec.GetAvailableProperties()), "property"), count(len(spec.GetDefaultRules()), "default rule"))
		if allow := spec.GetAllowedSkipRules(); allow != nil {
			if len(allow.GetNames()) == 0 {
				line += "\tno skip rules allowed"
			} else {
				line += "\tskip rules allowed: " + strings.Join(allow.GetNames(), ", ")
			}
		}
		fmt.Fprintln(tw, line)
	}
	skips := skipRules(available, rateLimits)
	if rateLimits != nil {
		limiters := rateLimits.Limiters()
		total := 0
		for _, n := range limiters {
			total += len(rateLimits.Proto.GetRateLimits()[n].GetRules())
		}
		fmt.Fprintf(tw, "%s: %s for %s\n", rateLimits.File, count(total, "rule"), count(len(limiters), "limiter"))
		for _, n := range limiters {
			list := rateLimits.Proto.GetRateLimits()[n]
			line := fmt.Sprintf("  %s\t%s", n, count(len(list.GetRules()), "rule"))
			// A limiter listed for its mode alone (the shadow step of a
			// rollout) has no rule to count: its mode is what the file sets.
			desc := actionCounts(list.GetRules())
			if m := modeName(list.GetMode()); m != "" {
				desc = strings.TrimPrefix(desc+"; mode "+m, "; ")
			}
			if desc != "" {
				line += "\t(" + desc + ")"
			}
			fmt.Fprintln(tw, line)
		}
	}
	tw.Flush()
	if len(skips) == 0 {
		fmt.Fprintln(w, "skip rules: none")
	} else {
		fmt.Fprintf(w, "skip rules: %d (each bypasses its limiter for every request it matches)\n", len(skips))
		for _, s := range skips {
			fmt.Fprintf(w, "  %s:%d:%d: %s/%s: match %s\n", s.File, s.Line, s.Column, s.Limiter, s.Rule.GetName(), describeMatch(s.Rule))
		}
	}
	fmt.Fprintln(w, "OK")
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])) { // property, not key
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func actionCounts(rules []*configv1.Rule) string {
	n := map[configv1.Action]int{}
	for _, r := range rules {
		n[r.GetAction()]++
	}
	var parts []string
	for _, a := range []configv1.Action{configv1.Action_ACTION_LIMIT, configv1.Action_ACTION_LOG, configv1.Action_ACTION_SKIP} {
		if n[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[a], strings.ToLower(strings.TrimPrefix(a.String(), "ACTION_"))))
		}
	}
	return strings.Join(parts, ", ")
}

// describeMatch renders a rule's match as the YAML markers read, and says
// plainly when it matches every request.
func describeMatch(r *configv1.Rule) string {
	core, err := config.RuleFromProto(r)
	if err != nil || len(core.Match) == 0 {
		return "{} (every request)"
	}
	keys := make([]string, 0, len(core.Match))
	for k := range core.Match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + core.Match[k].String()
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
