package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// The dry runs of publish, delete and gc read what the write would read and
// print, rule by rule, what it would change; they write nothing.

// document reads a limiter's document for a dry run: nil when it has none.
// An invalid document is an error, as it is for the real write.
func (e *rulesEnv) document(ctx context.Context, limiter string) (*configv1.LimiterRules, error) {
	doc, err := e.store.Document(ctx, limiter)
	if errors.Is(err, rulestore.ErrNoDocument) {
		return nil, nil
	}
	return doc, err
}

// protoLine renders a rule of a document on one line.
func protoLine(r *configv1.Rule) string {
	core, err := config.RuleFromProto(r)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return describeRule(core)
}

func ruleIndex(l *configv1.RuleList, name string) int {
	return slices.IndexFunc(l.GetRules(), func(r *configv1.Rule) bool { return r.GetName() == name })
}

func sameRule(a, b *configv1.Rule) bool {
	x, err1 := config.MarshalRule(a)
	y, err2 := config.MarshalRule(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// tierNote says how a published rule relates to the other tiers' rules of the
// same name (file_rules ranks above published_rules, default_rules below).
func tierNote(doc *configv1.LimiterRules, name string) string {
	switch {
	case ruleIndex(doc.GetFileRules(), name) >= 0:
		return " (file_rules holds a rule of this name: it stays in force over this one)"
	case ruleIndex(doc.GetDefaultRules(), name) >= 0:
		return " (overrides the default rule of this name, inheriting its counter)"
	}
	return ""
}

func (e *rulesEnv) publishDiff(ctx context.Context, req *configv1.PublishRulesRequest) int {
	// The store judges the publish as it would the real one (every bound
	// of its write script included), writing nothing: refused alike.
	check, err := e.store.CheckPublish(ctx, req)
	if err != nil {
		return e.fail(err)
	}
	w := e.out.stdout
	changed := 0
	for _, lim := range sortedNames(req.GetRateLimits()) {
		before := changed
		list := req.GetRateLimits()[lim]
		if len(list.GetRules()) == 0 && list.GetMode() == configv1.Mode_MODE_UNSPECIFIED {
			continue // the publish writes nothing for it
		}
		doc, err := e.document(ctx, lim)
		if err != nil {
			return e.fail(err)
		}
		fmt.Fprintf(w, "limiter %s (key %s), published_rules:\n", lim, e.store.Key(lim))
		if doc == nil {
			fmt.Fprintln(w, "  (no document yet: it would be created)")
		}
		changed += modeDiff(w, doc, list.GetMode())
		for _, r := range list.GetRules() {
			i := ruleIndex(doc.GetPublishedRules(), r.GetName())
			note := tierNote(doc, r.GetName())
			switch {
			case i < 0:
				changed++
				fmt.Fprintf(w, "  + %s: %s%s\n", r.GetName(), protoLine(r), note)
			case sameRule(doc.GetPublishedRules().GetRules()[i], r):
				fmt.Fprintf(w, "  = %s: unchanged\n", r.GetName())
			default:
				changed++
				fmt.Fprintf(w, "  ~ %s:%s\n      - %s\n      + %s\n", r.GetName(), note, protoLine(doc.GetPublishedRules().GetRules()[i]), protoLine(r))
			}
		}
		// The publish rewrites a document whose bytes differ from what it
		// writes (one written by hand or another tool, in another layout),
		// even with its rules unchanged: the write says it changed it and
		// raises the revision, so the dry run says so too.
		if changed == before && slices.Contains(check.Changed, lim) {
			changed++
			fmt.Fprintln(w, "  ~ the stored document's bytes are not those the publish writes: it would be rewritten, its rules as they are")
		}
	}
	dryRunSummary(w, changed)
	return exitOK
}

// modeDiff prints how a publish of mode would change the published tier's
// mode, and returns 1 when it would; an unset mode leaves it as it is.
func modeDiff(w io.Writer, doc *configv1.LimiterRules, mode configv1.Mode) int {
	if mode == configv1.Mode_MODE_UNSPECIFIED {
		return 0
	}
	note := ""
	if m := doc.GetFileRules().GetMode(); m != configv1.Mode_MODE_UNSPECIFIED {
		note = fmt.Sprintf(" (file_rules sets mode %s: it stays in force over this one)", config.ModeWord(m))
	}
	switch old := doc.GetPublishedRules().GetMode(); old {
	case mode:
		fmt.Fprintf(w, "  = mode %s: unchanged\n", config.ModeWord(mode))
		return 0
	case configv1.Mode_MODE_UNSPECIFIED:
		fmt.Fprintf(w, "  + mode %s%s\n", config.ModeWord(mode), note)
	default:
		fmt.Fprintf(w, "  ~ mode:%s\n      - %s\n      + %s\n", note, config.ModeWord(old), config.ModeWord(mode))
	}
	return 1
}

func (e *rulesEnv) deleteDiff(ctx context.Context, limiter string, names []string) int {
	doc, err := e.document(ctx, limiter)
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	if errors.Is(err, rulestore.ErrInvalidDocument) {
		return e.deleteDiffInvalid(ctx, limiter, names, err)
	}
	if err != nil {
		return e.fail(err)
	}
	var why []string // as the delete's error says it, a file or default rule named so
	for _, n := range names {
		if ruleIndex(doc.GetPublishedRules(), n) < 0 {
			why = append(why, rulestore.NotPublished(doc, n))
		}
	}
	mode := doc.GetPublishedRules().GetMode()
	if len(why) == 0 && e.f.deleteMode && mode == configv1.Mode_MODE_UNSPECIFIED {
		why = append(why, rulestore.ModeNotPublished(doc))
	}
	if len(why) > 0 {
		fmt.Fprintf(e.out.stderr, "ratekit rules: limiter %s: %s; the delete would remove nothing (all or nothing)\n", limiter, strings.Join(why, "; "))
		return exitInvalid
	}
	w := e.out.stdout
	fmt.Fprintf(w, "limiter %s (key %s), published_rules:\n", limiter, e.store.Key(limiter))
	changes := len(names)
	if e.f.deleteMode {
		changes++
		fmt.Fprintf(w, "  - mode %s: the limiter then runs in %s\n", config.ModeWord(mode), modeWithout(doc))
	}
	for _, n := range names {
		r := doc.GetPublishedRules().GetRules()[ruleIndex(doc.GetPublishedRules(), n)]
		fmt.Fprintf(w, "  - %s: %s\n", n, protoLine(r))
		// file_rules ranks above the published tier: its rule of the name
		// was in force and stays, whatever default_rules holds.
		if i := ruleIndex(doc.GetFileRules(), n); i >= 0 {
			fmt.Fprintf(w, "      the file rule of this name stays in force, as it was: %s\n", protoLine(doc.GetFileRules().GetRules()[i]))
		} else if i := ruleIndex(doc.GetDefaultRules(), n); i >= 0 {
			fmt.Fprintf(w, "      the default rule of this name applies again: %s\n", protoLine(doc.GetDefaultRules().GetRules()[i]))
		}
	}
	if len(doc.GetPublishedRules().GetRules()) == len(names) {
		// A published mode outlives the published rules.
		switch {
		case mode != configv1.Mode_MODE_UNSPECIFIED && !e.f.deleteMode:
			fmt.Fprintf(w, "  the published mode %s stays (--mode deletes it too)\n", config.ModeWord(mode))
		case doc.GetFileRules() == nil && doc.GetDefaultRules() == nil:
			fmt.Fprintln(w, "  the document would be left empty and removed")
		}
	}
	dryRunSummary(w, changes)
	return exitOK
}

// deleteDiffInvalid is the dry run of a delete on a document no service
// loads, which the delete shrinks all the same: the rules it would remove
// are read from the stored JSON as it is, without the schema's checks.
func (e *rulesEnv) deleteDiffInvalid(ctx context.Context, limiter string, names []string, invalid error) int {
	raw, _, err := e.store.RawDocument(ctx, limiter)
	var loose struct {
		Published struct {
			Mode  json.RawMessage   `json:"mode"`
			Rules []json.RawMessage `json:"rules"`
		} `json:"published_rules"`
	}
	if err == nil {
		err = json.Unmarshal([]byte(raw), &loose)
	}
	if err != nil {
		return e.fail(fmt.Errorf("%w; the dry run cannot read its published rules (%s deletes the document)", invalid, e.command("remove", limiter, false)))
	}
	stored := map[string]json.RawMessage{}
	for _, r := range loose.Published.Rules {
		var named struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(r, &named) == nil {
			stored[named.Name] = r
		}
	}
	var why []string // as the delete's error says it
	for _, n := range names {
		if _, ok := stored[n]; !ok {
			why = append(why, fmt.Sprintf("rule %s is not published (the limiter's document is invalid)", n))
		}
	}
	mode := string(loose.Published.Mode)
	if word := ""; json.Unmarshal(loose.Published.Mode, &word) == nil {
		mode = word // as a tier reads it, unquoted
	}
	if len(why) == 0 && e.f.deleteMode && (mode == "" || mode == "null") {
		why = append(why, "no published mode (the limiter's document is invalid)")
	}
	if len(why) > 0 {
		fmt.Fprintf(e.out.stderr, "ratekit rules: limiter %s: %s; the delete would remove nothing (all or nothing)\n", limiter, strings.Join(why, "; "))
		return exitInvalid
	}
	w := e.out.stdout
	fmt.Fprintf(w, "limiter %s (key %s), published_rules:\n", limiter, e.store.Key(limiter))
	fmt.Fprintf(w, "  (the document is invalid, so no service loads it: %s)\n", strings.ReplaceAll(invalid.Error(), "\n", "; "))
	changes := len(names)
	if e.f.deleteMode {
		changes++
		fmt.Fprintf(w, "  - mode %s\n", mode)
	}
	for _, n := range names {
		var line bytes.Buffer
		if json.Compact(&line, stored[n]) != nil {
			line.Reset()
			line.Write(stored[n])
		}
		fmt.Fprintf(w, "  - %s: %s\n", n, line.String())
	}
	dryRunSummary(w, changes)
	return exitOK
}

// gcDiff is the dry run of gc: the store runs the collection as GC does,
// on the Redis server's clock, and writes nothing (CheckGC); what it would
// do is printed, store-wide changes first, then limiter by limiter.
func (e *rulesEnv) gcDiff(ctx context.Context) int {
	rep, err := e.store.CheckGC(ctx, e.avail)
	if err != nil {
		return e.fail(err)
	}
	w := e.out.stdout
	fmt.Fprintf(w, "gc dry run at %s (Redis time), grace %v\n", rep.Now.UTC().Format(time.RFC3339), e.grace)
	n := 0
	if rep.IndexReplaced != "" {
		n++
		fmt.Fprintf(w, "  ~ the index %s is a Redis %s, not a set: it would be replaced, %s\n", e.store.Key("@index"), rep.IndexReplaced, indexReplacedThen)
	}
	if rep.MarksReplaced != "" {
		n++
		fmt.Fprintf(w, "  ~ the orphan marks %s %s: they would be replaced, %s\n", e.store.Key("@orphans"), marksWhy(rep), marksReplacedThen)
	}
	if rep.Longer > 0 {
		n += int(rep.Longer)
		fmt.Fprintf(w, "  - %s longer than any limiter name would be removed, with the documents they name\n", count(int(rep.Longer), "index member"))
	}
	if rep.StaleMarks > 0 {
		n += int(rep.StaleMarks)
		fmt.Fprintf(w, "  - %s of limiters no longer indexed would be removed\n", count(int(rep.StaleMarks), "orphan mark"))
	}
	lines := map[string]string{}
	for _, name := range rep.Marked {
		lines[name] = fmt.Sprintf("  ~ %s: not declared, would be marked as an orphan (deleted from %s)", name, rep.Now.Add(e.grace).UTC().Format(time.RFC3339))
	}
	for _, name := range rep.Cleared {
		lines[name] = fmt.Sprintf("  ~ %s: declared again, its orphan mark would be cleared", name)
	}
	notes := e.publishedNotes(ctx, rep.Deleted)
	for _, name := range rep.Deleted {
		lines[name] = fmt.Sprintf("  - %s: orphan past its grace, its document %s would be deleted%s", name, e.store.Key(name), notes[name])
	}
	for _, name := range rep.Reindexed {
		lines[name] = fmt.Sprintf("  ~ %s: its document and orphan mark remain, unindexed: it would be indexed again, and collected after its grace", name)
	}
	for _, name := range rep.Found {
		what := "it would be indexed, and marked as an orphan (deleted from " + rep.Now.Add(e.grace).UTC().Format(time.RFC3339) + ")"
		if !slices.Contains(rep.Marked, name) {
			what = "declared, it would be indexed and kept"
		}
		lines[name] = fmt.Sprintf("  ~ %s: the scan found its document %s unindexed: %s", name, e.store.Key(name), what)
	}
	n += len(lines)
	for _, name := range rep.Left {
		lines[name] = fmt.Sprintf("  = %s: the scan found its document %s unindexed, and would leave it: %s", name, e.store.Key(name), leftWhy)
	}
	for name, since := range rep.Pending {
		lines[name] = fmt.Sprintf("  = %s: orphan since %s, kept until %s", name, since.UTC().Format(time.RFC3339), since.Add(e.grace).UTC().Format(time.RFC3339))
	}
	for _, name := range slices.Sorted(maps.Keys(lines)) {
		fmt.Fprintln(w, lines[name])
	}
	fmt.Fprintf(w, "  %s\n", scanDone(rep, true))
	dryRunSummary(w, n)
	if len(lines) == 0 && n == 0 && e.neverWritten(ctx) { // as the gc says
		fmt.Fprintf(e.out.stderr, "note: %s\n", emptyPrefix(e.f.rulesPrefix))
	}
	return exitOK
}

// publishedNotes returns, for each limiter whose document a gc would delete,
// a note that its document holds published rules, which may exist nowhere
// else, or that it was not read to tell.
func (e *rulesEnv) publishedNotes(ctx context.Context, deleted []string) map[string]string {
	notes := map[string]string{}
	if len(deleted) == 0 {
		return notes
	}
	entries, err := e.store.List(ctx) // bounded: rulestore.MaxReadBytes
	listed := map[string]rulestore.Entry{}
	for _, en := range entries {
		listed[en.Limiter] = en
	}
	for _, name := range deleted {
		en, ok := listed[name]
		switch {
		case err != nil || !ok:
			notes[name] = fmt.Sprintf(" (not read here: %s tells whether it holds published rules)", e.command("show", name, false))
		default:
			notes[name] = e.publishedNote(en)
		}
	}
	return notes
}

// publishedNote warns that a document to delete holds published rules, which
// may exist nowhere else, or that it was not read to tell.
func (e *rulesEnv) publishedNote(en rulestore.Entry) string {
	if errors.Is(en.Err, rulestore.ErrNotRead) {
		return fmt.Sprintf(" (not read here, past rulestore.MaxReadBytes: %s tells whether it holds published rules)", e.command("show", en.Limiter, false))
	}
	if k := len(en.Document.GetPublishedRules().GetRules()); k > 0 {
		return fmt.Sprintf(" with its %s", count(k, "published rule"))
	}
	return ""
}

func dryRunSummary(w io.Writer, changes int) {
	fmt.Fprintf(w, "dry run: %s, nothing written\n", count(changes, "change"))
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
