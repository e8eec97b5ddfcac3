package debug

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratekit/ratekit/controlplane/rollout"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/rulecheck"
	"github.com/ratekit/ratekit/observability/observe"
)

// Options configures New. Every field is optional.
type Options struct {
	// Tiers gives each limiter's rule tiers and replica age (the rule store,
	// *rulestore.Store, implements it). Without it the page shows the
	// effective rules only.
	Tiers TierSource
	// Blocks gives the recent blocks per rule (an *observe.BlockSummary that
	// observes the limiters).
	Blocks observe.BlockSource
	// Remote reports the rules service client (the remote tier), when the
	// limiters use one (a *remoterules.Client).
	Remote observe.RemoteSource
	// Rollout gives each limiter's rollout decisions (an
	// *observe.RolloutMetrics or *rollout.Tally that the limiter's
	// rollout.Rollout records into): the page shows the divergence since the
	// process started beside the limiter's mode.
	Rollout rollout.DivergenceSource
	// AllowedHosts are the Host names the page answers to ("name" on any
	// port, "name:port", or "*" for any). Empty: on a loopback listener only
	// localhost, 127.0.0.1 and [::1] (any port), so a hostile name resolved
	// to 127.0.0.1 (DNS rebinding) cannot read the page; on other listeners
	// any Host. Set it when the page is reached through a proxy or by a name.
	AllowedHosts []string
	// Now is the clock of ages and "generated at" (default time.Now).
	Now func() time.Time
}

// TierSource gives the tiers of a limiter and the state of its replica of
// the rule store. *rulestore.Store implements it.
type TierSource interface {
	// Tiers returns the limiter's rules by tier; ok is false for a limiter
	// the source does not manage.
	Tiers(limiter string) (t tiers.Set, ok bool)
	// RefreshStatus returns the last successful refresh of the limiter's
	// replica (zero: none yet, the limiter runs on its local tiers) and the
	// error of the last refresh (nil: it succeeded).
	RefreshStatus(limiter string) (refreshedAt time.Time, err error)
}

// Handler serves the state of the registered limiters: HTML by default, JSON
// for ?format=json or a request that accepts application/json and not
// text/html. ?limiter=NAME narrows the page to one limiter (404 for one
// not registered, 400 for a value that is no limiter name). It shows
// configuration and counts only, never identifier values; still, mount it
// where only operators can reach it (an internal port or behind auth).
type Handler struct {
	opts Options

	mu       sync.RWMutex
	limiters map[string]*ratelimit.Limiter
}

var _ http.Handler = (*Handler)(nil)

// New returns a handler showing limiters (more can be added with Register).
func New(opts Options, limiters ...*ratelimit.Limiter) *Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &Handler{opts: opts, limiters: map[string]*ratelimit.Limiter{}}
	h.Register(limiters...)
	return h
}

// Register adds limiters to the page; a limiter replaces an earlier one of the
// same name, and a nil one is ignored.
func (h *Handler) Register(limiters ...*ratelimit.Limiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range limiters {
		if l != nil {
			h.limiters[l.Name()] = l
		}
	}
}

// Snapshot is the JSON document of the page.
type Snapshot struct {
	GeneratedAt time.Time `json:"generated_at"`
	// RulesService is the remote tier's client; nil without Options.Remote.
	RulesService *observe.RemoteStatus `json:"rules_service,omitempty"`
	Limiters     []LimiterView         `json:"limiters"`
}

// LimiterView is one limiter on the page.
type LimiterView struct {
	Name      string `json:"name"`
	KeyPrefix string `json:"key_prefix"`
	// Breaker is the circuit breaker state: closed, open or half-open.
	Breaker string `json:"breaker"`
	// Mode is enforce or shadow (counts, never blocks).
	Mode string `json:"mode"`
	// Rollout is nil without Options.Rollout or before the limiter's first
	// decision. After decisions that all failed open it holds them, and
	// Compared is 0: the HTML page then shows no divergence.
	Rollout *RolloutView `json:"rollout"`
	// RuleStore is nil when no TierSource manages the limiter.
	RuleStore *RuleStoreView `json:"rule_store"`
	// Rules are the effective rules, in evaluation order.
	Rules []RuleView `json:"rules"`
	// Overridden are rules of lower tiers replaced by a same-named higher one.
	Overridden []RuleView `json:"overridden"`
	// Blocks are the limiter's blocks per rule, latest first.
	Blocks []observe.BlockCount `json:"blocks"`
}

// RolloutView is a limiter's rollout decisions since the process started
// (the gate itself judges 24 hours of them: ratekit rollout gate).
type RolloutView struct {
	Compared  uint64  `json:"compared"`
	Divergent uint64  `json:"divergent"`
	Failed    uint64  `json:"failed"` // failed open: not compared
	Ratio     float64 `json:"divergence_ratio"`
	// BelowGate reports Ratio < rollout.MaxDivergence (0.5 %), whatever the
	// number of decisions.
	BelowGate bool                 `json:"below_gate"`
	Rules     []rollout.RuleCounts `json:"rules"`
}

// RuleStoreView is the state of the limiter's replica of the rule store.
type RuleStoreView struct {
	RefreshedAt  *time.Time `json:"refreshed_at"`  // nil: never refreshed (compiled tiers only)
	ReplicaAge   *float64   `json:"replica_age_s"` // seconds since RefreshedAt
	RefreshError string     `json:"refresh_error,omitempty"`
}

// RuleView is a rule in the field names of the config files and of the rule
// store document (period_s, ban_for_s, match as scalar, {regex} or {one_of}).
type RuleView struct {
	Tier            string         `json:"tier,omitempty"` // file, published, default, ...; empty without a TierSource
	OverriddenBy    string         `json:"overridden_by,omitempty"`
	Name            string         `json:"name"`
	Description     string         `json:"description,omitempty"`
	Action          string         `json:"action"`
	Match           map[string]any `json:"match"`
	Characteristics []string       `json:"characteristics"`
	// CountMissing: identifiers lacking a characteristic share one counter.
	CountMissing bool     `json:"count_missing,omitempty"`
	Limit        *int64   `json:"limit"`    // nil: resolved at each check (or a skip rule)
	Period       *float64 `json:"period_s"` // seconds; nil like Limit
	// Algorithm is sliding_window or token_bucket; empty for the fixed
	// window (the default).
	Algorithm     string     `json:"algorithm,omitempty"`
	Burst         int64      `json:"burst,omitempty"` // a token bucket's; 0: its limit
	Dynamic       bool       `json:"dynamic,omitempty"`
	BanFor        float64    `json:"ban_for_s,omitempty"`
	CountDistinct string     `json:"count_distinct,omitempty"`
	Blocks        *BlockView `json:"blocks,omitempty"`
}

// BlockView is a rule's block counts (see observe.BlockCount).
type BlockView struct {
	Pending  int64     `json:"pending"`
	Previous int64     `json:"previous"`
	Total    int64     `json:"total"`
	Last     time.Time `json:"last"`
}

// Snapshot builds the page's data; only names non-empty selects those limiters.
func (h *Handler) Snapshot(only ...string) Snapshot {
	now := h.opts.Now()
	h.mu.RLock()
	var ls []*ratelimit.Limiter
	for name, l := range h.limiters {
		if len(only) == 0 || slices.Contains(only, name) {
			ls = append(ls, l)
		}
	}
	h.mu.RUnlock()
	slices.SortFunc(ls, func(a, b *ratelimit.Limiter) int { return strings.Compare(a.Name(), b.Name()) })

	var blocks []observe.BlockCount
	if h.opts.Blocks != nil {
		blocks = h.opts.Blocks.Blocks()
	}
	s := Snapshot{GeneratedAt: now, Limiters: make([]LimiterView, 0, len(ls))}
	if h.opts.Remote != nil {
		st := h.opts.Remote.RemoteStatus()
		s.RulesService = &st
	}
	for _, l := range ls {
		s.Limiters = append(s.Limiters, h.limiterView(l, now, blocks))
	}
	return s
}

func (h *Handler) limiterView(l *ratelimit.Limiter, now time.Time, blocks []observe.BlockCount) LimiterView {
	v := LimiterView{Name: l.Name(), KeyPrefix: l.KeyPrefix(), Breaker: l.BreakerState(), Mode: l.Enforcement().String(),
		Rules: []RuleView{}, Overridden: []RuleView{}, Blocks: []observe.BlockCount{}}
	if h.opts.Rollout != nil {
		if d, ok := h.opts.Rollout.Divergence(v.Name); ok {
			v.Rollout = &RolloutView{Compared: d.Total.Compared(), Divergent: d.Total.Divergent(), Failed: d.Total.Failed,
				Ratio: d.Total.Ratio(), BelowGate: d.Total.Ratio() < rollout.MaxDivergence, Rules: d.Rules}
		}
	}
	byRule := map[string]*BlockView{}
	for _, b := range blocks {
		if b.Limiter == v.Name {
			v.Blocks = append(v.Blocks, b)
			byRule[b.Rule] = &BlockView{Pending: b.Pending, Previous: b.Previous, Total: b.Total, Last: b.Last}
		}
	}
	tierOf := map[string]string{}
	if h.opts.Tiers != nil {
		if t, ok := h.opts.Tiers.Tiers(v.Name); ok {
			rs := &RuleStoreView{}
			refreshedAt, refreshErr := h.opts.Tiers.RefreshStatus(v.Name)
			if !refreshedAt.IsZero() {
				at, age := refreshedAt, max(now.Sub(refreshedAt).Seconds(), 0)
				rs.RefreshedAt, rs.ReplicaAge = &at, &age
			}
			if refreshErr != nil {
				rs.RefreshError = refreshErr.Error()
			}
			v.RuleStore = rs
			for _, tr := range t.Rules() {
				if tr.OverriddenBy == "" {
					if _, seen := tierOf[tr.Rule.Name]; !seen {
						tierOf[tr.Rule.Name] = tr.Tier
					}
					continue
				}
				rv := ruleView(tr.Rule)
				rv.Tier, rv.OverriddenBy = tr.Tier, tr.OverriddenBy
				v.Overridden = append(v.Overridden, rv)
			}
		}
	}
	for _, r := range l.Rules() {
		rv := ruleView(r)
		rv.Tier = tierOf[r.Name]
		rv.Blocks = byRule[r.Name]
		v.Rules = append(v.Rules, rv)
	}
	return v
}

func ruleView(r ratelimit.Rule) RuleView {
	action := r.Action
	if action == "" {
		action = ratelimit.ActionLimit
	}
	v := RuleView{Name: r.Name, Description: r.Description, Action: string(action), Match: map[string]any{},
		Characteristics: append([]string{}, r.Characteristics...), CountMissing: r.CountMissing,
		CountDistinct: r.CountDistinct, BanFor: r.BanFor.Seconds()}
	if r.Algorithm != ratelimit.FixedWindow {
		v.Algorithm = string(r.Algorithm)
	}
	if r.Algorithm == ratelimit.TokenBucket {
		v.Burst = r.Burst
	}
	for k, m := range r.Match {
		switch {
		case m.IsRegex():
			v.Match[k] = map[string]string{"regex": m.Value()}
		case m.IsOneOf():
			v.Match[k] = map[string][]string{"one_of": m.Values()}
		default:
			v.Match[k] = m.Value()
		}
	}
	if action != ratelimit.ActionSkip {
		n, okN := r.Limit, r.LimitFunc == nil
		d, okD := r.Period, r.PeriodFunc == nil
		if okN {
			v.Limit = &n
		}
		if okD {
			s := d.Seconds()
			v.Period = &s
		}
		v.Dynamic = !okN || !okD
	}
	return v
}

// CheckHost serves h only to the Host names a page with
// Options.AllowedHosts = allowed answers to (on a loopback listener and
// allowed empty: localhost, 127.0.0.1 and [::1], so Prometheus scrapes by
// those names); any other Host gets 403 before h runs. It is for what the
// internal listener serves beside the page, /metrics for one, so that a
// DNS-rebound page reads nothing there either.
func CheckHost(h http.Handler, allowed []string) http.Handler {
	return httpguard.CheckHost(h, allowed, "the allowed hosts of debug.CheckHost")
}

// ServeHTTP implements http.Handler. A Host the page does not answer to
// (Options.AllowedHosts) gets 403 before anything is read.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !httpguard.HostAllowed(r, h.opts.AllowedHosts) {
		http.Error(w, "this page does not answer to the name "+httpguard.QuotedHost(r)+
			"; open it as localhost or 127.0.0.1, or add the name to debug.Options.AllowedHosts", http.StatusForbidden)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var only []string
	if name := r.URL.Query().Get("limiter"); name != "" {
		if !rulecheck.ValidName(name) { // quoted in part: the query is the client's
			http.Error(w, fmt.Sprintf("%.80q is not a limiter name (a-z, 0-9 and _, at most %d bytes)", name, rulecheck.MaxNameLen),
				http.StatusBadRequest)
			return
		}
		only = []string{name}
	}
	snap := h.Snapshot(only...)
	if len(only) > 0 && len(snap.Limiters) == 0 {
		http.Error(w, fmt.Sprintf("no limiter %q is registered", only[0]), http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	if wantsJSON(r) {
		hd.Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap)
		return
	}
	body, err := renderHTML(snap)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Frame-Options", "DENY")
	_, _ = w.Write(body)
}

func wantsJSON(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "json":
		return true
	case "html":
		return false
	}
	accept := r.Header.Get("Accept")
	return strings.Contains(accept, "application/json") && !strings.Contains(accept, "text/html")
}
