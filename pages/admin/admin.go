package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ratekit/ratekit/controlplane/config"
	"github.com/ratekit/ratekit/controlplane/rulestore"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/httpguard"
	"github.com/ratekit/ratekit/internal/keys"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// Bounds on what a client sends.
const (
	// MaxBodyBytes bounds a form submission. A published rule whose editor
	// would send more is not offered for editing.
	MaxBodyBytes = 64 << 10
	// MaxIdentifierValue bounds one identifier value of the explain and
	// clear forms, in bytes.
	MaxIdentifierValue = 4096
	// DefaultTimeout bounds the Redis calls of one request.
	DefaultTimeout = 5 * time.Second
)

// Authorizer decides whether a request may change state (save, delete,
// clear) and names who makes it, for the audit log. It returns ok false to
// refuse; the page is then read-only for that request.
type Authorizer func(r *http.Request) (who string, ok bool)

// TierSource gives the tiers a process holds for a limiter; the page takes
// their remote tier from it. ok is false for a limiter it does not manage.
// The rule store and the debug page's tier sources implement it, but the
// rule store holds no remote tier (its tiers are the ones the page reads
// from Options.Store): give the page a source that holds the per-request
// tier this process received.
type TierSource interface {
	Tiers(limiter string) (t tiers.Set, ok bool)
}

// Options configures New.
type Options struct {
	// Store is the rule store the page reads and publishes into (required).
	Store *rulestore.Store
	// Available is the service's available_limiters.yaml (required): the
	// limiters listed, their properties, their default rules, and the checks
	// every save passes. The Store should have the same list in its Options.
	Available *config.AvailableLimiters
	// RateLimits is the service's rate_limits.yaml, shown as the file tier of
	// a limiter whose document lacks one (optional).
	RateLimits *config.RateLimits
	// Tiers, when set, gives the per-request (remote) tier a process holds,
	// shown beside the stored tiers (optional).
	Tiers TierSource
	// Counters is where the limiters keep their counters (redisstore.New on
	// the counters' Redis). It enables the explain box and "lift ban / clear";
	// without it they are not shown.
	Counters ratelimit.Store
	// KeyPrefix is the limiters' ratelimit.Config.KeyPrefix (default
	// ratelimit.DefaultKeyPrefix).
	KeyPrefix string
	// Authorize is the host's authorization hook for writes. Without it the
	// page is read-only: it shows everything and changes nothing.
	Authorize Authorizer
	// AllowedHosts are the Host names the page answers to ("name" on any
	// port, "name:port", or "*" for any). Empty: on a loopback listener only
	// localhost, 127.0.0.1 and [::1] (any port), so a hostile name resolved
	// to 127.0.0.1 (DNS rebinding) is refused; on other listeners any Host.
	// Set it when the page is reached through a proxy or by a name.
	AllowedHosts []string
	// Logger receives one audit record per write (default slog.Default()).
	Logger *slog.Logger
	// Timeout bounds the Redis calls of one request (default DefaultTimeout).
	Timeout time.Duration
	// Now is the clock of the explain box (default time.Now).
	Now func() time.Time
}

// Handler is the admin page. Mount it behind the host's authentication, on
// an internal listener; every link and form is relative, so any mount path
// works (with or without http.StripPrefix).
type Handler struct {
	opts Options
}

var (
	_ http.Handler = (*Handler)(nil)
	_ TierSource   = (*rulestore.Store)(nil)
)

// New returns the admin page for opts. It refuses opts without a Store or
// Available, both required.
func New(opts Options) (*Handler, error) {
	switch {
	case opts.Store == nil:
		return nil, errors.New("admin: Options.Store is nil")
	case opts.Available == nil:
		return nil, errors.New("admin: Options.Available is nil: the page edits only declared limiters")
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = ratelimit.DefaultKeyPrefix
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{opts: opts}, nil
}

// ServeHTTP implements http.Handler. GET and HEAD only read; POST changes
// state and passes the CSRF, origin and authorization checks first.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setHeaders(w)
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	if !httpguard.HostAllowed(r, h.opts.AllowedHosts) {
		msg := "Refused: this page does not answer to the name " + httpguard.QuotedHost(r) + "; open it as localhost or 127.0.0.1, or add the name to its allowed hosts."
		if r.Method == http.MethodPost {
			// Read the (bounded) form first: the line names the operation
			// and the limiter refused.
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
			_ = r.ParseForm()
			h.refused(ctx, r, "", http.StatusForbidden, msg)
		}
		h.fail(w, r, http.StatusForbidden, msg)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.get(ctx, w, r)
	case http.MethodPost:
		h.post(ctx, w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		h.refuse(ctx, w, r, "", http.StatusMethodNotAllowed, "This page accepts GET and POST only.")
	}
}

// session is what a request may do, decided once per request.
type session struct {
	CSRF     string // the token forms carry
	Who      string // from the authorization hook
	CanWrite bool
}

func (h *Handler) session(w http.ResponseWriter, r *http.Request) session {
	s := session{CSRF: csrfToken(w, r)}
	if h.opts.Authorize != nil {
		s.Who, s.CanWrite = h.opts.Authorize(r)
	}
	return s
}

func (h *Handler) get(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	s := h.session(w, r)
	q := r.URL.Query()
	name := q.Get("limiter")
	if name == "" {
		idx, err := h.index(ctx)
		if err != nil {
			h.fail(w, r, http.StatusBadGateway, err.Error())
			return
		}
		h.render(w, http.StatusOK, pageData{Session: s, Index: idx})
		return
	}
	lv, status, err := h.limiter(ctx, name)
	if err != nil {
		h.fail(w, r, status, err.Error())
		return
	}
	d := pageData{Session: s, Limiter: lv}
	switch {
	case q.Has("edit"):
		rule := lv.publishedProto(q.Get("edit"))
		if rule == nil {
			h.fail(w, r, http.StatusNotFound, fmt.Sprintf("Limiter %s has no published rule %.80q.", name, q.Get("edit")))
			return
		}
		if fields := unshowable(rule); len(fields) > 0 {
			// A save of the editor would change what the operator did not
			// touch: refuse rather than rewrite it.
			d.Message, d.MessageWarn = fmt.Sprintf("Rule %s cannot be edited on this page: its %s holds a carriage return or a NUL character, "+
				"which a browser's text box turns into a line break or U+FFFD, so a save would change it. "+
				"Change it with the publish API or ratekit rules publish, or delete it here.", rule.GetName(), strings.Join(fields, " and ")), true
			break
		}
		f := formFromRule(rule, lv.Version, true)
		if n := formBytes(f, lv); n > MaxBodyBytes {
			// Its save would be refused (413), losing what was typed.
			d.Message, d.MessageWarn = fmt.Sprintf("Rule %s is too large to edit on this page: its form would send about %d bytes, and a save takes at most %d. "+
				"Change it with the publish API or ratekit rules publish, or delete it here.", rule.GetName(), n, MaxBodyBytes), true
			break
		}
		d.Form = f
	case q.Has("explain") || q.Has("clear"):
		id, errs := identifierFrom(q, lv.Properties)
		d.Identifier = identifierFields(lv.Properties, q)
		if len(errs) > 0 {
			d.IdentifierErrors = errs
			break
		}
		if h.opts.Counters == nil {
			d.Message = "Explain and clear need the counters' store, which this page was not given."
			break
		}
		switch {
		case q.Has("clear") && len(id) == 0:
			// Its confirmation could only be refused (see clear).
			d.IdentifierErrors = []string{"Give at least one identifier property to clear."}
		case q.Has("clear"):
			d.ConfirmClear = true
		}
		d.Explain = h.explain(ctx, lv, id)
	}
	if d.Form == nil {
		d.Form = newForm(lv.Version)
	}
	// The result of the write the browser was redirected from. The query is
	// the client's, so only a rule name or a count is ever shown from it: a
	// crafted link cannot put words on the page.
	switch {
	case rulecheck.ValidName(q.Get("saved")):
		d.Message = fmt.Sprintf("Published rule %s: the services apply it at their next refresh.", q.Get("saved"))
		if by := lv.replacedBy(tiers.Published, q.Get("saved")); by != "" {
			// A higher tier's rule of that name is what the services run.
			d.Message, d.MessageWarn = fmt.Sprintf("Published rule %[1]s, but the %[2]s tier's rule %[1]s replaces it: the services apply that one, not this. "+
				"Delete it here, or change the %[2]s tier's rule.", q.Get("saved"), by), true
		} else if !lv.Seeded {
			// Not a success to report as one: this page may be pointed at
			// a prefix no service reads (ratekit admin --service mistyped).
			d.Message, d.MessageWarn = fmt.Sprintf("Published rule %s under %s, but no service has seeded this limiter's document there "+
				"(it has no file or default tier, which a service writes at start; or Redis lost them since): "+
				"the services apply the rule only if their rule store uses this prefix.", q.Get("saved"), lv.Key), true
		}
	case rulecheck.ValidName(q.Get("unchanged")):
		d.Message, d.MessageWarn = fmt.Sprintf("Rule %s is unchanged: the form held the rule as it is stored, so nothing was written.", q.Get("unchanged")), true
	case rulecheck.ValidName(q.Get("deleted")):
		d.Message = fmt.Sprintf("Deleted published rule %s.", q.Get("deleted"))
	case q.Has("mode_deleted"):
		d.Message = "Deleted the published mode: the services apply the mode of the tiers below at their next refresh (see Mode above)."
	case q.Has("removed"):
		d.Message = "Removed the invalid document: the services run on their own files until they seed it again (a service that seeds its document does so at its next refresh)."
	case q.Has("cleared"):
		n, err := strconv.Atoi(q.Get("cleared"))
		switch {
		case err != nil || n < 0:
		case n == 0:
			// Clearing nothing is never a success: the identifier is most
			// often not the one the service builds.
			d.Message, d.MessageWarn = fmt.Sprintf("Nothing was cleared: no counter or ban key of this identifier exists under %q. "+
				"Give the identifier exactly as the service builds it (every property its rules count by); the explanation below shows each rule's count.", h.opts.KeyPrefix), true
		default:
			d.Message = fmt.Sprintf("Cleared %d counter and ban key(s) for the identifier.", n)
		}
	}
	h.render(w, http.StatusOK, d)
}

func (h *Handler) post(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		status, msg := http.StatusBadRequest, fmt.Sprintf("The form could not be read: %v", err)
		if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
			status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is too large: at most %d bytes are accepted.", MaxBodyBytes)
		}
		h.refuse(ctx, w, r, "", status, msg)
		return
	}
	if err := checkCSRF(r); err != nil {
		h.refuse(ctx, w, r, "", http.StatusForbidden, err.Error())
		return
	}
	s := h.session(w, r)
	if !s.CanWrite {
		msg := "This page is read-only: the host gave it no authorization hook."
		if h.opts.Authorize != nil {
			msg = "You are not authorized to change rate-limit rules."
		}
		h.refuse(ctx, w, r, s.Who, http.StatusForbidden, msg)
		return
	}
	if v := r.PostForm.Get("version"); !rulestore.ValidVersion(v) {
		// No document has it: the write could only conflict, and the
		// store's conflict would quote it whole in the audit line.
		msg := fmt.Sprintf("%.80q is not a document version (a SHA-1 in hex, or empty for none): send the form from this page.", v)
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, msg)
		return
	}
	name := r.PostForm.Get("limiter")
	lv, status, err := h.limiter(ctx, name)
	if err != nil {
		h.refuse(ctx, w, r, s.Who, status, err.Error())
		return
	}
	switch op := r.PostForm.Get("op"); op {
	case "save":
		h.save(ctx, w, r, s, lv)
	case "delete":
		h.delete(ctx, w, r, s, lv)
	case "clear":
		h.clear(ctx, w, r, s, lv)
	case "remove":
		h.remove(ctx, w, r, s, lv)
	case "delete_mode":
		h.deleteMode(ctx, w, r, s, lv)
	default:
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, fmt.Sprintf("Unknown operation %.80q.", op))
	}
}

// save publishes the form's rule into the published tier, after the same
// checks as a file, at the version the form was read at.
func (h *Handler) save(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, lv *limiterView) {
	if !lv.Declared {
		h.refuse(ctx, w, r, s.Who, http.StatusUnprocessableEntity, fmt.Sprintf("Limiter %s is not declared in %s: its published rules can be deleted, not published.", lv.Name, h.opts.Available.File))
		return
	}
	f := parseForm(r.PostForm, lv)
	rule := f.toProto()
	var stored *configv1.Rule
	if f.Edit {
		stored = lv.publishedProto(f.Name)
	}
	if stored.GetAlgorithm() == configv1.Algorithm_ALGORITHM_FIXED_WINDOW && rule.GetAlgorithm() == configv1.Algorithm_ALGORITHM_UNSPECIFIED {
		// The select shows an unset algorithm and an explicit fixed_window
		// alike: keep the stored spelling, which means the same.
		rule.Algorithm = configv1.Algorithm_ALGORITHM_FIXED_WINDOW
	}
	if !f.hasErrors() {
		f.check(lv, rule, h.opts.Available)
	}
	if f.hasErrors() {
		h.refused(ctx, r, s.Who, http.StatusUnprocessableEntity, "The rule is invalid: "+f.errorSummary())
		h.render(w, http.StatusUnprocessableEntity, pageData{Session: s, Limiter: lv, Form: f})
		return
	}
	if stored != nil && proto.Equal(rule, stored) {
		// Saved untouched: the rule would be written in this page's
		// spelling, which may not be the stored one (another writer's member
		// order, explicit zero values). Nothing to write, and nothing is.
		rev, _ := h.opts.Store.Revision(ctx)
		h.audit(ctx, r, s, "publish", lv.Name, rule.GetName(), f.Version, rulestore.WriteResult{Revision: rev}, nil,
			slog.String("rule_json", string(mustMarshalRule(rule))))
		redirect(w, r, url.Values{"limiter": {lv.Name}, "unchanged": {rule.GetName()}})
		return
	}
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{lv.Name: {Rules: []*configv1.Rule{rule}}}}
	res, err := h.opts.Store.PublishIf(ctx, req, map[string]string{lv.Name: f.Version})
	h.audit(ctx, r, s, "publish", lv.Name, rule.GetName(), f.Version, res, err,
		slog.String("rule_json", string(mustMarshalRule(rule))))
	if err != nil {
		if !h.outcomeUnknown(w, r, "publish", lv.Name, err) {
			h.writeFailed(ctx, w, s, lv.Name, f, err)
		}
		return
	}
	if len(res.Changed) == 0 {
		redirect(w, r, url.Values{"limiter": {lv.Name}, "unchanged": {rule.GetName()}})
		return
	}
	redirect(w, r, url.Values{"limiter": {lv.Name}, "saved": {rule.GetName()}})
}

func (h *Handler) delete(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, lv *limiterView) {
	rule, version := r.PostForm.Get("rule"), r.PostForm.Get("version")
	if !rulecheck.ValidName(rule) {
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, fmt.Sprintf("%.80q is not a rule name (a-z, 0-9 and _, at most 64).", rule))
		return
	}
	res, err := h.opts.Store.DeleteIf(ctx, lv.Name, version, rule)
	h.audit(ctx, r, s, "delete", lv.Name, rule, version, res, err)
	if err != nil {
		if !h.outcomeUnknown(w, r, "delete", lv.Name, err) {
			h.writeFailed(ctx, w, s, lv.Name, newForm(version), err)
		}
		return
	}
	redirect(w, r, url.Values{"limiter": {lv.Name}, "deleted": {rule}})
}

// deleteMode deletes the published tier's mode at the version the page was
// read at: a published mode outlives the published rules, so without it a
// stale one applies the day rate_limits.yaml drops its own mode.
func (h *Handler) deleteMode(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, lv *limiterView) {
	version := r.PostForm.Get("version")
	res, err := h.opts.Store.DeleteModeIf(ctx, lv.Name, version)
	h.audit(ctx, r, s, "delete", lv.Name, "", version, res, err, slog.String("mode", lv.PublishedMode))
	if err != nil {
		if !h.outcomeUnknown(w, r, "delete", lv.Name, err) {
			h.writeFailed(ctx, w, s, lv.Name, newForm(version), err)
		}
		return
	}
	redirect(w, r, url.Values{"limiter": {lv.Name}, "mode_deleted": {"1"}})
}

// writeFailed shows the page again with why a write failed; on a conflict
// the page shows the rules as they are now, and the form keeps what was
// typed, based on the new version.
func (h *Handler) writeFailed(ctx context.Context, w http.ResponseWriter, s session, limiter string, f *ruleForm, err error) {
	lv, status, lerr := h.limiter(ctx, limiter)
	if lerr != nil {
		h.failStatus(w, status, "Nothing was changed: "+err.Error()+". The rules could not be read again: "+lerr.Error())
		return
	}
	d := pageData{Session: s, Limiter: lv, Form: f}
	status = http.StatusBadGateway
	switch {
	case errors.Is(err, rulestore.ErrConflict):
		status = http.StatusConflict
		d.Conflict = true
		f.Version = lv.Version
		f.Errors[""] = append(f.Errors[""], "Someone else changed the rules of this limiter since you opened this page; nothing was written. "+
			"The rules below are the current ones: check them, then save again if your change is still right.")
	case errors.Is(err, rulestore.ErrRuleNotFound), errors.Is(err, rulestore.ErrModeNotPublished):
		status = http.StatusNotFound
		f.Errors[""] = append(f.Errors[""], err.Error())
	case errors.Is(err, rulestore.ErrOverBounds), errors.Is(err, rulestore.ErrInvalidDocument):
		// what was asked, not the store, is the problem: nothing was written
		status = http.StatusUnprocessableEntity
		f.Errors[""] = append(f.Errors[""], "Nothing was changed: "+err.Error())
	default:
		f.Errors[""] = append(f.Errors[""], "Nothing was changed: "+err.Error())
	}
	h.render(w, status, d)
}

// remove takes away a document no process would load, whatever the key
// holds: the one write that still works on it besides deleting rules. It is
// a compare-and-set on the version the page showed (rulestore.Store.RemoveIf),
// so it takes that document, never one another writer put there since. A
// valid document is never removed from here (its rules are deleted one by
// one, and the file and default tiers are the services' own).
func (h *Handler) remove(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, lv *limiterView) {
	version := r.PostForm.Get("version")
	if lv.DocumentError == "" && version == lv.Version {
		// What the form names is what is stored, and it is valid or absent:
		// the page offers no removal of that.
		msg := fmt.Sprintf("The document of limiter %s is valid: delete its published rules instead.", lv.Name)
		if !lv.HasDocument {
			msg = fmt.Sprintf("Limiter %s has no document: there is nothing to remove.", lv.Name)
		}
		h.refuse(ctx, w, r, s.Who, http.StatusConflict, msg)
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, "Removing the document needs the confirmation: use the form under the error.")
		return
	}
	res, err := h.opts.Store.RemoveIf(ctx, lv.Name, version)
	h.audit(ctx, r, s, "remove", lv.Name, "", version, res, err, slog.String("document_error", lv.DocumentError))
	switch {
	case err != nil && h.outcomeUnknown(w, r, "remove", lv.Name, err):
	case errors.Is(err, rulestore.ErrConflict):
		h.removeRefused(ctx, w, r, s, lv.Name, fmt.Sprintf("Nothing was removed: the document of limiter %s changed since this page showed it "+
			"(another writer replaced or removed it). This is the limiter as it is now: check it before removing anything.", lv.Name))
	case err != nil:
		h.fail(w, r, http.StatusBadGateway, "Nothing was removed: "+err.Error())
	case len(res.Changed) == 0:
		h.removeRefused(ctx, w, r, s, lv.Name, fmt.Sprintf("Nothing was removed: limiter %s has no document any more (another writer removed it).", lv.Name))
	default:
		redirect(w, r, url.Values{"limiter": {lv.Name}, "removed": {"1"}})
	}
}

// removeRefused answers a remove that took nothing with the limiter's page
// as it is now, under msg, with 409.
func (h *Handler) removeRefused(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, limiter, msg string) {
	lv, _, err := h.limiter(ctx, limiter)
	if err != nil {
		h.fail(w, r, http.StatusConflict, msg+" The limiter could not be read again: "+err.Error())
		return
	}
	h.render(w, http.StatusConflict, pageData{Session: s, Limiter: lv, Form: newForm(lv.Version), Message: msg, MessageWarn: true})
}

func (h *Handler) clear(ctx context.Context, w http.ResponseWriter, r *http.Request, s session, lv *limiterView) {
	if h.opts.Counters == nil {
		h.refuse(ctx, w, r, s.Who, http.StatusNotFound, "Clear needs the counters' store, which this page was not given.")
		return
	}
	id, errs := identifierFrom(r.PostForm, lv.Properties)
	if len(errs) > 0 || len(id) == 0 {
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, "Give at least one identifier property to clear. "+joinLines(errs))
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.refuse(ctx, w, r, s.Who, http.StatusBadRequest, "Clearing needs the confirmation step: use the confirmation form.")
		return
	}
	l, err := h.counterLimiter(lv)
	if err != nil {
		h.refuse(ctx, w, r, s.Who, http.StatusInternalServerError, err.Error())
		return
	}
	n, err := l.Clear(ctx, id)
	if gid, long := keys.GatewayIdentifier(id); long && err == nil {
		// The counters of the stand-in ratekit-envoy counts a value so
		// long by (the explain box says so).
		var m int
		m, err = l.Clear(ctx, gid)
		n += m
	}
	if err != nil {
		h.audit(ctx, r, s, "clear", lv.Name, "", lv.Version, rulestore.WriteResult{}, err,
			slog.Any("identifier", map[string]any(id)))
		h.outcomeUnknown(w, r, "clear", lv.Name, err) // any error of the counters' store may come after its delete ran
		return
	}
	rev, _ := h.opts.Store.Revision(ctx)
	res := rulestore.WriteResult{Revision: rev}
	if n > 0 { // no document changed, the limiter's counters did: the record says changed
		res.Changed = []string{lv.Name}
	}
	h.audit(ctx, r, s, "clear", lv.Name, "", lv.Version, res, nil,
		slog.Any("identifier", map[string]any(id)), slog.Int("keys_deleted", n))
	back := url.Values{"limiter": {lv.Name}, "cleared": {fmt.Sprint(n)}, "explain": {"1"}}
	for k, v := range id {
		back.Set("id."+k, fmt.Sprint(v))
	}
	redirect(w, r, back)
}

// unconfirmed reports whether a write's err may have come after it was
// applied: any error of a clear, whose counters' store says no more; for
// the rule store, a write it sent and Redis did not answer
// (rulestore.ErrUnconfirmed).
func unconfirmed(op string, err error) bool {
	return op == "clear" || errors.Is(err, rulestore.ErrUnconfirmed)
}

// outcomeUnknown answers a write whose err may have come after it was
// applied: it says so, rather than that nothing changed, and returns true.
// It returns false, answering nothing, for a write the store refused whole.
func (h *Handler) outcomeUnknown(w http.ResponseWriter, r *http.Request, op, limiter string, err error) bool {
	if !unconfirmed(op, err) {
		return false
	}
	what := "the rules of limiter " + limiter
	if op == "clear" {
		what = "the identifier's counters and bans (Explain shows them)"
	}
	h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("The store did not confirm the %s (%v): it may have been applied. Reload this page and check %s before trying again.", op, err, what))
	return true
}

// audit logs one write, made or failed: who (from the hook), what, the
// store revision after it (and the document version it was based on), and
// its outcome: "ok", or at WARN the error, prefixed "unknown: " when the
// write may have been applied all the same (see unconfirmed).
func (h *Handler) audit(ctx context.Context, r *http.Request, s session, op, limiter, rule, basedOn string, res rulestore.WriteResult, err error, extra ...slog.Attr) {
	level, outcome := slog.LevelInfo, rulestore.Outcome(err)
	if err != nil {
		level = slog.LevelWarn
		if unconfirmed(op, err) { // as the page says (outcomeUnknown): a clear's too
			outcome = "unknown: " + err.Error()
		}
	}
	attrs := []slog.Attr{
		slog.String("who", s.Who), slog.String("op", op), slog.String("limiter", limiter),
		slog.Int64("revision", res.Revision), slog.String("based_on_version", basedOn),
		slog.Bool("changed", len(res.Changed) > 0), slog.String("remote_addr", r.RemoteAddr),
	}
	if rule != "" {
		attrs = append(attrs, slog.String("rule", rule))
	}
	// Where it wrote, as ratekit's records say: a page pointed at another
	// service's prefix writes somewhere no service reads.
	if op == "clear" {
		attrs = append(attrs, slog.String("key_prefix", h.opts.KeyPrefix))
	} else {
		attrs = append(attrs, slog.String("key", h.opts.Store.Key(limiter)))
	}
	attrs = append(attrs, extra...)
	// The request's context may be spent: the record is written all the same.
	h.opts.Logger.LogAttrs(context.WithoutCancel(ctx), level, "rate_limit_admin_write", append(attrs, slog.String("outcome", outcome))...)
}

// refused logs a state-changing request the page turned away before any
// write (a forged or unauthorized POST, an invalid rule, an unknown limiter
// or operation): a security log wants every write tried, as the CLI's and
// the rules service's records have them. It names who, what (op, limiter),
// where (the limiter's key in the rule store) and the answer (status,
// reason). The operation and the limiter are the client's: at most maxEcho
// characters of each are logged, and of the reason at most maxReason.
func (h *Handler) refused(ctx context.Context, r *http.Request, who string, status int, why string) {
	limiter := config.ClipMiddle(r.PostForm.Get("limiter"), maxEcho)
	// The request's context may be spent: the record is written all the same.
	h.opts.Logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, "rate_limit_admin_refused", slog.String("who", who),
		slog.String("op", config.ClipMiddle(r.PostForm.Get("op"), maxEcho)), slog.String("limiter", limiter),
		slog.String("key", h.opts.Store.Key(limiter)), slog.Int("status", status),
		slog.String("reason", config.ClipMiddle(why, maxReason)), slog.String("remote_addr", r.RemoteAddr))
}

// refuse answers a POST turned away with status and msg, and logs it
// (refused).
func (h *Handler) refuse(ctx context.Context, w http.ResponseWriter, r *http.Request, who string, status int, msg string) {
	h.refused(ctx, r, who, status, msg)
	h.fail(w, r, status, msg)
}

func (h *Handler) counterLimiter(lv *limiterView) (*ratelimit.Limiter, error) {
	l, err := ratelimit.New(ratelimit.Config{
		Name:      lv.Name,
		Store:     h.opts.Counters,
		KeyPrefix: h.opts.KeyPrefix,
		Timeout:   h.opts.Timeout,
		Breaker:   ratelimit.BreakerConfig{Failures: -1},
		Logger:    slog.New(slog.DiscardHandler),
		Now:       h.opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("admin: limiter %s: %w", lv.Name, err)
	}
	if err := l.SetRules(lv.Effective); err != nil {
		return nil, fmt.Errorf("admin: limiter %s: rules: %w", lv.Name, err)
	}
	if m := lv.Tiers.Mode; m != nil { // the mode the services apply, so a verdict is theirs
		if err := l.SetEnforcement(*m); err != nil {
			return nil, fmt.Errorf("admin: limiter %s: mode: %w", lv.Name, err)
		}
	}
	return l, nil
}

// redirect answers a successful POST with 303 See Other to a relative URL,
// so that reloading the result page never repeats the write.
func redirect(w http.ResponseWriter, r *http.Request, q url.Values) {
	w.Header().Set("Location", "?"+q.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

func (h *Handler) fail(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	h.failStatus(w, status, msg)
}

func (h *Handler) failStatus(w http.ResponseWriter, status int, msg string) {
	h.render(w, status, pageData{Error: msg})
}

// maxEcho bounds, in characters, what the page repeats of a request in an
// answer or a log line, as its %.80q quotes do.
const maxEcho = 80

// maxReason bounds, in characters, the reason a refusal's log line gives:
// the page's message, which may list every problem of a form.
const maxReason = 1024

func mustMarshalRule(r *configv1.Rule) []byte {
	b, err := config.MarshalRule(r)
	if err != nil {
		return []byte(err.Error())
	}
	return b
}

func joinLines(lines []string) string { return strings.Join(lines, " ") }
