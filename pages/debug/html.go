package debug

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html/template"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// style is the page's only stylesheet. The Content-Security-Policy allows it by
// hash and allows nothing else: no scripts, no remote resources.
const style = `
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1f2328;background:#fff}
h1{font-size:1.5rem;margin:0 0 .25rem}h2{font-size:1.2rem;margin:0 0 .5rem}h3{font-size:1rem;margin:1rem 0 .4rem}
.meta{color:#59636e;margin:0 0 1rem}
section.limiter{border:1px solid #d1d9e0;border-radius:6px;padding:1rem;margin:0 0 1.25rem}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;margin:0}dt{color:#59636e}dd{margin:0}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d1d9e0;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,monospace;background:#f6f8fa;padding:0 .2rem;border-radius:3px}
.state{font-weight:600;padding:0 .4rem;border-radius:3px}.state-closed{background:#dafbe1}.state-open{background:#ffebe9}.state-half-open{background:#fff8c5}
.mode-shadow{background:#fff8c5}.mode-enforce{background:#dafbe1}
.tier{color:#59636e}.action-log{color:#9a6700}.action-skip{color:#0969da}.error{color:#d1242f}.none{color:#59636e}
`

var contentSecurityPolicy = func() string {
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"style":    func() template.CSS { return template.CSS(style) },
	"ago":      ago,
	"age":      func(s float64) string { return age(time.Duration(s * float64(time.Second))) },
	"seconds":  func(s float64) string { return fmtDuration(time.Duration(s * float64(time.Second))) },
	"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"matchers": matchers,
	"join":     strings.Join,
	"row":      func(i int, r RuleView) ruleRow { return ruleRow{Index: i + 1, Rule: r} },
	"deref":    func(p *float64) float64 { return *p },
	"deref64":  func(p *int64) int64 { return *p },
	"percent":  func(r float64) string { return strconv.FormatFloat(100*r, 'f', 3, 64) + "%" },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Rate limits</title>
<style>{{style}}</style>
</head>
<body>
<h1>Rate limits</h1>
<p class="meta">Generated <time datetime="{{rfc3339 .GeneratedAt}}">{{rfc3339 .GeneratedAt}}</time> · {{len .Limiters}} limiter(s) · <a href="?format=json">JSON</a></p>
{{- with .RulesService}}
<p class="rules-service" id="rules-service" data-breaker="{{if .BreakerOpen}}open{{else}}closed{{end}}">Rules service (remote tier) for service <code>{{.Service}}</code>: {{.Entries}} cached answer(s); checks: {{.Hits}} hit(s), {{.Stale}} stale, {{.Misses}} miss(es), {{.Skipped}} skipped; calls: {{.Calls}}, {{.Failures}} failed ({{.Invalid}} invalid answer(s)); breaker <span class="state state-{{if .BreakerOpen}}open{{else}}closed{{end}}">{{if .BreakerOpen}}open{{else}}closed{{end}}</span></p>
{{- end}}
{{- $now := .GeneratedAt}}
{{- if not .Limiters}}
<p class="none" id="no-limiters">No limiter is registered.</p>
{{- end}}
{{- range .Limiters}}
<section class="limiter" id="limiter-{{.Name}}" data-limiter="{{.Name}}">
<h2>{{.Name}}</h2>
<dl>
<dt>Circuit breaker</dt><dd><span class="state state-{{.Breaker}}" data-breaker="{{.Breaker}}">{{.Breaker}}</span></dd>
<dt>Mode</dt><dd><span class="state mode-{{.Mode}}" data-mode="{{.Mode}}">{{.Mode}}</span>{{if eq .Mode "shadow"}} <span class="none">counts, never blocks</span>{{end}}</dd>
<dt>Rollout</dt><dd class="rollout">
{{- with .Rollout}}{{if not .Compared}}<span class="none">no decisions compared</span>{{if .Failed}} ({{.Failed}} failed open){{end}}{{else}}<span data-divergence="{{printf "%.6f" .Ratio}}" data-below-gate="{{.BelowGate}}">{{percent .Ratio}} divergent</span> ({{.Divergent}} of {{.Compared}} compared{{if .Failed}}, {{.Failed}} failed open{{end}}) since the process started: {{if .BelowGate}}below{{else}}<span class="error">at or above</span>{{end}} the 0.5 % gate
{{- range .Rules}}{{if .Counts.Divergent}}<br><code>{{.Rule}}</code>: {{.Counts.NewOnly}} blocked only by the new limiter, {{.Counts.LegacyOnly}} only by the legacy check{{end}}{{end}}{{end}}
{{- else}}<span class="none">no decisions compared</span>{{end -}}
</dd>
<dt>Key prefix</dt><dd><code>{{.KeyPrefix}}</code></dd>
<dt>Rule store</dt><dd class="rule-store">
{{- with .RuleStore}}
{{- if .RefreshedAt}}refreshed <span data-replica-age="{{printf "%.0f" (deref .ReplicaAge)}}">{{age (deref .ReplicaAge)}} ago</span> (<time datetime="{{rfc3339 .RefreshedAt}}">{{rfc3339 .RefreshedAt}}</time>)
{{- else}}<span class="error" data-replica-age="never">never refreshed: serving the compiled tiers</span>{{end}}
{{- with .RefreshError}}; <span class="error refresh-error">last refresh failed: {{.}}</span>{{end}}
{{- else}}<span class="none">not managed by a rule store</span>{{end -}}
</dd>
</dl>
<h3>Effective rules, in evaluation order</h3>
{{- if .Rules}}
<table class="rules">
<thead><tr><th>#</th><th>Rule</th><th>Tier</th><th>Action</th><th>Match</th><th>Characteristics</th><th>Limit</th><th>Period</th><th>Ban</th><th>Blocks (interval / previous / total)</th></tr></thead>
<tbody>
{{- range $i, $r := .Rules}}
<tr data-rule="{{.Name}}" data-tier="{{.Tier}}" data-action="{{.Action}}">{{template "rule" (row $i $r)}}<td class="num">{{with .Blocks}}<span data-blocks="{{.Total}}">{{.Pending}} / {{.Previous}} / {{.Total}}</span>{{else}}<span class="none">0</span>{{end}}</td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p class="none">No rules: every check is allowed.</p>
{{- end}}
{{- if .Overridden}}
<h3>Overridden rules</h3>
<table class="overridden">
<thead><tr><th>#</th><th>Rule</th><th>Tier</th><th>Action</th><th>Match</th><th>Characteristics</th><th>Limit</th><th>Period</th><th>Ban</th><th>Overridden by</th></tr></thead>
<tbody>
{{- range $i, $r := .Overridden}}
<tr data-rule="{{.Name}}" data-tier="{{.Tier}}" data-overridden-by="{{.OverriddenBy}}">{{template "rule" (row $i $r)}}<td>{{.OverriddenBy}}</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}
<h3>Recent blocks</h3>
{{- if .Blocks}}
<table class="blocks">
<thead><tr><th>Rule</th><th>This interval</th><th>Previous interval</th><th>Total</th><th>Last block</th></tr></thead>
<tbody>
{{- range .Blocks}}
<tr data-block-rule="{{.Rule}}"><td>{{.Rule}}</td><td class="num">{{.Pending}}</td><td class="num">{{.Previous}}</td><td class="num">{{.Total}}</td><td><time datetime="{{rfc3339 .Last}}">{{ago $now .Last}}</time></td></tr>
{{- end}}
</tbody>
</table>
{{- else}}
<p class="none no-blocks">No blocks since the process started.</p>
{{- end}}
</section>
{{- end}}
</body>
</html>
{{define "rule" -}}
<td class="num">{{.Index}}</td><td><code>{{.Rule.Name}}</code>{{with .Rule.Description}}<br><small>{{.}}</small>{{end}}</td><td class="tier">{{or .Rule.Tier "—"}}</td><td class="action-{{.Rule.Action}}">{{.Rule.Action}}</td><td>{{range matchers .Rule.Match}}<code>{{.}}</code> {{else}}<span class="none">every request</span>{{end}}</td><td>{{with .Rule.Characteristics}}{{join . ", "}}{{else}}<span class="none">—</span>{{end}}{{if .Rule.CountMissing}}<br><small class="count-missing">identifiers lacking it share one counter</small>{{end}}{{with .Rule.CountDistinct}}<br>distinct <code>{{.}}</code>{{end}}</td><td class="num">{{if .Rule.Limit}}{{deref64 .Rule.Limit}}{{else if .Rule.Dynamic}}per check{{else}}—{{end}}{{with .Rule.Algorithm}}<br><small class="algorithm">{{.}}{{with $.Rule.Burst}}, burst {{.}}{{end}}</small>{{end}}</td><td>{{if .Rule.Period}}{{seconds (deref .Rule.Period)}}{{else if .Rule.Dynamic}}per check{{else}}—{{end}}</td><td>{{if .Rule.BanFor}}{{seconds .Rule.BanFor}}{{else}}—{{end}}</td>
{{- end}}`))

type ruleRow struct {
	Index int
	Rule  RuleView
}

// renderHTML renders into a buffer, so that a template error becomes a 500
// instead of half a page.
func renderHTML(s Snapshot) ([]byte, error) {
	var buf bytes.Buffer
	if err := page.Execute(&buf, s); err != nil {
		return nil, fmt.Errorf("debug: render: %w", err)
	}
	return buf.Bytes(), nil
}

// matchers renders a rule's match entries, sorted by property, in the
// spelling of the config files.
func matchers(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		switch v := m[k].(type) {
		case string:
			out = append(out, k+": "+strconv.Quote(v))
		case map[string]string:
			out = append(out, fmt.Sprintf("%s: {regex: %q}", k, v["regex"]))
		case map[string][]string:
			q := slices.Clone(v["one_of"])
			for i := range q {
				q[i] = strconv.Quote(q[i])
			}
			out = append(out, fmt.Sprintf("%s: {one_of: [%s]}", k, strings.Join(q, ", ")))
		}
	}
	return out
}

// fmtDuration prints whole units without zero tails: 1m, 1h30m, 1.5s, 250ms.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// age prints a measured duration to a precision a reader needs: whole
// milliseconds under a second, tenths of a second under a minute, whole
// seconds above.
func age(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmtDuration(d.Round(time.Millisecond))
	case d < time.Minute:
		return fmtDuration(d.Round(100 * time.Millisecond))
	}
	return fmtDuration(d.Round(time.Second))
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return fmtDuration(d.Truncate(time.Second)) + " ago"
}
