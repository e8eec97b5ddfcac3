package rulestore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/rulecheck"
	"github.com/ratekit/ratekit/internal/suggest"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

//go:embed write.lua
var writeLua string

var writeScript = redis.NewScript(revcheckLua + writeLua)

// revcheckLua defines rev_usable for gcLua and writeLua.
//
//go:embed revcheck.lua
var revcheckLua string

// WriteResult tells what a write did.
type WriteResult struct {
	// Changed lists the limiters whose document the write changed, sorted.
	// It is empty when every document already was as asked: repeating a
	// write writes nothing.
	Changed []string
	// Revision is the store's write counter after the write (see Revision).
	Revision int64
}

// ConfigTiers returns the tiers of every limiter declared in available (see
// config.Tiers), the file tier and mode from rateLimits (which may be nil).
func ConfigTiers(available *config.AvailableLimiters, rateLimits *config.RateLimits) (map[string]tiers.Set, error) {
	if available == nil {
		return nil, errors.New("rulestore: ConfigTiers needs the available limiters")
	}
	out := map[string]tiers.Set{}
	for _, name := range available.Names() {
		t, err := config.Tiers(available, rateLimits, name)
		if err != nil {
			return nil, fmt.Errorf("rulestore: %w", err)
		}
		out[name] = t
	}
	return out, nil
}

// checkLocal rejects local tiers that a service does not own: the published
// tier belongs to the publish API and the remote tier to the rules service.
func checkLocal(local tiers.Set) error {
	if len(local.Remote) > 0 || len(local.Published) > 0 {
		return errors.New("a service's own tiers are file and default: its remote and published tiers must be empty")
	}
	if m := local.Mode; m != nil && *m != ratelimit.Enforce && *m != ratelimit.Shadow {
		return fmt.Errorf("mode %v is neither enforce nor shadow", *m)
	}
	return local.CheckBounds()
}

//go:embed rev.lua
var revLua string

var revScript = redis.NewScript(revLua)

// maxRevLen bounds the revision counter a read receives: the longest int64
// in decimal ("-9223372036854775808").
const maxRevLen = 20

// Revision returns the store's write counter: it moves on every write that
// changes a document (Seed, Publish, Delete, Remove, GC) and never
// otherwise. A flushed store starts again from 0, and so does, at the next
// write that changes something, a counter that holds no integer (written by
// hand). A counter of another Redis type reads as 0; one that is no integer
// is an error naming the key, and one longer than an int64 (20 bytes) is
// refused by its length, never received.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	key := s.revKey()
	res, err := revScript.Run(ctx, s.client, []string{key}, maxRevLen).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("rulestore: read %s: %w", key, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("rulestore: read %s: unexpected reply %q", key, res)
	}
	switch res[0] {
	case "none", "type":
		return 0, nil
	case "size":
		return 0, fmt.Errorf("rulestore: revision counter %s holds %s bytes, at most %d (an int64): the next write that changes a document starts it again from 0",
			key, res[1], maxRevLen)
	case "value":
		n, err := strconv.ParseInt(res[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("rulestore: revision counter %s holds %q: %w", key, res[1], err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("rulestore: read %s: unexpected reply %q", key, res)
}

// Seed writes the file and default tiers of each limiter, and its Mode as
// the file tier's mode (the only tier whose mode a service's files set),
// leaving their published tiers as they are (a service re-seeds at start
// without touching what was published; docs/design.md#the-rule-store). Both
// tiers are written even when empty, so a rule removed from rate_limits.yaml
// leaves the document; a limiter with neither tier and no document gets none.
// All limiters are written in one atomic operation; any invalid rule, or a
// set with remote or published rules, fails the whole call before anything
// is written.
func (s *Store) Seed(ctx context.Context, sets map[string]tiers.Set) (WriteResult, error) {
	edits, err := s.seedEdits(sets)
	if err != nil {
		return WriteResult{}, err
	}
	return s.update(ctx, "seed", edits, false)
}

// seedEdits validates sets and returns Seed's edits, without reaching Redis.
func (s *Store) seedEdits(sets map[string]tiers.Set) ([]edit, error) {
	edits := make([]edit, 0, len(sets))
	var errs []error
	for _, name := range sortedKeys(sets) {
		if !rulecheck.ValidName(name) {
			errs = append(errs, rulecheck.NameError("limiter", name))
			continue
		}
		local := sets[name]
		if err := checkLocal(local); err != nil {
			errs = append(errs, fmt.Errorf("limiter %s: %w", name, err))
			continue
		}
		e := edit{Limiter: name, Op: "seed", FileMode: modeJSON(modeToProto(local.Mode))}
		for _, tier := range []struct {
			rules []ratelimit.Rule
			dst   *[]string
		}{{local.File, &e.File}, {local.Defaults, &e.Defaults}} {
			l, err := config.RulesToProto(tier.rules)
			if err == nil {
				req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{name: l}}
				if err = config.ValidatePublishRulesRequest(req, s.avail); err == nil {
					*tier.dst, err = ruleBytes(l)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("limiter %s: %w", name, err))
			}
		}
		edits = append(edits, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("rulestore: seed: %w", err)
	}
	return edits, nil
}

// SeedBound seeds the tiers given to Bind, for every bound limiter.
//
// When it fails, the seed is owed until a SeedBound succeeds: meanwhile the
// bound limiters run on their local file and default tiers over their
// documents' published tier (what the documents hold once seeded), never on
// the file and default tiers an older version of the service seeded. When it
// failed for want of Redis (down, hung, refusing writes), every Refresh
// first seeds again, before it reads the documents, and logs once when the
// seed lands: a service started while Redis was down needs no restart. A
// seed refused for what it would write (an invalid rule, a stored document
// no process would load, a bound: ErrInvalidDocument, ErrOverBounds) is not
// tried again, as it would be refused again. A stored document this version
// cannot read holds back only its own limiter's seed: the others are
// written, and the error names it.
func (s *Store) SeedBound(ctx context.Context) (WriteResult, error) {
	s.mu.RLock()
	sets := make(map[string]tiers.Set, len(s.bound))
	for name, b := range s.bound {
		sets[name] = b.local
	}
	s.mu.RUnlock()
	edits, err := s.seedEdits(sets)
	retry := false
	var res WriteResult
	if err == nil {
		res, err = s.update(ctx, "seed", edits, false)
		retry = owed(err)
		if errors.Is(err, ErrInvalidDocument) && len(edits) > 1 {
			// One stored document this version cannot read (a newer
			// version's in a rolling deploy, one written by hand) refuses the
			// whole write: the others are seeded one by one, so that it holds
			// back only its own limiter. The seed is owed while one of them
			// failed for want of Redis, whatever the others' refusals.
			var errs []error
			res, errs = s.seedEach(ctx, edits)
			err, retry = errors.Join(errs...), slices.ContainsFunc(errs, owed)
		}
	}
	s.mu.Lock()
	s.seedOwed, s.seedRetry = err != nil, retry
	s.seeded = s.seeded || err == nil
	s.mu.Unlock()
	if retry {
		err = fmt.Errorf("%w: %w", ErrSeedOwed, err)
	}
	return res, err
}

// owed reports whether a seed that failed with err is owed, tried again at
// the next refresh: it failed for want of Redis, not for what it would
// write (ErrInvalidDocument, ErrOverBounds), which would be refused again.
func owed(err error) bool {
	return err != nil && !errors.Is(err, ErrInvalidDocument) && !errors.Is(err, ErrOverBounds)
}

// seedEach writes the seed edits one limiter at a time, and returns what
// the writes changed and the errors of those that failed.
func (s *Store) seedEach(ctx context.Context, edits []edit) (WriteResult, []error) {
	var res WriteResult
	var errs []error
	for _, e := range edits {
		r, err := s.update(ctx, "seed", []edit{e}, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.Changed = append(res.Changed, r.Changed...)
		res.Revision = max(res.Revision, r.Revision)
	}
	sort.Strings(res.Changed)
	return res, errs
}

// ErrSeedOwed is wrapped by the error of a SeedBound that failed for want of
// Redis (down, hung, refusing writes): the store writes the seed at its
// first refresh that reaches Redis. A seed refused for what it would write
// is not owed: it would be refused again.
var ErrSeedOwed = errors.New("rulestore: seed owed, written at the first refresh that reaches Redis")

// Publish upserts the rules of req into the published tier of each limiter
// in it, by rule name: a rule replaces the published rule of the same name, a
// new name is appended. Limiters outside req, and published rules req does
// not name, are left as they are: removing a rule is Delete's job. The
// request is validated first (the schema's rules and, with
// Options.Available, the limiters and properties it may use); an invalid
// request writes nothing, and the whole batch is applied in one atomic
// operation. Concurrent publishers lose nothing: the upsert runs inside
// Redis, one batch after the other.
func (s *Store) Publish(ctx context.Context, req *configv1.PublishRulesRequest) (WriteResult, error) {
	return s.publish(ctx, req, nil, false)
}

// CheckPublish runs all that Publish runs (the request's validation, the
// checks of the documents it edits and the write script's bounds) and
// writes nothing: its error is the one Publish would return now, and
// Changed names the limiters whose documents Publish would change (Revision
// is the store's current one). A dry run says with it what a publish does.
func (s *Store) CheckPublish(ctx context.Context, req *configv1.PublishRulesRequest) (WriteResult, error) {
	return s.publish(ctx, req, nil, true)
}

// PublishIf is Publish with a compare-and-set per limiter: versions maps a
// limiter of req to the Version of its document the caller based the batch
// on ("" for a limiter that had no document). When one of those documents
// has changed since, nothing is written and the error wraps ErrConflict:
// an editor that read the rules, changed them and saves does not overwrite
// a change it never saw. Limiters of req without a version are upserted as
// Publish does.
func (s *Store) PublishIf(ctx context.Context, req *configv1.PublishRulesRequest, versions map[string]string) (WriteResult, error) {
	for name := range versions {
		if _, ok := req.GetRateLimits()[name]; !ok {
			return WriteResult{}, fmt.Errorf("rulestore: publish: a version is given for limiter %q, which the request does not hold", name)
		}
	}
	return s.publish(ctx, req, versions, false)
}

func (s *Store) publish(ctx context.Context, req *configv1.PublishRulesRequest, versions map[string]string, dry bool) (WriteResult, error) {
	if req == nil {
		return WriteResult{}, errors.New("rulestore: publish: request is nil")
	}
	if err := config.ValidatePublishRulesRequest(req, s.avail); err != nil {
		return WriteResult{}, fmt.Errorf("rulestore: publish: %w", err)
	}
	batch := req.GetRateLimits()
	edits := make([]edit, 0, len(batch))
	for _, name := range sortedKeys(batch) {
		e := edit{Limiter: name, Op: "publish", Mode: modeJSON(batch[name].GetMode())}
		if v, ok := versions[name]; ok {
			e.Expect = &v
		}
		raws, err := ruleBytes(batch[name])
		if err != nil {
			return WriteResult{}, fmt.Errorf("rulestore: publish: limiter %s: %w", name, err)
		}
		for i, r := range batch[name].GetRules() {
			e.Rules = append(e.Rules, [2]string{r.GetName(), raws[i]})
		}
		edits = append(edits, e)
	}
	return s.update(ctx, "publish", edits, dry)
}

// ErrRuleNotFound is returned (wrapped) by Delete for a rule name that the
// limiter's published tier does not hold.
var ErrRuleNotFound = errors.New("rulestore: rule not found")

// Delete removes the named rules from a limiter's published tier. It is
// all-or-nothing: when one name is not published, nothing is deleted and the
// error (wrapping ErrRuleNotFound) names it. A document left with no tier at
// all is removed with its index entry.
func (s *Store) Delete(ctx context.Context, limiter string, rules ...string) (WriteResult, error) {
	return s.delete(ctx, limiter, nil, rules)
}

// DeleteIf is Delete with a compare-and-set: when the limiter's document is
// no longer at version (see Version), nothing is deleted and the error wraps
// ErrConflict.
func (s *Store) DeleteIf(ctx context.Context, limiter, version string, rules ...string) (WriteResult, error) {
	return s.delete(ctx, limiter, &version, rules)
}

// ErrModeNotPublished is returned (wrapped) by DeleteMode for a limiter
// whose published tier sets no mode.
var ErrModeNotPublished = errors.New("rulestore: mode not published")

// DeleteMode removes the mode of a limiter's published tier, and the named
// rules with it (none: the mode alone), in one atomic write: the limiter's
// mode then comes from its file tier (rate_limits.yaml), else from the
// services' own configuration. A published mode is never removed by
// Publish (which only sets one) nor by Delete (it outlives the published
// rules), so without DeleteMode a stale one takes effect the day
// rate_limits.yaml drops its own mode. It is all-or-nothing: when the
// published tier sets no mode (the error wraps ErrModeNotPublished) or one
// of the rules is not published (ErrRuleNotFound), nothing is written. A
// document left with no tier at all is removed with its index entry.
func (s *Store) DeleteMode(ctx context.Context, limiter string, rules ...string) (WriteResult, error) {
	return s.deleteOp(ctx, limiter, nil, rules, true)
}

// DeleteModeIf is DeleteMode with a compare-and-set: when the limiter's
// document is no longer at version (see Version), nothing is deleted and the
// error wraps ErrConflict.
func (s *Store) DeleteModeIf(ctx context.Context, limiter, version string, rules ...string) (WriteResult, error) {
	return s.deleteOp(ctx, limiter, &version, rules, true)
}

func (s *Store) delete(ctx context.Context, limiter string, version *string, rules []string) (WriteResult, error) {
	if len(rules) == 0 && rulecheck.ValidName(limiter) {
		return WriteResult{}, fmt.Errorf("rulestore: delete: no rule names given for limiter %s", limiter)
	}
	return s.deleteOp(ctx, limiter, version, rules, false)
}

func (s *Store) deleteOp(ctx context.Context, limiter string, version *string, rules []string, mode bool) (WriteResult, error) {
	if !rulecheck.ValidName(limiter) {
		return WriteResult{}, fmt.Errorf("rulestore: delete: %w", rulecheck.NameError("limiter", limiter))
	}
	for _, r := range rules {
		if !rulecheck.ValidName(r) {
			return WriteResult{}, fmt.Errorf("rulestore: delete: %w", rulecheck.NameError("rule", r))
		}
	}
	rules = slices.Compact(slices.Sorted(slices.Values(rules)))
	return s.update(ctx, "delete", []edit{{Limiter: limiter, Op: "delete", Names: rules, ClearMode: mode, Expect: version}}, false)
}

// Remove deletes a limiter's whole document and its index entry, whatever
// the key holds: also a document that no process would load, or a key of
// another Redis type, which every other write refuses to edit. The bound
// services run on their local tiers (file and default) from their next
// refresh and write them again when they next seed. Removing a limiter
// without a document changes nothing.
func (s *Store) Remove(ctx context.Context, limiter string) (WriteResult, error) {
	return s.remove(ctx, limiter, nil)
}

// RemoveIf is Remove with a compare-and-set: when the limiter's key no
// longer holds the document at version (the Version VersionedDocument
// gave), nothing is removed and the error wraps ErrConflict. An editor that
// showed an invalid document removes that one, never the document another
// writer replaced it with. The version "" stands for what VersionedDocument
// reads no bytes of: no key, a key of another Redis type, or a string over
// ratelimit.MaxDocumentBytes; it never matches a document within the bound.
func (s *Store) RemoveIf(ctx context.Context, limiter, version string) (WriteResult, error) {
	return s.remove(ctx, limiter, &version)
}

func (s *Store) remove(ctx context.Context, limiter string, version *string) (WriteResult, error) {
	if !rulecheck.ValidName(limiter) {
		return WriteResult{}, fmt.Errorf("rulestore: remove: %w", rulecheck.NameError("limiter", limiter))
	}
	return s.update(ctx, "remove", []edit{{Limiter: limiter, Op: "remove", Expect: version}}, false)
}

// ErrOverBounds is returned (wrapped) by a write that would leave a document
// over a bound every reader enforces (docs/limits.md): more than
// ratelimit.MaxRulesPerTier rules in a tier, or more than
// ratelimit.MaxDocumentBytes bytes; or that would add a limiter to an index
// that holds MaxLimiters already. Nothing is written. List and GC return it
// for an index over MaxLimiters.
var ErrOverBounds = errors.New("rulestore: over a bound of the rules model")

// ErrConflict is returned (wrapped) by PublishIf, DeleteIf, DeleteModeIf and RemoveIf when
// a limiter's document is no longer at the version the caller read.
var ErrConflict = errors.New("rulestore: conflict")

// ErrUnconfirmed is wrapped by the error of a write that was sent to Redis
// and not answered (a timeout, a connection lost): it may have been applied,
// so a caller must read the store before it says either way. Every other
// error of a write means that nothing was written.
var ErrUnconfirmed = errors.New("rulestore: write sent but not confirmed, it may have been applied")

// Outcome is what an audit record of a write says of its err: "ok", the
// error, or the error prefixed "unknown: " when the write may have been
// applied all the same (ErrUnconfirmed). The admin page and the CLI write
// their records with it.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnconfirmed):
		return "unknown: " + err.Error()
	}
	return err.Error()
}

// unanswered reports whether err, from the write script's call, may have
// come after Redis ran it: not a reply of Redis (an error it answered), nor
// a failure to connect or a closed client, after which nothing was sent.
func unanswered(err error) bool {
	var reply redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &reply), errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return false
	case errors.As(err, &op) && op.Op == "dial":
		return false
	}
	return true
}

// Version returns the version of a stored document: the SHA-1 of its bytes
// in hex (what Redis's redis.sha1hex gives, so the write script compares it
// on the server), or "" for no document. Any change to a document changes
// its version; rewriting the same bytes does not, which is what a
// compare-and-set of an editor wants.
func Version(raw []byte) string {
	if raw == nil {
		return ""
	}
	sum := sha1.Sum(raw)
	return hex.EncodeToString(sum[:])
}

// ValidVersion reports whether v can be what Version returns: a SHA-1 in
// lowercase hex, or "" for no document. PublishIf, DeleteIf and RemoveIf
// refuse any other version before they read or write, so that an error
// never repeats a caller's text of any length.
func ValidVersion(v string) bool {
	if v == "" {
		return true
	}
	if len(v) != 2*sha1.Size {
		return false
	}
	for _, c := range []byte(v) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func versionOf(edits []edit, limiter string) string {
	for _, e := range edits {
		if e.Limiter == limiter && e.Expect != nil {
			return *e.Expect
		}
	}
	return ""
}

// readDoc is a limiter's document as a write found it before running.
type readDoc struct {
	// doc is the decoded document: nil when there is none or it does not
	// decode.
	doc *configv1.LimiterRules
	// invalid tells that the key holds a document no process would load.
	invalid bool
}

// notPublished explains why rule is not deletable.
func notPublished(r readDoc, rule string) string {
	if r.doc == nil && r.invalid {
		return fmt.Sprintf("rule %s is not published (the limiter's document is invalid)", rule)
	}
	return NotPublished(r.doc, rule)
}

// NotPublished explains why rule is not in the published tier of doc (nil:
// the limiter has no document), as Delete's error does: a rule of the file
// or default tier is named as such. A dry run of a delete says the same.
func NotPublished(doc *configv1.LimiterRules, rule string) string {
	has := func(l *configv1.RuleList) bool {
		return slices.ContainsFunc(l.GetRules(), func(p *configv1.Rule) bool { return p.GetName() == rule })
	}
	switch {
	case doc == nil:
		return fmt.Sprintf("rule %s is not published (the limiter has no document)", rule)
	case has(doc.GetFileRules()):
		return fmt.Sprintf("rule %s is not published: it is in file_rules (edit rate_limits.yaml)", rule)
	case has(doc.GetDefaultRules()):
		return fmt.Sprintf("rule %s is not published: it is in default_rules (the application's own)", rule)
	}
	names := make([]string, 0, len(doc.GetPublishedRules().GetRules()))
	for _, p := range doc.GetPublishedRules().GetRules() {
		names = append(names, p.GetName())
	}
	if best := suggest.Closest(rule, names); best != "" {
		// A typo during an incident: the rule the operator meant stays in force.
		return fmt.Sprintf("rule %s is not published; did you mean %s?", rule, best)
	}
	return fmt.Sprintf("rule %s is not published", rule)
}

// ModeNotPublished explains why doc (nil: the limiter has no document) has
// no published mode to delete, as DeleteMode's error does: a mode the file
// tier sets is named as rate_limits.yaml's. A dry run says the same.
func ModeNotPublished(doc *configv1.LimiterRules) string {
	switch {
	case doc == nil:
		return "no published mode (the limiter has no document)"
	case config.ModeWord(doc.GetFileRules().GetMode()) != "":
		return fmt.Sprintf("no published mode: mode %s is file_rules' (edit rate_limits.yaml)", config.ModeWord(doc.GetFileRules().GetMode()))
	}
	return "no published mode"
}

// edit is one limiter's part of a write.lua plan.
type edit struct {
	Limiter  string      `json:"limiter"`
	Op       string      `json:"op"`              // publish, seed, delete or remove
	Rules    [][2]string `json:"rules,omitempty"` // publish: name, rule bytes
	File     []string    `json:"file,omitempty"`  // seed: rule bytes
	Defaults []string    `json:"defaults,omitempty"`
	Names    []string    `json:"names,omitempty"`     // delete
	Mode     string      `json:"mode,omitempty"`      // publish: the published tier's mode, JSON-encoded
	FileMode string      `json:"file_mode,omitempty"` // seed: the file tier's mode, JSON-encoded
	// ClearMode (delete) removes the published tier's mode.
	ClearMode bool `json:"clear_mode,omitempty"`
	// Expect, when set, is the Version the document must still have.
	Expect *string `json:"expect,omitempty"`
}

// modeJSON encodes a tier's mode as write.lua splices it ("" when unset).
func modeJSON(m configv1.Mode) string {
	if w := config.ModeWord(m); w != "" {
		return strconv.Quote(w)
	}
	return ""
}

// update applies edits (one per limiter, sorted) in one write.lua call: the
// read-modify-write runs on the server, atomically, so concurrent writers
// never conflict. The documents are read first, to refuse (with the
// validation error) to edit one that a process could not load. A dry update
// runs every check and writes nothing (CheckPublish).
func (s *Store) update(ctx context.Context, op string, edits []edit, dry bool) (WriteResult, error) {
	for _, e := range edits {
		if e.Expect != nil && !ValidVersion(*e.Expect) {
			return WriteResult{}, fmt.Errorf("rulestore: %s: limiter %s: %.80q is not a document version (a SHA-1 in hex, or empty for none); nothing was written", op, e.Limiter, *e.Expect)
		}
	}
	if len(edits) == 0 {
		rev, err := s.Revision(ctx)
		return WriteResult{Revision: rev}, err
	}
	keys := make([]string, 0, len(edits)+2)
	keys = append(keys, s.indexKey(), s.revKey())
	for _, e := range edits {
		keys = append(keys, s.Key(e.Limiter))
	}
	docs, err := s.readDocs(ctx, op, edits)
	if err != nil {
		return WriteResult{}, fmt.Errorf("rulestore: %s: %w", op, err)
	}
	plan, err := json.Marshal(edits)
	if err != nil {
		return WriteResult{}, fmt.Errorf("rulestore: %s: %w", op, err)
	}
	dryArg := "0"
	if dry {
		dryArg = "1"
	}
	res, err := writeScript.Run(ctx, s.client, keys, plan, ratelimit.MaxRulesPerTier, ratelimit.MaxDocumentBytes, MaxLimiters, dryArg).Slice()
	if err != nil {
		if unanswered(err) {
			return WriteResult{}, fmt.Errorf("rulestore: %s: write: %w: %w", op, ErrUnconfirmed, err)
		}
		return WriteResult{}, fmt.Errorf("rulestore: %s: write: %w", op, err)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		out := WriteResult{Revision: res[1].(int64)}
		if typ, _ := res[2].(string); typ != "" {
			s.replacedKey(s.indexKey(), typ, indexReplaced)
		}
		for _, v := range res[3:] {
			out.Changed = append(out.Changed, v.(string))
		}
		sort.Strings(out.Changed)
		return out, nil
	case -1:
		return WriteResult{}, fmt.Errorf("rulestore: %s: %w: %s cannot be read (%v); Remove it", op, ErrInvalidDocument, s.Key(res[1].(string)), res[2])
	case -4:
		return WriteResult{}, fmt.Errorf("%w: limiter %s: %v (docs/limits.md); nothing was written", ErrOverBounds, res[1], res[2])
	case -3:
		lim := res[1].(string)
		return WriteResult{}, fmt.Errorf("%w: limiter %s: its document was changed by another writer since it was read (version %q, now %q); nothing was written",
			ErrConflict, lim, versionOf(edits, lim), res[2])
	case -2:
		lim := res[1].(string)
		var why []string
		for _, v := range res[2:] {
			why = append(why, notPublished(docs[lim], v.(string)))
		}
		return WriteResult{}, fmt.Errorf("%w: limiter %s: %s", ErrRuleNotFound, lim, strings.Join(why, "; "))
	case -5:
		lim := res[1].(string)
		why := "no published mode (the limiter's document is invalid)"
		if !docs[lim].invalid || docs[lim].doc != nil {
			why = ModeNotPublished(docs[lim].doc)
		}
		return WriteResult{}, fmt.Errorf("%w: limiter %s: %s; nothing was written", ErrModeNotPublished, lim, why)
	}
	return WriteResult{}, fmt.Errorf("rulestore: %s: unexpected reply %v", op, res)
}

// readDocs reads and validates the documents of edits' limiters. A
// publish or seed refuses to edit a document that no process would load
// (its result would be rejected too); a delete only shrinks one, and a
// remove takes it whole, so they proceed, and what was read explains a
// delete's missing rules.
func (s *Store) readDocs(ctx context.Context, op string, edits []edit) (map[string]readDoc, error) {
	keys := make([]string, len(edits))
	for i, e := range edits {
		keys[i] = s.Key(e.Limiter)
	}
	docs := map[string]readDoc{}
	var errs []error
	// Each document is decoded as it arrives: the bytes held at once are
	// those of one read (MaxReadBytes).
	err := s.readEach(ctx, keys, 0, time.Time{}, func(i int, st stored) error {
		e := edits[i]
		doc, err := st.decode(keys[i])
		if err == nil && doc != nil {
			err = s.checkRead(e.Limiter, doc)
		}
		docs[e.Limiter] = readDoc{doc: doc, invalid: err != nil}
		if err != nil && (op == "publish" || op == "seed") {
			if !errors.Is(err, ErrInvalidDocument) {
				err = fmt.Errorf("%w: %s: %w", ErrInvalidDocument, keys[i], err)
			}
			errs = append(errs, fmt.Errorf("%w (only a delete shrinks it and a remove takes it away: `ratekit rules delete|remove`, Store.Delete|Remove)", err))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}
	return docs, errors.Join(errs...)
}

// ruleBytes encodes each rule of l exactly as config.MarshalLimiterRules
// writes it inside a document (validating it on the way), so that write.lua
// only moves whole rules and never encodes one itself.
func ruleBytes(l *configv1.RuleList) ([]string, error) {
	out := make([]string, 0, len(l.GetRules()))
	var errs []error
	for _, r := range l.GetRules() {
		b, err := config.MarshalRule(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, string(b))
	}
	return out, errors.Join(errs...)
}

// effective converts a document into core rule tiers and returns them with
// the list a limiter evaluates: file ++ published ++ default, a higher tier's
// rule replacing a lower one of the same name. A tier the document does not
// hold comes from local (the process's own tiers), and so does the file
// tier's mode.
func effective(doc *configv1.LimiterRules, local tiers.Set) (tiers.Set, []ratelimit.Rule, error) {
	if err := checkLocal(local); err != nil {
		return tiers.Set{}, nil, err
	}
	t := tiers.Set{File: local.File, Defaults: local.Defaults}
	t.Mode, _ = ModeOf(doc, local.Mode)
	var errs []error
	conv := func(l *configv1.RuleList, dst *[]ratelimit.Rule) {
		if l == nil {
			return
		}
		rules, err := config.RulesFromProto(l)
		if err != nil {
			errs = append(errs, err)
			return
		}
		*dst = rules
	}
	conv(doc.GetFileRules(), &t.File)
	conv(doc.GetPublishedRules(), &t.Published)
	conv(doc.GetDefaultRules(), &t.Defaults)
	if err := errors.Join(errs...); err != nil {
		return tiers.Set{}, nil, err
	}
	merged := t.Merged()
	if _, err := ratelimit.CompileRules("", merged); err != nil {
		return tiers.Set{}, nil, fmt.Errorf("merged rules: %w", err)
	}
	return t, merged, nil
}

// DocumentTiers returns a stored document's tiers as core rules, and the mode
// of the highest tier that sets one; Set.Merged gives the list a limiter
// evaluates from them (file ++ published ++ default, a higher tier's rule
// replacing a lower one of the same name), which DocumentTiers checks. A tier
// the document lacks is empty.
func DocumentTiers(doc *configv1.LimiterRules) (tiers.Set, error) {
	t, _, err := effective(doc, tiers.Set{})
	if err != nil {
		return tiers.Set{}, fmt.Errorf("rulestore: %w", err)
	}
	return t, nil
}

// ModeOf resolves a limiter's mode as its replicas do: the highest tier that
// sets one wins, file over published over default, and the document's file
// tier, when it holds one, stands in for the local one, whose mode is local.
// It returns the mode and the tier that set it: nil and "" for none. doc may
// be nil.
func ModeOf(doc *configv1.LimiterRules, local *ratelimit.Enforcement) (*ratelimit.Enforcement, string) {
	mode := local
	if doc.GetFileRules() != nil {
		mode = modeFromProto(doc.GetFileRules().GetMode())
	}
	if mode != nil {
		return mode, tiers.File
	}
	for _, l := range []struct {
		tier string
		list *configv1.RuleList
	}{{tiers.Published, doc.GetPublishedRules()}, {tiers.Default, doc.GetDefaultRules()}} {
		if mode = modeFromProto(l.list.GetMode()); mode != nil {
			return mode, l.tier
		}
	}
	return nil, ""
}

// modeFromProto converts a tier's mode: nil when the tier sets none.
func modeFromProto(m configv1.Mode) *ratelimit.Enforcement {
	e, ok := config.ModeFromProto(m)
	if !ok {
		return nil
	}
	return &e
}

// modeToProto converts a mode to the schema's enum: MODE_UNSPECIFIED for nil.
func modeToProto(m *ratelimit.Enforcement) configv1.Mode {
	if m == nil {
		return configv1.Mode_MODE_UNSPECIFIED
	}
	return config.ModeToProto(*m)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
