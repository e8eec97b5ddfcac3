// Package debug serves an operator's view of rate limiting, for the
// incident question "what is limited, and why?": every registered limiter with
// its circuit breaker state, its effective rules in evaluation order and the
// tier each comes from (file, published, default), the rules a higher tier
// overrides, the age of the rule store replica, and the recent blocks per rule.
// During a shadow → enforce rollout (package rollout) it also shows each
// limiter's mode and, with Options.Rollout, how often its decisions disagreed
// with the legacy check since the process started. With Options.Remote it
// shows the per-request rules service client's state (cached answers,
// hits, misses, calls, failures and whether its breaker is open).
//
//	blocks := observe.NewBlockSummary(observe.BlockSummaryOptions{})
//	page := debug.New(debug.Options{Blocks: blocks, Tiers: ruleStore}, limiter)
//	internalMux.Handle("/debug/ratelimit", page)
//
// The page is HTML (no scripts; a Content-Security-Policy allows nothing but
// its own stylesheet) and JSON with ?format=json or Accept: application/json.
// It shows configuration and counts, never identifier values, but it does
// reveal limits: mount it on an internal listener or behind authentication.
// Against DNS rebinding (a hostile name resolved to 127.0.0.1 makes the
// attacker's page same-origin with the loopback page), a page served on a
// loopback listener answers only to localhost, 127.0.0.1 and [::1] unless
// Options.AllowedHosts names others; any other Host gets 403. CheckHost puts
// what the listener serves beside the page (/metrics, which names every
// limiter and rule too) behind the same check:
//
//	internalMux.Handle("GET /metrics", debug.CheckHost(promhttp.Handler(), nil))
package debug
