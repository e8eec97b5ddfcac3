// Package observe makes rate limiting visible: Prometheus metrics,
// OpenTelemetry span attributes and a periodic slog block summary, each
// an Observer whose Observe method a limiter calls (Config.Observer) after
// every Check, Peek and Clear. Combine them with Multi:
//
//	metrics := observe.NewMetrics(observe.MetricsOptions{})
//	prometheus.MustRegister(metrics)
//	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{Logger: logger})
//	go blocks.Run(ctx)
//	limiter, err := ratelimit.New(ratelimit.Config{
//		Name:     "http_request",
//		Store:    store,
//		Rules:    rules,
//		Observer: observe.Multi(metrics, observe.NewTracing(), blocks),
//	})
//	if err != nil {
//		return err
//	}
//
// The debug page (package github.com/ratekit/ratekit/pages/debug) serves the
// limiters, their rules per tier and the recent blocks as JSON and HTML.
//
// # Metrics
//
// Metrics exports labkit's families under a configurable namespace (default
// "ratelimit"); with LabkitNamespace the names are labkit's own
// (gitlab_labkit_rate_limiter_checks_total, ...), so existing dashboards and the
// checks_total{error="true"} SLO alerts keep working. Labels hold limiter and
// rule names only, never identifier values, and at most MaxRuleSeries names
// of a limiter's own rules and MaxPerRequestRuleSeries of its per-request
// rules per limiter (rules beyond them count as OverflowRule).
// The rule store reports its health through RuleStoreRefresh and ConfigRejected (*Metrics implements
// rulestore.Metrics), exports each bound document's rejection counter at
// 0 through ConfigWatched (rulestore.ConfigWatcher), and clears its
// config_rejected gauge through ConfigAccepted (rulestore.ConfigAcceptor)
// once a refresh loads it. Init exports a limiter's series at 0 before its first check and,
// from then on, the state of its circuit breaker (breaker_state). The
// repository's observability/ directory holds Prometheus recording and alerting
// rules and a Grafana dashboard for these metrics.
//
// # Rollout
//
// RolloutMetrics is the rollout.Recorder of a shadow → enforce migration:
// ratelimit_rollout_decisions_total{rate_limiter, rule, agreement} counts how
// often the legacy check and the new limiter agreed, and
// ratelimit_rollout_divergence_ratio gives the share that did not since the
// process started. `ratekit rollout gate` judges the 24-hour ratio.
//
// # Logs
//
// Nothing is logged on the success path. The limiter itself logs WARN
// rate_limit_error on fail-open, rate_limit_breaker_open when its circuit
// breaker opens (INFO rate_limit_breaker_closed when it closes),
// rate_limit_missing_characteristic and rate_limit_missing_count_distinct
// for a degraded check, and rate_limit_per_request_rules_left_out;
// BlockSummary adds INFO rate_limit_block_summary lines (block counts per
// limiter and rule, at most MaxLines per interval) instead of a line per block.
//
// # Tracing
//
// Tracing sets ratelimit.* attributes on the caller's span. A block is not a
// span error; a check that failed open is (error.type and status Error).
//
// Observers must not block and never change a verdict: the limiter recovers
// their panics, and these observers do not panic on any input.
package observe
