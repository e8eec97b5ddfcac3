package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
	"github.com/ratekit/ratekit/ratelimittest"
)

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "namespace", "instance"}

// Every selector of the rules and of the dashboard's queries names a family
// the collectors export, with labels they have, and a value of an = or =~
// matcher that a real check produces; every by and on names such a label
// too. The series are scraped from a real registry after real checks (a
// block, a ban, a shadow rule, a check failed open, a failed refresh, a
// rejected file, a rollout): a panel or an alert on a series that does not
// exist stays silent in an incident.
func TestSelectorsMatchExportedSeries(t *testing.T) {
	exported := scrape(t)

	rules, err := os.ReadFile(rulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{} // where -> PromQL
	recorded := map[string]map[string]map[string]bool{}
	lines := strings.Split(string(rules), "\n")
	name := ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if n, ok := strings.CutPrefix(l, "- record: "); ok {
			name = n
		}
		if n, ok := strings.CutPrefix(l, "- alert: "); ok {
			name = n
		}
		e, ok := strings.CutPrefix(l, "expr: ")
		if !ok {
			continue
		}
		if e == "|" { // a block: the lines indented deeper
			indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
			e = ""
			for i+1 < len(lines) && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent {
				i++
				e += lines[i] + "\n"
			}
		}
		exprs["rule "+name] = e
	}
	if len(exprs) < 16 {
		t.Fatalf("%d expressions read from the rules, want every record and alert:\n%v", len(exprs), exprs)
	}
	// A recorded series carries the labels of its expression's outer
	// aggregation, with the values of the families it reads.
	for where, e := range exprs {
		rec, ok := strings.CutPrefix(where, "rule ratelimit:")
		if !ok {
			continue
		}
		labels := map[string]map[string]bool{}
		if m := byClause.FindStringSubmatch(e); m != nil {
			for _, l := range strings.Split(m[2], ", ") {
				if l != "le" { // histogram_quantile takes it away
					labels[l] = map[string]bool{}
				}
			}
		}
		for _, fam := range referenced(e) {
			for l, vs := range exported[fam] {
				if labels[l] != nil {
					for v := range vs {
						labels[l][v] = true
					}
				}
			}
		}
		recorded["ratelimit:"+rec] = labels
	}

	for _, p := range dashboardPanels(t) {
		for i, q := range p.Targets {
			exprs["panel "+p.Title+" #"+string(rune('A'+i))] = q.Expr
		}
	}

	for where, e := range exprs {
		var inExpr []string // the labels the expression's series carry
		for _, m := range selector.FindAllStringSubmatch(e, -1) {
			fam, matchers := m[1], m[3]
			labels, ok := exported[fam]
			if strings.Contains(fam, ":") {
				labels, ok = recorded[fam]
			}
			if !ok {
				t.Errorf("%s: %s is neither exported nor recorded", where, fam)
				continue
			}
			for l := range labels {
				inExpr = append(inExpr, l)
			}
			for _, mm := range matcher.FindAllStringSubmatch(matchers, -1) {
				label, op, value := mm[1], mm[2], mm[3]
				if slices.Contains(targetLabels, label) {
					continue
				}
				values, ok := labels[label]
				if !ok {
					t.Errorf("%s: %s has no label %s", where, fam, label)
					continue
				}
				if strings.Contains(value, "$") || (op != "=" && op != "=~") {
					continue // a dashboard variable, or a matcher that excludes
				}
				re := regexp.MustCompile("^(?:" + regexp.QuoteMeta(value) + ")$")
				if op == "=~" {
					re = regexp.MustCompile("^(?:" + value + ")$")
				}
				if !slices.ContainsFunc(setKeys(values), re.MatchString) {
					t.Errorf("%s: %s{%s%s%q} matches no exported value (%v)", where, fam, label, op, value, setKeys(values))
				}
			}
		}
		for _, m := range byClause.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(m[2], ", ") {
				if !slices.Contains(targetLabels, l) && !slices.Contains(inExpr, l) {
					t.Errorf("%s: %s (%s) names a label no series of the expression has", where, m[0], l)
				}
			}
		}
	}
}

var (
	// selector finds a series name of ratekit's and its matchers.
	selector = regexp.MustCompile(`\b(ratelimit[_:][a-z0-9_:]+)(\{([^}]*)\})?`)
	matcher  = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byClause = regexp.MustCompile(`\b(by|on) \(([^)]*)\)`)
)

// referenced returns the exported families an expression reads.
func referenced(e string) []string {
	var out []string
	for _, m := range selector.FindAllStringSubmatch(e, -1) {
		if !strings.Contains(m[1], ":") {
			out = append(out, m[1])
		}
	}
	return out
}

func setKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

type panel struct {
	Title   string
	Targets []struct{ Expr string }
}

func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir(t), "grafana", "ratekit.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []panel }
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("ratekit.json: %v", err)
	}
	return dash.Panels
}

// scrape runs real checks through observe's collectors and returns what a
// registry exports: family -> label -> values (a histogram's series under
// _bucket, with le, _sum and _count).
func scrape(t *testing.T) map[string]map[string]map[string]bool {
	t.Helper()
	ctx := context.Background()
	m := observe.NewMetrics(observe.MetricsOptions{})
	rm := observe.NewRolloutMetrics(observe.MetricsOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, rm)
	store := ratelimittest.NewStore(ratelimittest.NewClock(time.Unix(1_700_000_000, 0)))
	l, err := ratelimit.New(ratelimit.Config{Name: "http_request", Store: store, Observer: m.Observe, Logger: slog.New(slog.DiscardHandler),
		Rules: []ratelimit.Rule{
			{Name: "skip_health_checks", Action: ratelimit.ActionSkip, Match: map[string]ratelimit.Matcher{"path": ratelimit.Equal("/healthz")}},
			{Name: "per_ip", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute, BanFor: time.Minute},
			{Name: "per_ip_shadow", Characteristics: []string{"ip"}, Limit: 1, Period: time.Minute, Action: ratelimit.ActionLog},
		}})
	if err != nil {
		t.Fatal(err)
	}
	m.Init(l)
	rm.Init(l)
	id := ratelimit.Identifier{"ip": "192.0.2.1"}
	for range 3 { // allow, block (the ban starts), banned
		l.Check(ctx, id)
	}
	l.Check(ctx, ratelimit.Identifier{"ip": "192.0.2.1", "path": "/healthz"}) // skip
	store.FailWith(errors.New("redis down"))
	if r := l.Check(ctx, ratelimit.Identifier{"ip": "192.0.2.2"}); r.Err == nil {
		t.Fatal("a check on a failing store did not fail open")
	}
	m.RuleStoreRefresh("http_request", errors.New("redis down"))
	m.RuleStoreRefresh("http_request", nil)
	m.ConfigRejected("rate_limits.yaml")
	for _, a := range []rollout.Agreement{rollout.Agree, rollout.NewOnly, rollout.LegacyOnly, rollout.Failed} {
		rm.RecordDecision(ctx, "http_request", &rollout.Decision{Agreement: a, Rule: "per_ip"})
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]bool{}
	add := func(fam, label, value string) {
		if out[fam] == nil {
			out[fam] = map[string]map[string]bool{}
		}
		if label == "" {
			return
		}
		if out[fam][label] == nil {
			out[fam][label] = map[string]bool{}
		}
		out[fam][label][value] = true
	}
	for _, f := range families {
		names := []string{f.GetName()}
		if f.GetMetric()[0].GetHistogram() != nil {
			names = []string{f.GetName() + "_bucket", f.GetName() + "_sum", f.GetName() + "_count"}
		}
		for _, s := range f.GetMetric() {
			for _, n := range names {
				add(n, "", "")
				for _, lp := range s.GetLabel() {
					add(n, lp.GetName(), lp.GetValue())
				}
			}
			if s.GetHistogram() != nil {
				add(f.GetName()+"_bucket", "le", "+Inf")
			}
		}
	}
	return out
}
