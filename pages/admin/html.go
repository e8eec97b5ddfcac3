package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
	"slices"
	"strings"
)

// style is the page's only stylesheet. The Content-Security-Policy allows it
// by hash and allows no script at all.
const style = `
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1f2328;background:#fff}
main{max-width:1200px;margin:0 auto;padding:1rem 1.5rem}
h1{font-size:1.5rem;margin:.25rem 0}h2{font-size:1.2rem;margin:1.5rem 0 .5rem}h3{font-size:1rem;margin:1rem 0 .4rem}
a{color:#0969da}.meta,.hint,.none{color:#59636e}.hint{font-size:.85rem}
.box{border:1px solid #d1d9e0;border-radius:6px;padding:1rem;margin:0 0 1rem}
.scroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #d1d9e0;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:13px ui-monospace,monospace;background:#f6f8fa;padding:0 .2rem;border-radius:3px;overflow-wrap:anywhere}
.action-log{color:#9a6700}.action-skip{color:#0969da;font-weight:600}.bypass{background:#ddf4ff;border-radius:3px;padding:0 .3rem}
.override{color:#59636e;font-size:.85rem}
.notice{border-radius:6px;padding:.6rem .8rem;margin:0 0 1rem}.ok{background:#dafbe1}.warn{background:#fff8c5}.bad{background:#ffebe9}
.error{color:#d1242f}ul.errors{margin:.2rem 0;padding-left:1.2rem;color:#d1242f}
form.rule{display:grid;grid-template-columns:minmax(9rem,max-content) 1fr;gap:.5rem 1rem;align-items:start}
form.rule .full{grid-column:1/-1}
label{font-weight:600}input[type=text],input[type=number],select,textarea{font:inherit;padding:.25rem .4rem;border:1px solid #8c959f;border-radius:4px;max-width:100%}
input[type=text],textarea{width:28rem}textarea{height:3.2rem}
[aria-invalid=true]{border-color:#d1242f;outline:1px solid #d1242f}
fieldset{border:1px solid #d1d9e0;border-radius:6px;margin:0;padding:.5rem .8rem}legend{font-weight:600}
.matchrow{display:grid;grid-template-columns:8rem 9rem 1fr;gap:.4rem;align-items:start;margin:.25rem 0}
button{font:inherit;padding:.3rem .9rem;border-radius:6px;border:1px solid #1f883d;background:#1f883d;color:#fff;cursor:pointer}
button.secondary{background:#f6f8fa;color:#1f2328;border-color:#8c959f}button.danger{background:#cf222e;border-color:#cf222e}
form.inline{display:inline}
.idrow{display:grid;grid-template-columns:8rem 1fr;gap:.4rem;margin:.25rem 0}
`

var contentSecurityPolicy = func() string {
	sum := sha256.Sum256([]byte(style))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}()

// pageData is everything a page shows; the zero parts are left out.
type pageData struct {
	Session session
	Error   string // an error page
	Index   []indexRow
	Limiter *limiterView
	Form    *ruleForm
	Message string
	// MessageWarn shows Message as a warning: the write touched nothing.
	MessageWarn bool
	// Conflict: a save or delete met a concurrent change.
	Conflict bool

	Explain          *explainView
	Identifier       []identifierField
	IdentifierErrors []string
	ConfirmClear     bool
}

// Errors returns the problems of one form field.
func (f *ruleForm) FieldErrors(field string) []string { return f.Errors[field] }

// HasChar reports whether property p is ticked as a characteristic.
func (f *ruleForm) HasChar(p string) bool { return slices.Contains(f.Chars, p) }

// CharOrder returns the properties in the order of their characteristic
// boxes: the rule's characteristics first, in its order, then the others.
// A browser sends the ticked boxes in this order, so a save keeps the
// rule's order, which its counter keys follow.
func (f *ruleForm) CharOrder(props []string) []string {
	out := make([]string, 0, len(props))
	for _, c := range f.Chars {
		if slices.Contains(props, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, p := range props {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// MatchOf returns the match row of property p.
func (f *ruleForm) MatchOf(p string) matchField { return f.Match[p] }

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"style":      func() template.CSS { return template.CSS(style) },
	"join":       strings.Join,
	"short":      short,
	"pub":        func(p pageData, rows []ruleRow) pubRows { return pubRows{p, rows} },
	"actions":    func() []string { return []string{"limit", "log", "skip"} },
	"algorithms": func() []string { return []string{"fixed_window", "sliding_window", "token_bucket"} },
	"idfield":    func(p string) identifierField { return identifierField{Property: p} },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{with .Limiter}}{{.Name}} · {{end}}Rate-limit rules</title>
<style>{{style}}</style>
</head>
<body>
<main>
<p class="meta"><a href="?">All limiters</a>{{if .Session.CanWrite}} · signed in as <strong id="who">{{.Session.Who}}</strong>{{else if not .Error}} · <span id="read-only">read-only: you can look, not change</span>{{end}}</p>
{{- if .Error}}
<h1>Rate-limit rules</h1>
<p class="notice bad" id="error" role="alert">{{.Error}}</p>
{{- else if .Limiter}}{{template "limiter" .}}
{{- else}}{{template "index" .}}{{end}}
</main>
</body>
</html>
{{- define "index" -}}
<h1>Rate-limit rules</h1>
<p class="meta">Every limiter of available_limiters.yaml and of the rule store. Open one to see its tiers and to publish rules.</p>
<div class="scroll"><table id="limiters">
<thead><tr><th>Limiter</th><th>Description</th><th>Rule store</th><th>Published rules</th><th>Skip rules (bypasses)</th></tr></thead>
<tbody>
{{- range .Index}}
<tr data-limiter="{{.Name}}"><td><a href="?limiter={{.Name}}"><code>{{.Name}}</code></a></td><td>{{.Description}}{{if not .Declared}} <span class="error">not declared in available_limiters.yaml{{if not .OrphanSince.IsZero}} (orphan since {{.OrphanSince.UTC.Format "2006-01-02 15:04"}}){{end}}</span>{{end}}</td><td>{{.Document}}</td><td class="num">{{.Published}}</td><td class="num">{{if .Skips}}<span class="bypass">{{.Skips}}</span>{{else}}0{{end}}</td></tr>
{{- else}}
<tr><td colspan="5" class="none">No limiter is declared.</td></tr>
{{- end}}
</tbody></table></div>
{{- end}}
{{- define "limiter" -}}
{{with .Limiter}}
<h1>Limiter <code id="limiter-name">{{.Name}}</code></h1>
<p class="meta">{{.Description}}</p>
<p class="meta">Properties: {{range .Properties}}<code>{{.}}</code> {{else}}none{{end}}
 · Skip rules: {{if .SkipsRestricted}}{{if .AllowedSkips}}only {{range .AllowedSkips}}<code>{{.}}</code> {{end}}{{else}}not allowed{{end}}{{else}}any name{{end}}
 · Mode: <span id="mode">{{if .Mode}}{{.Mode}}{{if eq .Mode "shadow"}} (counts, never blocks){{end}}, set by the {{.ModeFrom}} tier{{else}}set by no tier: the services' own (enforce unless they configure shadow){{end}}</span>
 · Document <code>{{.Key}}</code>: {{if .HasDocument}}version <code id="version">{{short .Version}}</code>{{else}}<span id="version">none yet</span>{{end}}</p>
{{- if and .PublishedMode $.Session.CanWrite}}
<form method="post" action="?limiter={{.Name}}" id="delete-mode-form"><p class="meta">The published tier sets mode <code>{{.PublishedMode}}</code>{{if ne .ModeFrom "published"}} (outranked by the {{.ModeFrom}} tier's){{end}}: it outlives the published rules and applies whenever no higher tier sets a mode.
<input type="hidden" name="csrf" value="{{$.Session.CSRF}}"><input type="hidden" name="op" value="delete_mode"><input type="hidden" name="limiter" value="{{.Name}}"><input type="hidden" name="version" value="{{.Version}}"><button type="submit" id="delete-mode">Delete the published mode</button></p></form>
{{- end}}
{{- with .DocumentError}}<p class="notice bad" role="alert" id="document-error">The stored document is invalid, the services keep their last good rules: {{.}}</p>{{end}}
{{- end}}
{{- if and .Limiter .Limiter.DocumentError .Session.CanWrite}}
<form method="post" action="?limiter={{.Limiter.Name}}" id="remove-form" class="notice warn"><p>Publishing to it is refused until it is valid again. <strong>Remove the document</strong> <code>{{.Limiter.Key}}</code>? Its published rules are lost; the services run on their own files (rate_limits.yaml and the defaults) until they seed it again, at their next refresh when they seed their documents.</p>
<input type="hidden" name="csrf" value="{{.Session.CSRF}}"><input type="hidden" name="op" value="remove"><input type="hidden" name="limiter" value="{{.Limiter.Name}}"><input type="hidden" name="version" value="{{.Limiter.Version}}"><input type="hidden" name="confirm" value="yes"><button type="submit" class="danger" id="confirm-remove">Remove the invalid document</button></form>
{{- end}}
{{- with .Message}}<p class="notice {{if $.MessageWarn}}warn{{else}}ok{{end}}" id="message" role="status">{{.}}</p>{{end}}
{{- if .Conflict}}<p class="notice warn" id="conflict" role="alert">Someone else changed the rules of this limiter since you opened this page; nothing was written. The rules below are the current ones.</p>{{end}}
{{- if and .Limiter (not .Limiter.Declared)}}{{with .Form}}{{with .FieldErrors ""}}<div id="form-errors" class="notice bad">{{template "errs" .}}</div>{{end}}{{end}}{{end}}
{{- with .Limiter}}
<h2>Effective rules, in evaluation order</h2>
<p class="hint">The first matching skip rule ends evaluation; a rule of a higher tier replaces the same-named rule of a lower tier and keeps its counter. Tiers, highest first: remote, file, published, default.</p>
{{template "rules" .Rows}}
{{- if .SkipsAll}}
<p class="notice warn" id="skips-all" role="note">Rule <code>{{.SkipsAll}}</code> is a skip rule without a match ahead of every counting rule: it skips every request, so this limiter counts and blocks nothing. To stop blocking but keep counting, set the limiter's mode to shadow instead.</p>
{{- end}}
{{- if .ExemptionWarnings}}
<div class="notice warn" id="exemption-warnings" role="note"><p>Default exemptions hold against every tier (docs/design.md#exemptions):</p><ul>{{range .ExemptionWarnings}}<li>{{.}}</li>{{end}}</ul>{{if .ExemptionWarningsOmitted}}<p id="exemption-warnings-omitted">and {{.ExemptionWarningsOmitted}} more warnings</p>{{end}}</div>
{{- end}}
{{- if .Overrides}}
<h3>Replaced rules</h3>
<ul id="overrides">{{range .Overrides}}<li data-overridden="{{.Tier}}/{{.Name}}">{{.OverriddenBy}} <code>{{.Name}}</code> replaces {{.Tier}} <code>{{.Name}}</code></li>{{end}}</ul>
{{- end}}
<h2>Tiers</h2>
{{- range .TierRows}}
<section class="box tier" data-tier="{{.Tier}}">
<h3>{{.Tier}} <span class="meta">— {{or .Source "not held"}}</span></h3>
{{- if eq .Tier "published"}}{{template "published" (pub $ .Rows)}}{{else}}{{template "rules" .Rows}}{{end}}
</section>
{{- end}}
{{- end}}
{{- if and .Session.CanWrite .Limiter.Declared}}{{template "form" .}}{{end}}
{{template "explain" .}}
{{- end}}
{{- define "rules" -}}
{{- if .}}
<div class="scroll"><table class="rules">
<thead><tr><th>#</th><th>Rule</th><th>Tier</th><th>Action</th><th>Match</th><th>Characteristics</th><th>Limit</th><th>Period</th><th>Ban</th></tr></thead>
<tbody>
{{- range .}}
<tr data-rule="{{.Name}}" data-tier="{{.Tier}}" data-action="{{.Action}}"{{with .OverriddenBy}} data-overridden-by="{{.}}"{{end}}>{{template "cells" .}}</tr>
{{- end}}
</tbody></table></div>
{{- else}}<p class="none">No rules.</p>{{end}}
{{- end}}
{{- define "cells" -}}
<td class="num">{{.Index}}</td><td><code>{{.Name}}</code>{{with .Description}}<br><small class="description">{{.}}</small>{{end}}{{range .Replaces}}<br><span class="override">replaces {{.}} <code>{{$.Name}}</code></span>{{end}}{{with .OverriddenBy}}<br><span class="override">replaced by {{.}} <code>{{$.Name}}</code></span>{{end}}</td><td>{{.Tier}}</td><td class="action-{{.Action}}">{{if eq .Action "skip"}}<span class="bypass" title="a skip rule bypasses the limiter for every request it matches">skip (bypass)</span>{{else}}{{.Action}}{{end}}</td><td>{{range .Match}}<code>{{.}}</code> {{else}}<span class="none">every request</span>{{end}}</td><td>{{with .Characteristics}}{{join . ", "}}{{else}}<span class="none">—</span>{{end}}{{if .CountMissing}}<br><small class="count-missing">identifiers lacking it share one counter</small>{{end}}{{with .CountDistinct}}<br>distinct <code>{{.}}</code>{{end}}</td><td class="num">{{.Limit}}{{with .Algorithm}}<br><small class="algorithm">{{.}}</small>{{end}}</td><td>{{.Period}}</td><td>{{.Ban}}</td>
{{- end}}
{{- define "published" -}}
{{- if .Rows}}
<div class="scroll"><table class="rules" id="published">
<thead><tr><th>#</th><th>Rule</th><th>Tier</th><th>Action</th><th>Match</th><th>Characteristics</th><th>Limit</th><th>Period</th><th>Ban</th>{{if .Page.Session.CanWrite}}<th>Change</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr data-rule="{{.Name}}" data-tier="published" data-action="{{.Action}}">{{template "cells" .}}{{if $.Page.Session.CanWrite}}<td>{{if $.Page.Limiter.Declared}}<a href="?limiter={{$.Page.Limiter.Name}}&amp;edit={{.Name}}" data-edit="{{.Name}}">Edit</a>{{end}}
<form class="inline" method="post" action="?limiter={{$.Page.Limiter.Name}}"><input type="hidden" name="csrf" value="{{$.Page.Session.CSRF}}"><input type="hidden" name="op" value="delete"><input type="hidden" name="limiter" value="{{$.Page.Limiter.Name}}"><input type="hidden" name="version" value="{{$.Page.Limiter.Version}}"><input type="hidden" name="rule" value="{{.Name}}"><button class="danger" type="submit" data-delete="{{.Name}}" aria-label="Delete published rule {{.Name}}">Delete</button></form></td>{{end}}</tr>
{{- end}}
</tbody></table></div>
{{- else}}<p class="none">No published rules.</p>{{end}}
{{- end}}
{{- define "errs" -}}
{{- if .}}<ul class="errors" role="alert">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{- end}}
{{- define "form" -}}
{{- $lv := .Limiter}}{{with .Form}}
<h2 id="editor">{{if .Edit}}Edit published rule <code>{{.Name}}</code>{{else}}Publish a rule{{end}}</h2>
<div class="box">
<p class="hint">A save goes through the publish API with the checks of rate_limits.yaml; nothing is written when one fails. The services apply it at their next refresh.</p>
{{- with .FieldErrors ""}}<div id="form-errors" class="notice bad">{{template "errs" .}}</div>{{end}}
<form class="rule" method="post" action="?limiter={{$lv.Name}}" id="rule-form" novalidate>
<input type="hidden" name="csrf" value="{{$.Session.CSRF}}"><input type="hidden" name="op" value="save"><input type="hidden" name="limiter" value="{{$lv.Name}}"><input type="hidden" name="version" value="{{.Version}}"><input type="hidden" name="mode" value="{{if .Edit}}edit{{else}}add{{end}}">
<label for="f-name">Name</label><div><input type="text" id="f-name" name="name" value="{{.Name}}" {{if .Edit}}readonly{{end}} maxlength="64" aria-describedby="h-name"{{if .FieldErrors "name"}} aria-invalid="true"{{end}}><div class="hint" id="h-name">a-z, 0-9 and _; a default rule's name replaces that rule, and a file or remote rule of the same name replaces this one</div><div data-error-for="name">{{template "errs" (.FieldErrors "name")}}</div></div>
<label for="f-action">Action</label><div><select id="f-action" name="action"{{if .FieldErrors "action"}} aria-invalid="true"{{end}}>{{$a := .Action}}{{range $opt := actions}}<option value="{{$opt}}"{{if eq $opt $a}} selected{{end}}>{{$opt}}</option>{{end}}</select><div class="hint">limit blocks, log only reports, skip bypasses the limiter</div><div data-error-for="action">{{template "errs" (.FieldErrors "action")}}</div></div>
<label for="f-limit">Limit</label><div><input type="number" min="1" id="f-limit" name="limit" value="{{.Limit}}"{{if .FieldErrors "limit"}} aria-invalid="true"{{end}}><div data-error-for="limit">{{template "errs" (.FieldErrors "limit")}}</div></div>
<label for="f-period">Period (seconds)</label><div><input type="number" min="1" id="f-period" name="period_s" value="{{.Period}}"{{if .FieldErrors "period_s"}} aria-invalid="true"{{end}}><div data-error-for="period_s">{{template "errs" (.FieldErrors "period_s")}}</div></div>
<label for="f-ban">Ban (seconds)</label><div><input type="number" min="1" id="f-ban" name="ban_for_s" value="{{.Ban}}"{{if .FieldErrors "ban_for_s"}} aria-invalid="true"{{end}}><div class="hint">keep blocking this long once the limit is crossed; empty for none</div><div data-error-for="ban_for_s">{{template "errs" (.FieldErrors "ban_for_s")}}</div></div>
<label for="f-algorithm">Algorithm</label><div><select id="f-algorithm" name="algorithm"{{if .FieldErrors "algorithm"}} aria-invalid="true"{{end}}>{{$g := .Algorithm}}{{range $opt := algorithms}}<option value="{{$opt}}"{{if or (eq $opt $g) (and (eq $g "") (eq $opt "fixed_window"))}} selected{{end}}>{{$opt}}</option>{{end}}</select><div class="hint">fixed_window counts per window; sliding_window smooths the window boundary; token_bucket allows a burst, then a steady rate (a change starts a fresh counter)</div><div data-error-for="algorithm">{{template "errs" (.FieldErrors "algorithm")}}</div></div>
<label for="f-burst">Burst</label><div><input type="number" min="1" id="f-burst" name="burst" value="{{.Burst}}"{{if .FieldErrors "burst"}} aria-invalid="true"{{end}}><div class="hint">token_bucket only: how many at once; empty for the limit</div><div data-error-for="burst">{{template "errs" (.FieldErrors "burst")}}</div></div>
<label>Characteristics</label><div><fieldset><legend class="hint">one counter per distinct value of (in this order: the rule's keys follow it)</legend>{{$f := .}}{{range .CharOrder $lv.Properties}}<label><input type="checkbox" name="characteristics" value="{{.}}"{{if $f.HasChar .}} checked{{end}}> {{.}}</label> {{end}}</fieldset><div data-error-for="characteristics">{{template "errs" (.FieldErrors "characteristics")}}</div></div>
<label for="f-missing">Count missing</label><div><label><input type="checkbox" id="f-missing" name="count_missing"{{if .Missing}} checked{{end}}{{if .FieldErrors "count_missing"}} aria-invalid="true"{{end}}> callers without a characteristic share one counter</label><div class="hint">off: the rule does not apply to them (the check is marked degraded)</div><div data-error-for="count_missing">{{template "errs" (.FieldErrors "count_missing")}}</div></div>
<label for="f-distinct">Count distinct</label><div><select id="f-distinct" name="count_distinct"{{if .FieldErrors "count_distinct"}} aria-invalid="true"{{end}}><option value="">— (count requests)</option>{{$d := .Distinct}}{{range $lv.Properties}}<option value="{{.}}"{{if eq . $d}} selected{{end}}>{{.}}</option>{{end}}</select><div data-error-for="count_distinct">{{template "errs" (.FieldErrors "count_distinct")}}</div></div>
<label>Match</label><div><fieldset><legend class="hint">every chosen property must match; none matches every request. One of: one value per line; a value with a line break, blanks at either end or another unprintable character is written in double quotes as a Go string, such as "a\nb".</legend>
{{- range $lv.Properties}}{{$m := $f.MatchOf .}}
<div class="matchrow"><label for="mk-{{.}}">{{.}}</label><select id="mk-{{.}}" name="match_kind.{{.}}" aria-label="how {{.}} matches"><option value=""{{if eq $m.Kind ""}} selected{{end}}>any value</option><option value="equality"{{if eq $m.Kind "equality"}} selected{{end}}>equals</option><option value="regex"{{if eq $m.Kind "regex"}} selected{{end}}>regex</option><option value="one_of"{{if eq $m.Kind "one_of"}} selected{{end}}>one of</option></select><textarea id="mv-{{.}}" name="match_value.{{.}}" aria-label="{{.}} match value"{{if $f.FieldErrors (printf "match.%s" .)}} aria-invalid="true"{{end}}>{{"\n"}}{{$m.Value}}</textarea></div><div data-error-for="match.{{.}}">{{template "errs" ($f.FieldErrors (printf "match.%s" .))}}</div>
{{- end}}</fieldset></div>
<label for="f-description">Description</label><div><textarea id="f-description" name="description" maxlength="1024"{{if .FieldErrors "description"}} aria-invalid="true"{{end}}>{{"\n"}}{{.Description}}</textarea><div data-error-for="description">{{template "errs" (.FieldErrors "description")}}</div></div>
<div class="full"><button type="submit" id="save">{{if .Edit}}Save changes{{else}}Publish rule{{end}}</button>{{if .Edit}} <a href="?limiter={{$lv.Name}}">Cancel</a>{{end}}</div>
</form>
</div>
{{- end}}
{{- end}}
{{- define "explain" -}}
{{- $lv := .Limiter}}
<h2 id="explain-box">Explain and lift a ban</h2>
<div class="box">
<form method="get" action="" id="explain-form">
<input type="hidden" name="limiter" value="{{$lv.Name}}">
<p class="hint">An identifier in, the verdict a check would give now out: nothing is counted. Leave a property empty when the identifier lacks it.</p>
{{- range .Identifier}}{{template "idrow" .}}{{else}}{{range $lv.Properties}}{{template "idrow" (idfield .)}}{{end}}{{end}}
{{template "errs" .IdentifierErrors}}
<button type="submit" name="explain" value="1" class="secondary" id="explain">Explain</button>
{{- if .Session.CanWrite}} <button type="submit" name="clear" value="1" class="secondary" id="clear">Lift ban / clear…</button>{{end}}
</form>
{{- with .Explain}}
<div id="explanation">
<p>Identifier: {{range .Identifier}}<code>{{.}}</code> {{else}}<span class="none">(empty)</span>{{end}}</p>
<p class="notice {{if .Blocked}}bad{{else}}ok{{end}}" id="verdict" data-blocked="{{.Blocked}}">Verdict: {{.Verdict}}</p>
{{- with .Error}}<p class="error">{{.}}</p>{{end}}
{{- with .Gateway}}<p class="hint" id="gateway-note">{{.}}</p>{{end}}
<div class="scroll"><table class="explain">
<thead><tr><th>#</th><th>Rule</th><th>Tier</th><th>Action</th><th>Matches</th><th>Result</th><th>Count / limit</th><th>Resets in</th></tr></thead>
<tbody>
{{- range .Rules}}
<tr data-rule="{{.Name}}" data-state="{{.State}}"><td class="num">{{.Index}}</td><td><code>{{.Name}}</code></td><td>{{.Tier}}</td><td>{{.Action}}</td><td>{{if .Matched}}yes{{else}}no{{end}}</td><td>{{.State}}{{with .Detail}}: {{.}}{{end}}</td><td class="num">{{if .Count}}{{.Count}} / {{.Limit}}{{end}}</td><td>{{.ResetIn}}{{if .Banned}} (ban){{end}}</td></tr>
{{- end}}
</tbody></table></div>
</div>
{{- end}}
{{- if and .ConfirmClear .Explain .Session.CanWrite}}
<form method="post" action="?limiter={{$lv.Name}}" id="clear-form" class="notice warn">
<p><strong>Lift the ban and clear the counters</strong> of limiter <code>{{$lv.Name}}</code> for {{range .Explain.Identifier}}<code>{{.}}</code> {{end}}? This deletes up to {{.Explain.Keys}} counter and ban keys; the identifier starts again from zero on every rule{{if .Explain.Shared}} but these, whose counter it shares with other clients (to lift their block, delete or change the rule): {{range $i, $s := .Explain.Shared}}{{if $i}}; {{end}}{{$s}}{{end}}{{end}}.</p>
<input type="hidden" name="csrf" value="{{.Session.CSRF}}"><input type="hidden" name="op" value="clear"><input type="hidden" name="limiter" value="{{$lv.Name}}"><input type="hidden" name="confirm" value="yes">
{{- range .Identifier}}<input type="hidden" name="id.{{.Property}}" value="{{.Value}}">{{end}}
<button type="submit" class="danger" id="confirm-clear">Yes, lift the ban and clear</button> <a href="?limiter={{$lv.Name}}">Cancel</a>
</form>
{{- end}}
</div>
{{- end}}
{{- define "idrow" -}}
<div class="idrow"><label for="id-{{.Property}}">{{.Property}}</label><input type="text" id="id-{{.Property}}" name="id.{{.Property}}" value="{{.Value}}" maxlength="4096"></div>
{{- end}}
`))

// pubRows is the published tier's table with the page around it.
type pubRows struct {
	Page pageData
	Rows []ruleRow
}

// render writes a page, rendered into a buffer first so that a template
// error becomes a 500 instead of half a page.
func (h *Handler) render(w http.ResponseWriter, status int, d pageData) {
	var buf bytes.Buffer
	if err := page.Execute(&buf, d); err != nil {
		h.opts.Logger.Error("rate_limit_admin_render_failed", "error", err)
		http.Error(w, "admin: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
