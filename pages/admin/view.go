package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// indexRow is one limiter of the index.
type indexRow struct {
	Name, Description string
	Declared          bool   // in available_limiters.yaml
	Document          string // the document's state, in words
	Published, Skips  int
	OrphanSince       time.Time
}

// index lists every limiter of available_limiters.yaml and of the store's
// index, sorted.
func (h *Handler) index(ctx context.Context) ([]indexRow, error) {
	entries, err := h.opts.Store.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("Could not read the rule store: %w", err)
	}
	byName := map[string]rulestore.Entry{}
	for _, e := range entries {
		byName[e.Limiter] = e
	}
	names := h.opts.Available.Names()
	for n := range byName {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	out := make([]indexRow, 0, len(names))
	for _, n := range names {
		row := indexRow{Name: n, Document: "no document: the services run on their files"}
		if spec := h.opts.Available.Spec(n); spec != nil {
			row.Declared, row.Description = true, spec.GetDescription()
		}
		if e, ok := byName[n]; ok {
			row.OrphanSince = e.OrphanSince
			switch {
			case e.Err != nil && errors.Is(e.Err, rulestore.ErrNoDocument):
				row.Document = "indexed, document missing"
			case e.Err != nil && errors.Is(e.Err, rulestore.ErrNotRead):
				// Past the bytes one list reads: valid or not, it was not
				// looked at; the limiter's own page reads it.
				row.Document = "document not read in this list (its page reads it): " + e.Err.Error()
			case e.Err != nil:
				row.Document = "document invalid: " + e.Err.Error()
			default:
				row.Document = "document " + short(e.Version)
				row.Published = len(e.Document.GetPublishedRules().GetRules())
			}
		}
		if lv, _, err := h.limiterFrom(n, byName[n]); err == nil {
			if e := byName[n]; e.Err == nil && lv.DocumentError != "" {
				row.Document, row.Published = "document invalid: "+lv.DocumentError, 0
			}
			for _, r := range lv.Effective {
				if r.Action == ratelimit.ActionSkip {
					row.Skips++
				}
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// limiterView is one limiter as its page shows it.
type limiterView struct {
	Name, Description string
	Declared          bool // in available_limiters.yaml: only then can rules be published (an orphan's can only be deleted)
	Properties        []string
	AllowedSkips      []string // nil: any skip rule allowed
	SkipsRestricted   bool
	Key               string // the document's Redis key
	Version           string // the document's version ("" when none)
	HasDocument       bool
	// Seeded: the document has a file or default tier, which only a
	// service's seed writes; rules published to a limiter no service
	// seeded under this prefix may reach no service.
	Seeded        bool
	DocumentError string
	Sources       map[string]string // tier -> where its rules come from
	// Mode is the limiter's mode the services apply from its tiers (enforce
	// or shadow), set by tier ModeFrom; "" when no tier sets one.
	Mode, ModeFrom string
	// PublishedMode is the mode the published tier sets ("" for none),
	// whichever tier's mode is in force: it outlives the published rules,
	// and the page offers to delete it.
	PublishedMode string

	Tiers     tiers.Set
	Effective []ratelimit.Rule
	Rows      []ruleRow // effective rules, evaluation order
	Overrides []ruleRow // rules replaced by a higher tier's rule of the same name
	// ExemptionWarnings name the rules of higher tiers that replace or match
	// what a default exemption (skip_health_checks) exempts.
	ExemptionWarnings []string
	// ExemptionWarningsOmitted counts the warnings past the first
	// config.MaxReportedErrors, as ratekit validate bounds them.
	ExemptionWarningsOmitted int
	// SkipsAll names the skip rule without a match that comes before every
	// counting rule of the effective list: the limiter counts and blocks
	// nothing ("" when none does).
	SkipsAll  string
	Published []ruleRow
	TierRows  []tierRows // every tier, highest first

	published *configv1.RuleList // for the edit form
}

type tierRows struct {
	Tier, Source string
	Rows         []ruleRow
}

// ruleRow is a rule in the words of the config files.
type ruleRow struct {
	Index           int
	Tier            string
	Name            string
	Description     string
	Action          string
	Match           []string
	Characteristics []string
	CountMissing    bool // identifiers lacking a characteristic share one counter
	CountDistinct   string
	Limit, Period   string
	Ban             string
	Algorithm       string // sliding_window or token_bucket (with its burst); "" for the fixed window
	OverriddenBy    string // the tier whose same-named rule replaces this one
	Replaces        []string
}

func (lv *limiterView) publishedProto(name string) *configv1.Rule {
	for _, r := range lv.published.GetRules() {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

// replacedBy returns the tier whose rule of the same name replaces rule
// name of tier, or "" when none does.
func (lv *limiterView) replacedBy(tier, name string) string {
	for _, o := range lv.Overrides {
		if o.Tier == tier && o.Name == name {
			return o.OverriddenBy
		}
	}
	return ""
}

// limiter reads one limiter's document and builds its view; the status is
// for the error page.
func (h *Handler) limiter(ctx context.Context, name string) (*limiterView, int, error) {
	if !rulecheck.ValidName(name) {
		return nil, http.StatusBadRequest, fmt.Errorf("%.80q is not a limiter name (a-z, 0-9 and _, at most 64).", name)
	}
	doc, version, err := h.opts.Store.VersionedDocument(ctx, name)
	e := rulestore.Entry{Limiter: name, Key: h.opts.Store.Key(name), Document: doc, Version: version, Err: err}
	if err == nil && doc == nil {
		e.Err = rulestore.ErrNoDocument
	}
	if err != nil && !errors.Is(err, rulestore.ErrInvalidDocument) {
		return nil, http.StatusBadGateway, fmt.Errorf("Could not read the rule store: %w", err)
	}
	return h.limiterFrom(name, e)
}

// limiterFrom builds the view from a limiter's store entry: the document's
// tiers where it has them, the files' tiers for the others (what a service
// bound with its files runs on).
func (h *Handler) limiterFrom(name string, e rulestore.Entry) (*limiterView, int, error) {
	spec := h.opts.Available.Spec(name)
	lv := &limiterView{Name: name, Key: h.opts.Store.Key(name), Version: e.Version, HasDocument: e.Document != nil,
		Sources: map[string]string{}}
	if spec == nil {
		if e.Document == nil && (e.Err == nil || errors.Is(e.Err, rulestore.ErrNoDocument)) {
			return nil, http.StatusNotFound, fmt.Errorf("No limiter %q in %s (it declares %s).", name, h.opts.Available.File, config.ListNames(h.opts.Available.Names()))
		}
		lv.Description = "not declared in " + h.opts.Available.File + ": its published rules can be deleted, not edited, and an invalid document removed (an orphan the rule store's GC collects)"
	} else {
		lv.Declared, lv.Description, lv.Properties = true, spec.GetDescription(), spec.GetAvailableProperties()
		if allow := spec.GetAllowedSkipRules(); allow != nil {
			lv.SkipsRestricted, lv.AllowedSkips = true, allow.GetNames()
		}
	}
	if e.Err != nil && !errors.Is(e.Err, rulestore.ErrNoDocument) {
		lv.DocumentError = e.Err.Error()
	}
	var t tiers.Set
	if spec != nil {
		files, err := config.Tiers(h.opts.Available, h.opts.RateLimits, name)
		if err != nil {
			return nil, http.StatusInternalServerError, err
		}
		t.File, t.Defaults, t.Mode = files.File, files.Defaults, files.Mode
		if t.Mode != nil {
			lv.ModeFrom = tiers.File
		}
		if len(t.File) > 0 {
			lv.Sources[tiers.File] = h.opts.RateLimits.File
		}
		lv.Sources[tiers.Default] = h.opts.Available.File
	}
	if doc := e.Document; doc != nil {
		tr, err := rulestore.DocumentTiers(doc)
		if err == nil && spec != nil {
			err = h.checkStored(name, doc)
		}
		if err != nil {
			lv.DocumentError = err.Error()
		} else {
			if doc.GetFileRules() != nil {
				t.File, lv.Sources[tiers.File] = tr.File, "rule store"
			}
			if doc.GetDefaultRules() != nil {
				t.Defaults, lv.Sources[tiers.Default] = tr.Defaults, "rule store"
			}
			lv.Seeded = doc.GetFileRules() != nil || doc.GetDefaultRules() != nil
			t.Published, lv.published = tr.Published, doc.GetPublishedRules()
			lv.PublishedMode = config.ModeWord(doc.GetPublishedRules().GetMode())
			t.Mode, lv.ModeFrom = rulestore.ModeOf(doc, t.Mode) // as the services' replicas resolve it
		}
	}
	lv.Sources[tiers.Published] = "rule store (this page)"
	if h.opts.Tiers != nil {
		if pt, ok := h.opts.Tiers.Tiers(name); ok && len(pt.Remote) > 0 {
			t.Remote, lv.Sources[tiers.Remote] = pt.Remote, "rules service (this process)"
		}
	}
	lv.Tiers = t
	if t.Mode != nil {
		lv.Mode = t.Mode.String()
	}
	lv.Effective = t.Merged()
	lv.build()
	return lv, http.StatusOK, nil
}

// checkStored runs on a declared limiter's stored document the checks a
// save runs (its available properties, the skip-rule guardrail), as the
// services' replicas and the store's writes do: a document that fails them
// is one no service loads and the store publishes nothing onto, so the page
// shows it as invalid and offers its removal. (The store runs them too when
// its own Options.Available is set; the page's Available is required.)
func (h *Handler) checkStored(name string, doc *configv1.LimiterRules) error {
	if err := rulestore.CheckDocument(h.opts.Available, name, doc); err != nil {
		return fmt.Errorf("%w: %s: %w", rulestore.ErrInvalidDocument, h.opts.Store.Key(name), err)
	}
	return nil
}

func (lv *limiterView) build() {
	all := lv.Tiers.Rules()
	owner := map[string]string{}
	for _, tr := range all {
		if tr.OverriddenBy == "" {
			owner[tr.Rule.Name] = tr.Tier
		}
	}
	replaced := map[string][]string{} // rule name -> lower tiers it replaces
	byTier := map[string][]ruleRow{}
	for _, tr := range all {
		row := newRow(tr.Rule)
		row.Tier, row.OverriddenBy = tr.Tier, tr.OverriddenBy
		if tr.OverriddenBy != "" {
			replaced[tr.Rule.Name] = append(replaced[tr.Rule.Name], tr.Tier)
			lv.Overrides = append(lv.Overrides, row)
		}
		row.Index = len(byTier[tr.Tier]) + 1
		byTier[tr.Tier] = append(byTier[tr.Tier], row)
	}
	for i, r := range lv.Effective {
		row := newRow(r)
		row.Index, row.Tier, row.Replaces = i+1, owner[r.Name], replaced[r.Name]
		lv.Rows = append(lv.Rows, row)
	}
	for _, tier := range tiers.Names() {
		src, ok := lv.Sources[tier]
		if !ok && len(byTier[tier]) == 0 {
			continue
		}
		for i := range byTier[tier] {
			byTier[tier][i].Replaces = nil
			if tr := byTier[tier][i]; tr.OverriddenBy == "" {
				byTier[tier][i].Replaces = replaced[tr.Name]
			}
		}
		lv.TierRows = append(lv.TierRows, tierRows{Tier: tier, Source: src, Rows: byTier[tier]})
	}
	lv.Published = byTier[tiers.Published]
	for _, r := range tiers.Exemptions(lv.Effective) { // the skip rules ahead of every counting rule
		if len(r.Match) == 0 {
			lv.SkipsAll = r.Name
			break
		}
	}
	for _, higher := range [][]ratelimit.Rule{lv.Tiers.Remote, lv.Tiers.File, lv.Tiers.Published} {
		for _, r := range higher {
			for _, w := range config.ShadowedExemptions(r, lv.Tiers.Defaults, lv.Tiers.Remote, lv.Tiers.File, lv.Tiers.Published) {
				if len(lv.ExemptionWarnings) == config.MaxReportedErrors {
					lv.ExemptionWarningsOmitted++
					continue
				}
				lv.ExemptionWarnings = append(lv.ExemptionWarnings, w)
			}
		}
	}
}

func newRow(r ratelimit.Rule) ruleRow {
	action := r.Action
	if action == "" {
		action = ratelimit.ActionLimit
	}
	desc := r.Description
	if strings.ContainsFunc(desc, func(c rune) bool { return !strconv.IsPrint(c) && !unicode.IsSpace(c) }) {
		// A bidi override or an invisible character (a hand-written
		// document's) turned the cell around or hid words: written as
		// escapes. Line breaks alone are a description's own.
		desc = shown(desc)
	}
	row := ruleRow{Name: r.Name, Description: desc, Action: string(action),
		Characteristics: r.Characteristics, CountMissing: r.CountMissing, CountDistinct: r.CountDistinct, Limit: "—", Period: "—", Ban: "—"}
	keys := make([]string, 0, len(r.Match))
	for k := range r.Match {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m := r.Match[k]
		switch {
		case m.IsRegex():
			row.Match = append(row.Match, fmt.Sprintf("%s: {regex: %q}", k, m.Value()))
		case m.IsOneOf():
			q := m.Values()
			for i := range q {
				q[i] = strconv.Quote(q[i])
			}
			row.Match = append(row.Match, fmt.Sprintf("%s: {one_of: [%s]}", k, strings.Join(q, ", ")))
		default:
			row.Match = append(row.Match, k+": "+strconv.Quote(m.Value()))
		}
	}
	if action != ratelimit.ActionSkip {
		if n, ok := r.Limit, r.LimitFunc == nil; ok {
			row.Limit = strconv.FormatInt(n, 10)
		}
		if d, ok := r.Period, r.PeriodFunc == nil; ok {
			row.Period = fmtDuration(d)
		}
	}
	if r.BanFor > 0 {
		row.Ban = fmtDuration(r.BanFor)
	}
	switch {
	case r.Algorithm == ratelimit.TokenBucket && r.Burst > 0:
		row.Algorithm = fmt.Sprintf("token_bucket, burst %d", r.Burst)
	case r.Algorithm != "" && r.Algorithm != ratelimit.FixedWindow:
		row.Algorithm = string(r.Algorithm)
	}
	return row
}

// fmtDuration prints whole units without zero tails: 1m, 1h30m, 90s.
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

func short(version string) string {
	if len(version) > 12 {
		return version[:12]
	}
	return version
}
