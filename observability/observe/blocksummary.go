package observe

import (
	"cmp"
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
)

// Defaults of BlockSummaryOptions.
const (
	DefaultSummaryInterval = time.Minute
	DefaultSummaryMaxLines = 10
)

// SummaryMessage is the message of the block summary log records.
const SummaryMessage = "rate_limit_block_summary"

// OtherName is the limiter and rule of the summary line that folds, when a
// summary has more than MaxLines pairs, all of them but the first MaxLines-1.
const OtherName = "other"

// BlockSummaryOptions configures NewBlockSummary. The zero value is ready to use.
type BlockSummaryOptions struct {
	// Logger receives the summary (default slog.Default()).
	Logger *slog.Logger
	// Interval between summaries in Run (default DefaultSummaryInterval).
	Interval time.Duration
	// MaxLines bounds the lines of one summary (default DefaultSummaryMaxLines):
	// the pairs with the most blocks get a line each, the rest one "other" line.
	MaxLines int
	// Now is the clock of BlockCount.Last (default time.Now).
	Now func() time.Time
}

// BlockSummary is an Observer that counts blocked checks per
// (limiter, rule) and logs them periodically, at INFO, as
//
//	msg=rate_limit_block_summary limiter=http_request rule=api_by_user block_count=42
//
// instead of one line per block, which would let an attacker flood the logs.
// Nothing is logged on the success path or in an interval without blocks. Run
// (or call Flush yourself) to emit the lines; Blocks feeds the debug page.
// It keeps a count per pair since the process started, for at most
// MaxRuleSeries of a limiter's own rules and MaxPerRequestRuleSeries of its
// per-request rules (which can bring any number of names), as Metrics does;
// the blocks of its other rules are counted under rule OverflowRule.
type BlockSummary struct {
	logger   *slog.Logger
	interval time.Duration
	maxLines int
	now      func() time.Time

	mu    sync.Mutex
	pairs map[blockPair]*BlockCount
	rules ruleLabels // the rule names given a pair of their own
}

type blockPair struct{ limiter, rule string }

// BlockCount is what a BlockSummary knows about one (limiter, rule) pair.
type BlockCount struct {
	Limiter  string    `json:"limiter"`
	Rule     string    `json:"rule"`
	Pending  int64     `json:"pending"`  // blocks since the last summary
	Previous int64     `json:"previous"` // blocks in the last summarized interval
	Total    int64     `json:"total"`    // blocks since the process started
	Last     time.Time `json:"last"`     // time of the latest block
}

// BlockSource lists recent blocks per (limiter, rule); *BlockSummary implements it.
type BlockSource interface {
	Blocks() []BlockCount
}

var (
	_ Observer    = (*BlockSummary)(nil)
	_ BlockSource = (*BlockSummary)(nil)
)

// NewBlockSummary returns a block summary observer.
func NewBlockSummary(opts BlockSummaryOptions) *BlockSummary {
	s := &BlockSummary{
		logger:   opts.Logger,
		interval: opts.Interval,
		maxLines: opts.MaxLines,
		now:      opts.Now,
		pairs:    map[blockPair]*BlockCount{},
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.interval <= 0 {
		s.interval = DefaultSummaryInterval
	}
	if s.maxLines <= 0 {
		s.maxLines = DefaultSummaryMaxLines
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Observe implements Observer: it counts blocked checks (peeks never
// count: peeking is how callers ask "would this block?").
func (s *BlockSummary) Observe(_ context.Context, e ratelimit.Event) {
	r := e.Result
	if e.Kind != ratelimit.EventCheck || r == nil || r.Action != ratelimit.ActionBlock || r.Rule == nil {
		return
	}
	now := s.now()
	p := blockPair{e.Limiter, r.Rule.Name}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pairs[p]
	if c == nil {
		p.rule = s.rules.label(p.limiter, p.rule, r.RulePerRequest)
		if c = s.pairs[p]; c == nil {
			c = &BlockCount{Limiter: p.limiter, Rule: p.rule}
			s.pairs[p] = c
		}
	}
	c.Pending++
	c.Total++
	c.Last = now
}

// Flush logs the blocks counted since the previous Flush and starts a new
// interval: one line per pair, most blocks first (ties by limiter and rule),
// at most MaxLines lines, the pairs beyond MaxLines-1 folded into one line with
// limiter and rule "other" and a pairs attribute. It logs nothing when there
// were no blocks.
func (s *BlockSummary) Flush(ctx context.Context) {
	s.mu.Lock()
	var lines []BlockCount
	for _, c := range s.pairs {
		if c.Pending > 0 {
			lines = append(lines, *c)
		}
		c.Previous, c.Pending = c.Pending, 0
	}
	s.mu.Unlock()
	if len(lines) == 0 {
		return
	}
	slices.SortFunc(lines, func(a, b BlockCount) int {
		return cmp.Or(cmp.Compare(b.Pending, a.Pending), cmp.Compare(a.Limiter, b.Limiter), cmp.Compare(a.Rule, b.Rule))
	})
	shown := lines
	if len(lines) > s.maxLines {
		shown = lines[:s.maxLines-1]
	}
	for _, c := range shown {
		s.logger.LogAttrs(ctx, slog.LevelInfo, SummaryMessage,
			slog.String("limiter", c.Limiter), slog.String("rule", c.Rule), slog.Int64("block_count", c.Pending))
	}
	if rest := lines[len(shown):]; len(rest) > 0 {
		var n int64
		for _, c := range rest {
			n += c.Pending
		}
		s.logger.LogAttrs(ctx, slog.LevelInfo, SummaryMessage,
			slog.String("limiter", OtherName), slog.String("rule", OtherName), slog.Int64("block_count", n),
			slog.Int("pairs", len(rest)))
	}
}

// Run calls Flush every Interval until ctx is done, then once more so that
// blocks counted at shutdown are not lost. The first summary comes after a
// random delay between Interval/2 and Interval, so that replicas started
// together do not all log in the same second.
func (s *BlockSummary) Run(ctx context.Context) {
	timer := time.NewTimer(s.interval/2 + rand.N(s.interval/2+1))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush(context.WithoutCancel(ctx))
			return
		case <-timer.C:
			s.Flush(ctx)
			timer.Reset(s.interval)
		}
	}
}

// Blocks implements BlockSource: every pair that has blocked since the process
// started (a limiter's rules beyond MaxRuleSeries or MaxPerRequestRuleSeries
// as one OverflowRule pair),
// most recent block first.
func (s *BlockSummary) Blocks() []BlockCount {
	s.mu.Lock()
	out := make([]BlockCount, 0, len(s.pairs))
	for _, c := range s.pairs {
		out = append(out, *c)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b BlockCount) int {
		return cmp.Or(b.Last.Compare(a.Last), cmp.Compare(a.Limiter, b.Limiter), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}
