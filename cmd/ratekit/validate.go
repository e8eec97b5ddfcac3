package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ratekit/ratekit/core/config"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

const validateUsage = `usage: ratekit validate --available-limiters FILE [--rate-limits FILE]

Checks available_limiters.yaml and, when given, rate_limits.yaml against it:
YAML well-formed, the schema (unknown fields are errors), the protovalidate
rules, and the cross-document checks (limiters declared, properties in the
limiter's available_properties, rule names unique, regexes valid RE2, skip
rules within allowed_skip_rules).

On success it prints a summary that lists every skip rule, since each one
bypasses its limiter for every request it matches.

flags:
  --available-limiters FILE   the application's available_limiters.yaml (required)
  --rate-limits FILE          an operator's rate_limits.yaml (optional)

exit codes: 0 valid; 1 invalid, one error per line as
FILE:LINE:COL: limiter/rule: message; 2 usage error or unreadable file`

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
	if ok, code := parseFlags(fs, validateUsage, args, out); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(out, validateUsage, "validate takes no arguments, got %q (name files with the flags)", fs.Args())
	}
	if *availablePath == "" {
		return usageError(out, validateUsage, "validate needs --available-limiters FILE")
	}

	available, err := config.LoadAvailableLimiters(*availablePath)
	if err != nil {
		code := report(out.stderr, err)
		if code == exitInvalid && *rateLimitsPath != "" {
			fmt.Fprintf(out.stderr, "%s: not checked: %s is invalid\n", *rateLimitsPath, *availablePath)
		}
		return code
	}
	var rateLimits *config.RateLimits
	if *rateLimitsPath != "" {
		// The runtime treats a missing rate_limits.yaml as "no rules"; a file
		// named on the command line must exist.
		if _, err := os.Stat(*rateLimitsPath); err != nil {
			fmt.Fprintf(out.stderr, "ratekit validate: %v\n", err)
			return exitUsage
		}
		if rateLimits, err = config.LoadRateLimits(*rateLimitsPath, available); err != nil {
			return report(out.stderr, err)
		}
	}
	summarize(out.stdout, available, rateLimits)
	return exitOK
}

// report prints a load error: each validation problem on its own line (exit
// 1), or why the file could not be read (exit 2).
func report(w io.Writer, err error) int {
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for _, e := range ve.Errors {
			fmt.Fprintln(w, e.Error())
		}
		return exitInvalid
	}
	fmt.Fprintf(w, "ratekit validate: %v\n", err)
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
	skips := available.SkipRules()
	if rateLimits != nil {
		limiters := rateLimits.Limiters()
		total := 0
		for _, n := range limiters {
			total += len(rateLimits.Proto.GetRateLimits()[n].GetRules())
		}
		fmt.Fprintf(tw, "%s: %s for %s\n", rateLimits.File, count(total, "rule"), count(len(limiters), "limiter"))
		for _, n := range limiters {
			rules := rateLimits.Proto.GetRateLimits()[n].GetRules()
			fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", n, count(len(rules), "rule"), actionCounts(rules))
		}
		skips = append(skips, rateLimits.SkipRules()...)
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
	if strings.HasSuffix(noun, "y") {
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
