package rulestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/tiers"
	"github.com/ratekit/ratekit/internal/goredis"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// binding is a limiter whose rules follow its document. Its state is guarded
// by Store.mu; the limiter itself swaps rule lists atomically, so checks never
// wait on a refresh.
type binding struct {
	lim   *ratelimit.Limiter
	local tiers.Set             // the service's own file and default tiers (Bind, SetLocal)
	base  ratelimit.Enforcement // the limiter's mode at Bind: used when no tier sets one

	present     bool      // a document is applied (else the local tiers are)
	raw         string    // the applied document
	tiers       tiers.Set // what the limiter enforces now
	refreshedAt time.Time // last successful refresh
	err         error     // last refresh's error
	rejected    string    // what the last rejected key held (see rejection): logged once, never parsed again
	rejecting   bool      // rejected is set: an empty document is rejected too, and its rejection is ""
	rejectErr   error     // why it was rejected
	stale       bool      // local tiers changed: apply again even if the document did not
	owed        bool      // tiers were applied while a seed was owed (local over the document's own)
	rejectOwed  bool      // rejected was rejected while a seed was owed
	// accepted: a refresh applied what Redis held since the rejection. The
	// rejection stays remembered (a document that flips between a valid and
	// an invalid version is parsed once, not at every flip), and finding it
	// again is logged and counted again.
	accepted bool
	// localGen counts SetLocal calls; rejectGen is localGen at the last
	// rejection: one judged under other local tiers is judged again (the
	// merge takes the tiers a document lacks from them), not logged again.
	localGen, rejectGen uint64
}

// Bind makes a limiter follow its document: at every refresh its rules
// become the document's file ++ published ++ default tiers (a higher tier's
// rule replacing a lower one of the same name; SetRules applies the list
// whole, or not at all). local are the tiers the service itself knows
// (Defaults compiled into the application, File from its rate_limits.yaml):
// the limiter runs on them until a document is loaded, whenever its document
// is missing (a flushed store), and for a tier the document does not hold.
// Bind sets them as the limiter's rules at once. Their remote and published
// tiers must be empty: those are not the service's to set.
//
// The limiter's mode (enforce or shadow) follows its tiers the same way: the
// highest tier that sets one wins (local.Mode counts as the file tier's), and
// with none the limiter keeps the mode it had when bound. A SetEnforcement on
// a bound limiter lasts until its document next changes.
//
// When Options.Metrics is a ConfigWatcher, Bind tells it the key of the
// limiter's document.
func (s *Store) Bind(l *ratelimit.Limiter, local tiers.Set) error {
	if l == nil {
		return errors.New("rulestore: bind: limiter is nil")
	}
	local = local.Clone() // the caller keeps its own
	t, merged, err := effective(nil, local)
	if err != nil {
		return fmt.Errorf("rulestore: bind %s: %w", l.Name(), err)
	}
	if err := s.bind(l, local, t, merged); err != nil {
		return err
	}
	if w, ok := s.metrics.(ConfigWatcher); ok {
		w.ConfigWatched(s.Key(l.Name()))
	}
	return nil
}

func (s *Store) bind(l *ratelimit.Limiter, local, t tiers.Set, merged []ratelimit.Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.bound[l.Name()]; dup {
		return fmt.Errorf("rulestore: bind: limiter %s is already bound", l.Name())
	}
	if err := l.SetRules(merged); err != nil {
		return fmt.Errorf("rulestore: bind: %w", err)
	}
	b := &binding{lim: l, local: local, tiers: t, base: l.Enforcement()}
	b.setMode(t.Mode)
	s.bound[l.Name()] = b
	return nil
}

// SetLocal replaces the local tiers of a bound limiter, for example after the
// service reloaded rate_limits.yaml. They apply at once: alone when the
// limiter has no document, or filling the tiers its last document lacks. An
// invalid list is rejected whole and the limiter keeps its rules.
func (s *Store) SetLocal(ctx context.Context, limiter string, local tiers.Set) error {
	local = local.Clone() // the caller keeps its own
	if _, _, err := effective(nil, local); err != nil {
		return fmt.Errorf("rulestore: set local tiers of %s: %w", limiter, err)
	}
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	s.mu.Lock()
	b, ok := s.bound[limiter]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("rulestore: set local tiers: limiter %s is not bound", limiter)
	}
	old := b.local
	b.local, b.stale = local, true
	b.localGen++
	present, raw := b.present, b.raw
	s.mu.Unlock()
	if err := s.apply(b, s.Key(limiter), stored{present: present, raw: raw}, false); err != nil {
		s.mu.Lock()
		b.local, b.stale = old, false
		s.mu.Unlock()
		return err
	}
	return nil
}

// Tiers returns the tiers a bound limiter enforces now (its file, published
// and default tiers, and their mode); ok is false for a limiter not bound.
// The debug page shows them (debug.Options.Tiers).
func (s *Store) Tiers(limiter string) (t tiers.Set, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.bound[limiter]
	if !ok {
		return tiers.Set{}, false
	}
	return b.tiers.Clone(), true
}

// RefreshStatus returns when a bound limiter's replica was last refreshed
// from Redis (zero: never; the limiter runs on its local tiers) and the error
// of its last refresh (nil: it succeeded). Both are zero for a limiter not
// bound.
func (s *Store) RefreshStatus(limiter string) (refreshedAt time.Time, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.bound[limiter]
	if !ok {
		return time.Time{}, nil
	}
	return b.refreshedAt, b.err
}

// Refresh reads the documents of all bound limiters, in one call (more when
// they hold more than MaxReadBytes), and applies the changed ones. A seed
// that SeedBound owes for want of Redis is written first, within the
// Options.Timeout of that first read call. When
// Redis fails every limiter keeps the rules it has (the last good copy, or
// its local tiers when it never loaded one); a document
// that is invalid, or whose merged list SetRules rejects, is logged and
// skipped, its limiter keeping its rules. The error joins what went wrong.
func (s *Store) Refresh(ctx context.Context) error {
	s.refreshMu.Lock()
	defer s.refreshMu.Unlock()
	s.mu.RLock()
	names := sortedKeys(s.bound)
	bs := make([]*binding, len(names))
	keys := make([]string, len(names))
	for i, n := range names {
		bs[i], keys[i] = s.bound[n], s.Key(n)
	}
	s.mu.RUnlock()
	if len(keys) == 0 {
		return nil
	}
	var errs []error
	// An owed seed and the first read share one deadline: a hung Redis holds
	// the refresh for one Options.Timeout, not one for each.
	deadline := time.Now().Add(s.timeout)
	if err := s.seedOwedBound(ctx, deadline); err != nil {
		errs = append(errs, err)
	}
	done := 0         // the limiters whose documents were read
	var gone []string // limiters whose applied document is no longer stored
	err := s.readEach(ctx, keys, s.timeout, deadline, func(i int, st stored) error {
		s.mu.RLock()
		was := bs[i].present
		s.mu.RUnlock()
		if was && !st.present {
			gone = append(gone, names[i])
		}
		if err := s.apply(bs[i], keys[i], st, true); err != nil {
			errs = append(errs, err)
		}
		done = i + 1
		return nil
	})
	if len(gone) > 0 {
		if err := s.seedGone(ctx, gone); err != nil {
			errs = append(errs, err)
		}
	}
	if err != nil {
		goredis.ReloadSlots(s.client) // a failover: see ReloadSlots
		err = fmt.Errorf("rulestore: refresh: %w", err)
		s.mu.Lock()
		for _, b := range bs[done:] {
			b.err = err
		}
		s.mu.Unlock()
		for _, n := range names[done:] {
			s.report(n, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// seedGone seeds again, for a service that seeded its documents
// (SeedBound succeeded), when documents it applied are gone: Redis lost its
// data (a restart without persistence, a failover to an empty replica) or
// an operator removed an invalid one. Until then `ratekit explain`, `clear`
// and the admin page found no document, and the services ran on their local
// tiers alone until they restarted. A seed that fails for want of Redis is
// owed, as SeedBound's: the next refresh writes it.
func (s *Store) seedGone(ctx context.Context, gone []string) error {
	s.mu.RLock()
	seeded := s.seeded
	s.mu.RUnlock()
	if !seeded {
		// The service does not seed (a template service that rejected its
		// rate_limits.yaml, a reader): the documents are someone else's to
		// write. Meanwhile its limiters drop the rules they had from Redis
		// for their local tiers, which would otherwise go unsaid.
		s.logger.Warn("rate_limit_rule_store_documents_gone", slog.Any("limiters", gone),
			slog.String("note", "documents gone from Redis ("+config.ListNames(gone)+"), which this service does not seed: its limiters run on their local tiers until a service seeds them"))
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	res, err := s.SeedBound(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("rulestore: refresh: seed again the documents that went (%s): %w", config.ListNames(gone), err)
	}
	s.logger.Info("rate_limit_rule_store_seeded", slog.Any("changed", res.Changed),
		slog.String("note", "documents this service seeded had gone from Redis ("+config.ListNames(gone)+"): seeded again"))
	return nil
}

// seedOwedBound writes the seed a SeedBound that failed for want of Redis
// owes, by deadline (the refresh's first read shares it), before the
// documents are read: they then hold the service's own tiers, not an older
// version's.
func (s *Store) seedOwedBound(ctx context.Context, deadline time.Time) error {
	s.mu.RLock()
	retry := s.seedRetry
	s.mu.RUnlock()
	if !retry {
		return nil
	}
	sctx, cancel := context.WithDeadline(ctx, deadline)
	res, err := s.SeedBound(sctx)
	cancel()
	if err == nil {
		s.logger.Info("rate_limit_rule_store_seeded", slog.Any("changed", res.Changed),
			slog.String("note", "the seed a failed SeedBound owed is written"))
		return nil
	}
	s.mu.RLock()
	retry = s.seedRetry
	s.mu.RUnlock()
	if !retry {
		s.logger.Warn("rate_limit_rule_store_seed_refused", slog.Any("error", err),
			slog.String("note", "not tried again; the limiters run on their own file and default tiers until a SeedBound succeeds"))
		return nil
	}
	return fmt.Errorf("rulestore: refresh: seed owed since SeedBound failed: %w", err)
}

// rejection identifies what a rejected key held: the document itself, or
// the type or size that kept it from being read.
func (st stored) rejection() string {
	if st.bad != nil {
		return st.fingerprint
	}
	return st.raw
}

// apply makes one limiter follow its document st. A key that holds what was
// rejected last time is rejected again without being parsed, even after
// other documents were applied: a bad document costs one parse, not one per
// refresh, nor one per flip back to it. read is true when st was just read
// from Redis (a refresh): only then does the outcome count as a refresh in
// RefreshStatus and Metrics (SetLocal applies the copy it holds).
func (s *Store) apply(b *binding, key string, st stored, read bool) error {
	name := b.lim.Name()
	present, raw := st.present, st.raw
	s.mu.RLock()
	owed := s.seedOwed
	same := !b.stale && st.bad == nil && present == b.present && raw == b.raw && owed == b.owed // already enforced
	again := !same && !b.stale && present && b.rejecting && b.rejected == st.rejection() && owed == b.rejectOwed && b.rejectGen == b.localGen
	s.mu.RUnlock()
	if again { // only a refresh: SetLocal's binding is stale
		s.mu.Lock()
		err := b.rejectErr
		b.err = err
		logRejection := b.accepted
		b.accepted = false
		s.mu.Unlock()
		if logRejection {
			s.logRejection(name, key, err)
		}
		s.report(name, err)
		return err
	}
	var t tiers.Set
	err := func() error {
		if same {
			return nil
		}
		var merged []ratelimit.Rule
		if !present {
			t, merged, _ = effective(nil, b.local) // checked by Bind
		} else {
			doc, err := st.decode(key)
			if err == nil && owed {
				// What the document holds once the owed seed is written:
				// the service's own file and default tiers (b.local).
				doc = &configv1.LimiterRules{PublishedRules: doc.GetPublishedRules()}
			}
			if err == nil {
				err = s.checkRead(name, doc)
			}
			if err == nil {
				t, merged, err = effective(doc, b.local)
			}
			if err != nil {
				return fmt.Errorf("rulestore: document %s rejected, limiter %s keeps its rules: %w", key, name, err)
			}
		}
		if err := b.lim.SetRules(merged); err != nil {
			return fmt.Errorf("rulestore: document %s rejected, limiter %s keeps its rules: %w", key, name, err)
		}
		b.setMode(t.Mode)
		return nil
	}()
	s.mu.Lock()
	logRejection := err != nil && (!b.rejecting || st.rejection() != b.rejected || b.accepted)
	if err != nil {
		b.rejected, b.rejecting, b.rejectErr, b.rejectOwed, b.rejectGen = st.rejection(), true, err, owed, b.localGen
		b.accepted = false
	} else {
		if read { // SetLocal applied the copy it holds: what Redis holds may still be rejected
			b.accepted = b.rejecting
		}
		if !same {
			b.present, b.raw, b.tiers = present, raw, t
		}
		b.stale, b.owed = false, owed
		if read {
			b.refreshedAt = s.now()
		}
	}
	if read {
		b.err = err
	}
	s.mu.Unlock()
	if logRejection {
		s.logRejection(name, key, err)
	}
	if read && err == nil {
		if a, ok := s.metrics.(ConfigAcceptor); ok {
			a.ConfigAccepted(key)
		}
	}
	if read {
		s.report(name, err)
	}
	return err
}

// logRejection logs and counts the rejection of a limiter's document.
func (s *Store) logRejection(limiter, key string, err error) {
	s.logger.Warn("rate_limit_rule_document_rejected", slog.String("limiter", limiter), slog.String("key", key), slog.Any("error", err))
	if s.metrics != nil {
		s.metrics.ConfigRejected(key)
	}
}

// setMode applies the tiers' mode to the limiter, or the limiter's own mode
// from before Bind when no tier sets one (a published mode deleted again).
func (b *binding) setMode(m *ratelimit.Enforcement) {
	e := b.base
	if m != nil {
		e = *m
	}
	_ = b.lim.SetEnforcement(e) // e is always valid
}

// checkRead runs on a document read from Redis the checks that Publish and
// Seed run before writing (CheckDocument with Options.Available): another
// SDK, another service on the same prefix or a hand-made SET may have
// written it.
func (s *Store) checkRead(limiter string, doc *configv1.LimiterRules) error {
	if s.avail == nil {
		return nil
	}
	return CheckDocument(s.avail, limiter, doc)
}

// CheckDocument runs on a limiter's document the checks of available (the
// limiter and the properties its rules use must be declared, skip rules
// must be allowed) that a Store with that Options.Available runs before it
// writes a document and after it reads one: a document that fails them is
// one its replicas reject and its publishes refuse to edit.
func CheckDocument(available *config.AvailableLimiters, limiter string, doc *configv1.LimiterRules) error {
	for _, tier := range []*configv1.RuleList{doc.GetFileRules(), doc.GetPublishedRules(), doc.GetDefaultRules()} {
		if len(tier.GetRules()) == 0 {
			continue
		}
		req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{limiter: tier}}
		if err := config.ValidatePublishRulesRequest(req, available); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) report(limiter string, err error) {
	if s.metrics != nil {
		s.metrics.RuleStoreRefresh(limiter, err)
	}
}

// Run refreshes the bound limiters at once and then every Interval (plus up
// to 10% at random) until ctx is done. It logs a failed refresh when the
// failures start and when they end, and returns when ctx is done.
func (s *Store) Run(ctx context.Context) {
	var failingSince time.Time
	every(ctx, s.interval, 10, func() {
		err := s.Refresh(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil && failingSince.IsZero():
			failingSince = s.now()
			s.logger.Warn("rate_limit_rule_store_refresh_failed", slog.Any("error", err),
				slog.String("note", "limiters keep their last good rules"))
		case err == nil && !failingSince.IsZero():
			s.logger.Info("rate_limit_rule_store_refresh_recovered", slog.Duration("after", s.now().Sub(failingSince)))
			failingSince = time.Time{}
		}
	})
}

// Start runs Run in a new goroutine and returns a channel closed when it has
// returned (after ctx is done).
func (s *Store) Start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	return done
}
