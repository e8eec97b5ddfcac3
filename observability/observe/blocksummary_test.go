package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimit "github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/observability/observe"
)

func TestBlockSummaryFlush(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			rec := &logRecorder{}
			now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(rec), Now: func() time.Time { return now }})
			store, prefix := kind.store(t)
			ctx := context.Background()
			got := scenario(ctx, newLimiter(t, "api", store, prefix, bs))
			if !slices.Equal(got, scenarioVerdicts) {
				t.Fatalf("verdicts = %v, want %v", got, scenarioVerdicts)
			}
			if lines := rec.lines(); len(lines) != 0 {
				t.Fatalf("logged before the flush: %q", lines)
			}
			bs.Flush(ctx)
			want := []string{
				"INFO rate_limit_block_summary limiter=api rule=login_ban block_count=2",
				"INFO rate_limit_block_summary limiter=api rule=per_user block_count=1",
			}
			if got := rec.lines(); !slices.Equal(got, want) {
				t.Fatalf("summary\n got %q\nwant %q", got, want)
			}
			bs.Flush(ctx) // an interval without blocks logs nothing
			if got := rec.lines(); len(got) != len(want) {
				t.Fatalf("empty interval logged %q", got[len(want):])
			}
			wantBlocks := []observe.BlockCount{
				{Limiter: "api", Rule: "login_ban", Previous: 0, Total: 2, Last: now},
				{Limiter: "api", Rule: "per_user", Previous: 0, Total: 1, Last: now},
			}
			if got := bs.Blocks(); !slices.Equal(got, wantBlocks) {
				t.Fatalf("Blocks() = %+v, want %+v", got, wantBlocks)
			}
		})
	}
}

// More pairs than MaxLines: the busiest get a line each, the rest fold into one
// "other" line, and the summary never exceeds MaxLines lines.
func TestBlockSummaryFold(t *testing.T) {
	rec := &logRecorder{}
	bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(rec), MaxLines: 3})
	ctx := context.Background()
	block := func(limiter, rule string, n int) {
		for range n {
			bs.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: limiter,
				Result: &ratelimit.Result{Action: ratelimit.ActionBlock, Matched: true, Rule: &ratelimit.Rule{Name: rule}}})
		}
	}
	block("a", "r1", 5)
	block("b", "r2", 7)
	block("a", "r3", 1)
	block("c", "r4", 2)
	block("c", "r5", 2)
	// Neither an allowed check, a peek that would block nor a clear counts.
	bs.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventCheck, Limiter: "a", Result: &ratelimit.Result{Action: ratelimit.ActionAllow}})
	bs.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventPeek, Limiter: "a",
		Result: &ratelimit.Result{Action: ratelimit.ActionBlock, Rule: &ratelimit.Rule{Name: "r1"}}})
	bs.Observe(ctx, ratelimit.Event{Kind: ratelimit.EventClear, Limiter: "a"})
	bs.Flush(ctx)
	want := []string{
		"INFO rate_limit_block_summary limiter=b rule=r2 block_count=7",
		"INFO rate_limit_block_summary limiter=a rule=r1 block_count=5",
		"INFO rate_limit_block_summary limiter=other rule=other block_count=5 pairs=3",
	}
	if got := rec.lines(); !slices.Equal(got, want) {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
	for _, b := range bs.Blocks() {
		if b.Pending != 0 || b.Previous != b.Total {
			t.Fatalf("after one flush: %+v", b)
		}
	}
}

// Run flushes on its interval.
func TestBlockSummaryRunPeriodic(t *testing.T) {
	rec := &logRecorder{}
	bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(rec), Interval: time.Millisecond})
	l := newLimiter(t, "api", ratelimit.NewMemoryStore(), "", bs)
	ctx, stop := startRun(bs)
	defer stop()

	login := ratelimit.Identifier{"ip": "10.0.0.3", "kind": "login"}
	l.Check(ctx, login)
	// A periodic flush reports the blocks within a few intervals; a loaded
	// machine may deschedule Run for seconds, so the wait is bounded by a
	// deadline, not by a number of checks.
	var lines []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(time.Millisecond) {
		l.Check(ctx, login)
		if lines = rec.lines(); len(lines) > 0 || time.Now().After(deadline) {
			break
		}
	}
	const prefix = "INFO rate_limit_block_summary limiter=api rule=login_ban block_count="
	var n int
	if len(lines) == 0 || !strings.HasPrefix(lines[0], prefix) {
		t.Fatalf("periodic summary: %q", lines)
	}
	if _, err := fmt.Sscanf(lines[0][len(prefix):], "%d", &n); err != nil || n < 1 {
		t.Fatalf("block_count in %q: %d %v", lines[0], n, err)
	}
}

// When its context ends, Run flushes once more so that blocks counted since
// the last summary are not lost.
func TestBlockSummaryRunFinalFlush(t *testing.T) {
	rec := &logRecorder{}
	bs := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: slog.New(rec), Interval: time.Hour})
	l := newLimiter(t, "api", ratelimit.NewMemoryStore(), "", bs)
	_, stop := startRun(bs)
	login := ratelimit.Identifier{"ip": "10.0.0.3", "kind": "login"}
	for range 4 {
		l.Check(context.Background(), login)
	}
	stop()
	want := []string{"INFO rate_limit_block_summary limiter=api rule=login_ban block_count=3"}
	if got := rec.lines(); !slices.Equal(got, want) {
		t.Fatalf("final flush %q, want %q", got, want)
	}
}

// startRun runs bs.Run in a goroutine; stop cancels it and waits for it to return.
func startRun(bs *observe.BlockSummary) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { bs.Run(ctx); close(done) }()
	return ctx, func() { cancel(); <-done }
}
