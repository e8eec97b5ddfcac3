package rulestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ratekit/ratekit/controlplane/config"
	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/internal/rulecheck"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// DefaultReconcileInterval is how often Publisher.Run publishes everything.
const DefaultReconcileInterval = time.Minute

// LimitResolver returns the current value of a published limit, typically
// read from the application's settings (a database column).
type LimitResolver func(ctx context.Context) (int64, error)

// PublisherOptions configures NewPublisher. The zero value is usable.
type PublisherOptions struct {
	// Interval is the reconciler's period (default DefaultReconcileInterval).
	// Each wait adds up to 20% at random so a fleet does not publish in step.
	Interval time.Duration
	// Logger receives the reconciler's failures (default slog.Default()).
	Logger *slog.Logger
}

// Publisher publishes rules whose limit the application resolves
// (docs/design.md#dynamic-values): Register declares once which setting is which rule's limit,
// PublishAll resolves every registered value and publishes them in one
// batch, and Run keeps doing so on an interval, alongside the application's
// own publish-on-save hooks. It is safe for concurrent use.
type Publisher struct {
	store    *Store
	interval time.Duration
	logger   *slog.Logger

	mu   sync.Mutex
	regs []registration // in Register order: the published order
}

type registration struct {
	limiter string
	rule    ratelimit.Rule
	limit   LimitResolver
}

// NewPublisher returns a Publisher that writes into store.
func NewPublisher(store *Store, opts PublisherOptions) *Publisher {
	p := &Publisher{store: store, interval: opts.Interval, logger: opts.Logger}
	if p.interval <= 0 {
		p.interval = DefaultReconcileInterval
	}
	if p.logger == nil {
		p.logger = slog.Default()
	}
	return p
}

// Register declares a published rule of limiter: rule is the template (name,
// characteristics, period, action, match...), limit resolves its limit at
// every PublishAll. With a nil limit, rule.Limit is resolved instead (a
// rule.LimitFunc, or a static value); a PeriodFunc period is resolved
// the same way. The rule reuses the name of an application default to
// replace it (and inherit its counter). Registering a limiter and rule name
// twice is an error.
func (p *Publisher) Register(limiter string, rule ratelimit.Rule, limit LimitResolver) error {
	if !rulecheck.ValidName(limiter) {
		return fmt.Errorf("rulestore: register: %w", rulecheck.NameError("limiter", limiter))
	}
	if limit != nil && (rule.Limit != 0 || rule.LimitFunc != nil) {
		return fmt.Errorf("rulestore: register %s/%s: the limit is given twice (in the rule and as a resolver)", limiter, rule.Name)
	}
	if limit == nil && !(rule.Limit != 0 || rule.LimitFunc != nil) && rule.Action != ratelimit.ActionSkip {
		return fmt.Errorf("rulestore: register %s/%s: no limit (give a resolver or rule.Limit)", limiter, rule.Name)
	}
	check := rule
	if limit != nil {
		check.Limit = 1 // stands in for the resolved value
	}
	if err := check.Validate(); err != nil {
		return fmt.Errorf("rulestore: register %s: %w", limiter, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.ContainsFunc(p.regs, func(r registration) bool { return r.limiter == limiter && r.rule.Name == rule.Name }) {
		return fmt.Errorf("rulestore: register: %s/%s is already registered", limiter, rule.Name)
	}
	p.regs = append(p.regs, registration{limiter: limiter, rule: rule, limit: limit})
	return nil
}

// PublishAll resolves every registered rule and publishes them in one batch
// (Store.Publish: upsert by name, atomic, limiters and rules not registered
// untouched). Publishing the same values again writes nothing. A rule whose
// resolver fails, or resolves to a value the schema rejects, is left out and
// keeps its previous published value, and so is a rule that the store's
// Options.Available refuses (an undeclared limiter or property); the others
// are published and the returned error names the ones left out.
func (p *Publisher) PublishAll(ctx context.Context) (WriteResult, error) {
	p.mu.Lock()
	regs := slices.Clone(p.regs)
	p.mu.Unlock()
	req := &configv1.PublishRulesRequest{RateLimits: map[string]*configv1.RuleList{}}
	var errs []error
	for _, reg := range regs {
		r, err := reg.resolve(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s/%s: %w", reg.limiter, reg.rule.Name, err))
			continue
		}
		// Checked alone against Options.Available, so that one rule the
		// store refuses never keeps the others from publishing.
		if err := config.ValidateRuleList(reg.limiter, &configv1.RuleList{Rules: []*configv1.Rule{r}}, p.store.avail); err != nil {
			errs = append(errs, placed(err, reg.limiter, reg.rule.Name))
			continue
		}
		l := req.RateLimits[reg.limiter]
		if l == nil {
			l = &configv1.RuleList{}
			req.RateLimits[reg.limiter] = l
		}
		l.Rules = append(l.Rules, r)
	}
	res, err := p.store.Publish(ctx, req)
	if err != nil {
		return WriteResult{}, errors.Join(append([]error{err}, errs...)...)
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("rulestore: publish all: not published: %w", errors.Join(errs...))
	}
	return res, nil
}

// placed names limiter and rule in each problem of a validation error that
// does not name them yet (a problem of the limiter alone, such as an
// undeclared one), so that the error names every rule once.
func placed(err error, limiter, rule string) error {
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("%s/%s: %w", limiter, rule, err)
	}
	for _, e := range ve.Errors {
		if e.Limiter == "" {
			e.Limiter = limiter
		}
		if e.Rule == "" {
			e.Rule = rule
		}
	}
	return err
}

func (reg registration) resolve(ctx context.Context) (*configv1.Rule, error) {
	r := reg.rule
	if (r.Limit != 0 || r.LimitFunc != nil) || reg.limit != nil {
		var n int64
		var err error
		switch {
		case reg.limit != nil:
			n, err = reg.limit(ctx)
		case r.LimitFunc != nil:
			n, err = r.LimitFunc(ctx)
		default:
			n = r.Limit
		}
		if err != nil {
			return nil, fmt.Errorf("resolve limit: %w", err)
		}
		r.Limit, r.LimitFunc = n, nil // Validate below rejects a value out of range
	}
	if r.PeriodFunc != nil {
		d, err := r.PeriodFunc(ctx)
		if err != nil {
			return nil, fmt.Errorf("resolve period: %w", err)
		}
		r.Period, r.PeriodFunc = d, nil
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return config.RuleToProto(r)
}

// Run is the reconciler: it calls PublishAll at once and then every Interval
// (plus up to 20% at random) until ctx is done, logging failures. Its first
// run is the backfill of values set before the application published them,
// and later runs repopulate a flushed store.
func (p *Publisher) Run(ctx context.Context) {
	every(ctx, p.interval, 5, func() {
		if _, err := p.PublishAll(ctx); err != nil && ctx.Err() == nil {
			p.logger.Warn("rate_limit_publish_all_failed", slog.Any("error", err))
		}
	})
}

// every calls fn at once and then after each wait of interval plus up to
// interval/jitterDiv at random, until ctx is done.
func every(ctx context.Context, interval time.Duration, jitterDiv int64, fn func()) {
	for {
		fn()
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(interval + time.Duration(rand.Int64N(int64(interval)/jitterDiv+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
