package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratekit/ratekit/controlplane/rollout"
	"github.com/ratekit/ratekit/internal/rulecheck"
	"github.com/ratekit/ratekit/internal/suggest"
	"github.com/ratekit/ratekit/observability/observe"
)

const rolloutUsage = `usage: ratekit rollout gate (--prometheus URL | --metrics SOURCE...) [flags]

The gate of a shadow → enforce rollout (package rollout): for each limiter,
the share of requests on which the legacy check and the new limiter
disagreed, from ratelimit_rollout_decisions_total (observe.RolloutMetrics).
A limiter passes when fewer than --max-divergence of at least
--min-decisions compared decisions disagreed; failed-open checks are not
compared. Rules with divergent decisions are listed under their limiter.

sources (one kind):
  --prometheus URL        a Prometheus server: sums increase() over --window
                          across every scraped process (the 24-hour gate)
  --metrics SOURCE        a /metrics URL or a file of the text exposition
                          format (repeatable; summed): counts since each
                          process started, not a 24-hour window

flags:
  --window D              Prometheus range (default 24h)
  --max-divergence R      threshold ratio (default 0.005, i.e. 0.5 %)
  --min-decisions N       fewer compared decisions fail (default 1000)
  --limiter NAME          judge only these limiters (repeatable); a named
                          limiter without decisions fails
  --job NAME              with --prometheus: only the decisions of this
                          scrape job (the job label an alert names; at most
                          1024 bytes); without it the jobs are summed, and a
                          limiter that several jobs report (services made
                          from the copier template all have http_request) is
                          named in a warning
  --job-namespace NS      with --prometheus: only the decisions whose
                          namespace label is NS (the namespace an alert
                          names; at most 1024 bytes): one job name in two
                          namespaces is two jobs, summed with a warning
  --namespace NS          metric name prefix (default "ratelimit")
  --json                  machine-readable output
  --timeout D             bound on the whole command (default 10s, at most 10m)

exit codes: 0 every limiter passes; 1 a limiter fails, or there is no
decision at all; 2 usage error, or a source that cannot be read`

func init() {
	commands["rollout"] = command{
		summary: "judge a shadow → enforce rollout: divergence per limiter against the 0.5 % gate",
		usage:   rolloutUsage,
		run:     runRollout,
	}
}

// maxScrape bounds what is read from one metrics source or Prometheus answer.
const maxScrape = 64 << 20

// maxJobBytes bounds --job, a Prometheus label value.
const maxJobBytes = 1024

// maxJobsNamed bounds the jobs a warning names.
const maxJobsNamed = 5

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type gateReport struct {
	Source        string  `json:"source"`
	Window        string  `json:"window,omitempty"`
	MaxDivergence float64 `json:"max_divergence"`
	MinDecisions  uint64  `json:"min_decisions"`
	Pass          bool    `json:"pass"`
	// Reason says why the gate failed as a whole ("" when limiters were
	// judged: each carries its own reason).
	Reason   string        `json:"reason,omitempty"`
	Limiters []gateLimiter `json:"limiters"`
}

type gateLimiter struct {
	rollout.Verdict
	Rules []rollout.RuleCounts `json:"rules"`
}

func runRollout(ctx context.Context, out output, args []string) int {
	if len(args) == 0 || args[0] != "gate" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help") {
			fmt.Fprintln(out.stdout, rolloutUsage)
			return exitOK
		}
		if len(args) > 0 {
			return usageError(out, rolloutUsage, "unknown rollout command %q%s", args[0], suggest.Hint(args[0], subcommands["rollout"]))
		}
		return usageError(out, rolloutUsage, "rollout: want the subcommand gate")
	}
	fs := flag.NewFlagSet("rollout gate", flag.ContinueOnError)
	var metrics, only multiFlag
	fs.Var(&metrics, "metrics", "")
	fs.Var(&only, "limiter", "")
	prom := fs.String("prometheus", "", "")
	job := fs.String("job", "", "")
	jobNS := fs.String("job-namespace", "", "")
	window := fs.Duration("window", 24*time.Hour, "")
	maxDiv := fs.Float64("max-divergence", rollout.MaxDivergence, "")
	minDec := fs.Uint64("min-decisions", rollout.MinDecisions, "")
	ns := fs.String("namespace", observe.DefaultNamespace, "")
	asJSON := fs.Bool("json", false, "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if ok, code := parseFlags(fs, rolloutUsage, args[1:], out); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		return usageError(out, rolloutUsage, "rollout gate: unexpected argument %q", fs.Arg(0))
	case (*prom == "") == (len(metrics) == 0):
		return usageError(out, rolloutUsage, "rollout gate: give either --prometheus or --metrics")
	case *window <= 0 || *window%time.Second != 0:
		return usageError(out, rolloutUsage, "rollout gate: --window %v must be a positive whole number of seconds", *window)
	case math.IsNaN(*maxDiv) || *maxDiv <= 0 || *maxDiv > 1:
		return usageError(out, rolloutUsage, "rollout gate: --max-divergence %v must be in (0, 1]", *maxDiv)
	case checkTimeout(*timeout) != nil:
		return usageError(out, rolloutUsage, "rollout gate: %v", checkTimeout(*timeout))
	case !validMetricPrefix(*ns):
		return usageError(out, rolloutUsage, "rollout gate: --namespace %q is not a metric name prefix", *ns)
	case *job != "" && *prom == "":
		return usageError(out, rolloutUsage, "rollout gate: --job selects the decisions of a Prometheus scrape job: give it with --prometheus")
	case len(*job) > maxJobBytes || !utf8.ValidString(*job):
		return usageError(out, rolloutUsage, "rollout gate: --job must be valid UTF-8 of at most %d bytes", maxJobBytes)
	case *jobNS != "" && *prom == "":
		return usageError(out, rolloutUsage, "rollout gate: --job-namespace selects the decisions of a Prometheus namespace label: give it with --prometheus")
	case len(*jobNS) > maxJobBytes || !utf8.ValidString(*jobNS):
		return usageError(out, rolloutUsage, "rollout gate: --job-namespace must be valid UTF-8 of at most %d bytes", maxJobBytes)
	}
	for _, l := range only {
		if !rulecheck.ValidName(l) {
			return usageError(out, rolloutUsage, "rollout gate: --limiter %.80q must match ^[a-z0-9_]{1,64}$", l)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	family := *ns + "_rollout_decisions_total"

	rep := gateReport{MaxDivergence: *maxDiv, MinDecisions: *minDec}
	var counts map[string]map[string]*rollout.Counts
	var jobs map[string][]string // the jobs that report each limiter (Prometheus)
	var err error
	if *prom != "" {
		rep.Source, rep.Window = "prometheus "+shownURL(*prom), window.String()
		if *job != "" {
			rep.Source += fmt.Sprintf(", job %q", *job)
		}
		if *jobNS != "" {
			rep.Source += fmt.Sprintf(", namespace %q", *jobNS)
		}
		counts, jobs, err = queryPrometheus(ctx, *prom, family, *window, *job, *jobNS)
	} else {
		shown := make([]string, len(metrics))
		for i, src := range metrics {
			shown[i] = shownSource(src)
		}
		rep.Source = "metrics " + strings.Join(shown, ", ")
		counts = map[string]map[string]*rollout.Counts{}
		for _, src := range metrics {
			if err = scrapeInto(ctx, src, family, counts); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(out.stderr, "ratekit: rollout gate: %v\n", err)
		return exitUsage
	}
	names := only
	if len(names) == 0 {
		for l := range counts {
			names = append(names, l)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, l := range names {
		if js := jobs[l]; len(js) > 1 {
			named := strings.Join(js[:min(len(js), maxJobsNamed)], ", ")
			if len(js) > maxJobsNamed {
				named += fmt.Sprintf(" and %d more", len(js)-maxJobsNamed)
			}
			how := "--job JOB"
			if slices.ContainsFunc(js, func(j string) bool { return strings.Contains(j, inNamespace) }) {
				how += " --job-namespace NS"
			}
			fmt.Fprintf(out.stderr, "warning: limiter %s: the decisions of %d jobs are summed (%s): judge the one an alert names with %s\n", l, len(js), named, how)
		}
	}
	rep.Pass = len(names) > 0
	for _, l := range names {
		total, err := limiterTotal(l, counts[l])
		if err != nil {
			fmt.Fprintf(out.stderr, "ratekit: rollout gate: %s: %v\n", rep.Source, err)
			return exitUsage
		}
		rules := []rollout.RuleCounts{} // [] in JSON, never null
		for rule, c := range counts[l] {
			if c.Divergent() > 0 {
				rules = append(rules, rollout.RuleCounts{Rule: rule, Counts: *c})
			}
		}
		slices.SortFunc(rules, func(a, b rollout.RuleCounts) int {
			if d := int64(b.Counts.Divergent()) - int64(a.Counts.Divergent()); d != 0 {
				return int(max(-1, min(1, d)))
			}
			return strings.Compare(a.Rule, b.Rule)
		})
		v := rollout.Gate(l, total, *maxDiv, *minDec)
		if _, seen := counts[l]; !seen {
			v.Pass, v.Reason = false, "no decisions recorded"
		}
		rep.Pass = rep.Pass && v.Pass
		rep.Limiters = append(rep.Limiters, gateLimiter{Verdict: v, Rules: rules})
	}
	if len(rep.Limiters) == 0 {
		rep.Limiters = []gateLimiter{} // [] in JSON, never null
		rep.Reason = noSeries(family, rep.Source)
	}
	if *asJSON {
		enc := json.NewEncoder(out.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printGate(out.stdout, rep, family)
	}
	if !rep.Pass {
		return exitInvalid
	}
	return exitOK
}

func printGate(w io.Writer, rep gateReport, family string) {
	if len(rep.Limiters) == 0 {
		fmt.Fprintln(w, rep.Reason)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMITER\tCOMPARED\tDIVERGENT\tRATIO\tFAILED-OPEN\tGATE")
	for _, l := range rep.Limiters {
		gate := "PASS"
		if !l.Pass {
			gate = "FAIL: " + l.Reason
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f%%\t%d\t%s\n", l.Limiter, l.Counts.Compared(), l.Counts.Divergent(), 100*l.Ratio, l.Counts.Failed, gate)
		for _, r := range l.Rules {
			fmt.Fprintf(tw, "  rule %s\t\t%d\t\t\tnew_only %d, legacy_only %d\n", r.Rule, r.Counts.Divergent(), r.Counts.NewOnly, r.Counts.LegacyOnly)
		}
	}
	_ = tw.Flush()
	window := "since each process started"
	if rep.Window != "" {
		window = "over " + rep.Window
	}
	fmt.Fprintf(w, "\nsource: %s (%s); a limiter passes below %.3f%% divergence over at least %d compared decisions\n",
		rep.Source, window, 100*rep.MaxDivergence, rep.MinDecisions)
}

func validMetricPrefix(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// addSample adds one series' value, validating it as a writer would have
// written it: a known agreement, a limiter name, a finite count.
func addSample(counts map[string]map[string]*rollout.Counts, limiter, rule, agreement string, v float64) error {
	if !rulecheck.ValidName(limiter) {
		return fmt.Errorf("series with rate_limiter=%q: not a limiter name", limiter)
	}
	// A count the gate's uint64 counters cannot hold would wrap around
	// (a float64 of 2^64 or more has no uint64 conversion) into another.
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v >= 1<<64 {
		return fmt.Errorf("limiter %s rule %s agreement %s: count %v is not a number of decisions from 0 to 2^64", limiter, rule, agreement, v)
	}
	a := rollout.Agreement(agreement)
	switch a {
	case rollout.Agree, rollout.NewOnly, rollout.LegacyOnly, rollout.Failed:
	default:
		return fmt.Errorf("limiter %s: unknown agreement %q (want agree, new_only, legacy_only or failed)", limiter, agreement)
	}
	if rule == "" {
		rule = rollout.NoRule
	}
	rules := counts[limiter]
	if rules == nil {
		rules = map[string]*rollout.Counts{}
		counts[limiter] = rules
	}
	c := rules[rule]
	if c == nil {
		c = &rollout.Counts{}
		rules[rule] = c
	}
	n := uint64(math.Round(v)) // increase() extrapolates: whole decisions
	if n > math.MaxUint64-(c.Compared()+c.Failed) {
		return fmt.Errorf("limiter %s rule %s: the series count more than 2^64 decisions in all", limiter, rule)
	}
	c.Add(a, n)
	return nil
}

// limiterTotal sums the counts of a limiter's rules. addSample bounds each
// rule's decisions to 2^64; their sum is bounded here, where it would wrap
// around (two rules of 2^63 divergent decisions summed to none, and the gate
// passed).
func limiterTotal(limiter string, rules map[string]*rollout.Counts) (rollout.Counts, error) {
	var total rollout.Counts
	for _, c := range rules {
		if c.Compared()+c.Failed > math.MaxUint64-(total.Compared()+total.Failed) {
			return rollout.Counts{}, fmt.Errorf("limiter %s: its series count more than 2^64 decisions in all", limiter)
		}
		total.Agree += c.Agree
		total.NewOnly += c.NewOnly
		total.LegacyOnly += c.LegacyOnly
		total.Failed += c.Failed
	}
	return total, nil
}

// scrapeInto reads one /metrics URL or file and adds its decision counters.
func scrapeInto(ctx context.Context, src, family string, counts map[string]map[string]*rollout.Counts) error {
	body, err := openSource(ctx, src)
	src = shownSource(src) // what the messages name
	if err != nil {
		return err
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, maxScrape+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if len(data) > maxScrape {
		return fmt.Errorf("read %s: more than %d MiB", src, maxScrape>>20)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(data)))
	if err != nil {
		return fmt.Errorf("parse %s (text exposition format): %w", src, err)
	}
	fam, ok := fams[family]
	if !ok {
		return nil
	}
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		if m.GetCounter() == nil {
			return fmt.Errorf("%s: %s is not a counter", src, family)
		}
		if err := addSample(counts, labels["rate_limiter"], labels["rule"], labels["agreement"], m.GetCounter().GetValue()); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	return nil
}

func openSource(ctx context.Context, src string) (io.ReadCloser, error) {
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		f, err := os.Open(src)
		if err != nil {
			return nil, err
		}
		return f, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: not a valid URL", shownURL(src)) // err quotes it
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4") // the text format, never protobuf
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", shownURL(src), err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fetch %s: %s", shownURL(src), resp.Status)
	}
	return resp.Body, nil
}

// shownURL is how a URL of the command line appears in messages and
// reports: its password hidden (url.URL.Redacted), or, when it does not
// parse, not at all if it may hold one.
func shownURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err == nil:
		return u.Redacted()
	case strings.Contains(s, "@"):
		return "(a URL not shown: it may hold a password)"
	}
	return strconv.Quote(s)
}

// shownSource is how a --metrics source appears: a URL as shownURL shows
// it, a file by its name.
func shownSource(src string) string {
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		return shownURL(src)
	}
	return src
}

// promResponse is the part of the Prometheus HTTP API's answer the gate reads.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// inNamespace joins a job and its namespace label in the name of a job: the
// shipped rules and alerts keep both, so one job name in two namespaces (a
// service deployed twice) is two jobs.
const inNamespace = " in namespace "

// queryPrometheus sums each series' increase over window, per job (with its
// namespace label), limiter, rule and agreement, with an instant query at
// the server's now: of one scrape job and namespace, or of all ("" job, ""
// ns). It returns the counts and, per limiter, the jobs that reported it.
func queryPrometheus(ctx context.Context, base, family string, window time.Duration, job, ns string) (map[string]map[string]*rollout.Counts, map[string][]string, error) {
	var matchers []string
	if job != "" {
		matchers = append(matchers, "job="+strconv.Quote(job))
	}
	if ns != "" {
		matchers = append(matchers, "namespace="+strconv.Quote(ns))
	}
	selector := family
	if len(matchers) > 0 {
		selector += "{" + strings.Join(matchers, ",") + "}"
	}
	q := fmt.Sprintf("sum by (job, namespace, rate_limiter, rule, agreement) (increase(%s[%ds]))", selector, int64(window/time.Second))
	u, err := url.Parse(strings.TrimRight(base, "/") + "/api/v1/query")
	base = shownURL(base) // what the messages name
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil, fmt.Errorf("--prometheus %s is not an http(s) URL", base)
	}
	u.RawQuery = url.Values{"query": {q}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("query %s: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxScrape+1))
	if err != nil {
		return nil, nil, fmt.Errorf("query %s: %w", base, err)
	}
	if len(data) > maxScrape {
		return nil, nil, fmt.Errorf("query %s: answer over %d MiB", base, maxScrape>>20)
	}
	var pr promResponse
	if err := json.Unmarshal(data, &pr); err != nil {
		return nil, nil, fmt.Errorf("query %s: HTTP %s, not a Prometheus API answer: %w", base, resp.Status, err)
	}
	if pr.Status != "success" {
		return nil, nil, fmt.Errorf("query %s: %s: %s (query %s)", base, pr.ErrorType, pr.Error, q)
	}
	if pr.Data.ResultType != "vector" {
		return nil, nil, fmt.Errorf("query %s: result type %q, want vector", base, pr.Data.ResultType)
	}
	counts := map[string]map[string]*rollout.Counts{}
	seen := map[string]map[string]bool{} // limiter → jobs
	for _, s := range pr.Data.Result {
		str, ok := s.Value[1].(string)
		if !ok {
			return nil, nil, errors.New("query answer: a sample value is not a string")
		}
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("query answer: sample value %q: %w", str, err)
		}
		m := s.Metric
		if err := addSample(counts, m["rate_limiter"], m["rule"], m["agreement"], v); err != nil {
			return nil, nil, fmt.Errorf("query answer: %w", err)
		}
		j := m["job"]
		if ns := m["namespace"]; ns != "" {
			j += inNamespace + ns
		}
		if j != "" {
			if seen[m["rate_limiter"]] == nil {
				seen[m["rate_limiter"]] = map[string]bool{}
			}
			seen[m["rate_limiter"]][j] = true
		}
	}
	jobs := make(map[string][]string, len(seen))
	for l, js := range seen {
		jobs[l] = slices.Sorted(maps.Keys(js))
	}
	return counts, jobs, nil
}

// noSeries is the reason of a gate that found nothing to judge.
func noSeries(family, source string) string {
	return fmt.Sprintf("no %s series in %s: nothing to judge (is observe.RolloutMetrics registered and rollout.New given it?)", family, source)
}
