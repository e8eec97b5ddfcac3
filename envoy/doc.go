// Package ratekitenvoy serves Envoy's global rate-limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from ratekit
// limiters, so that a gateway (Envoy, Istio, Envoy Gateway, Contour) and the
// Go services behind it enforce one rule set on one set of counters: a rule
// published once into the rule store is enforced at the edge and in the
// service alike. The command ratekit-envoy (cmd/ratekit-envoy) runs it with
// the configuration files, Redis, the rule store, metrics, health and
// reflection.
//
// It lives in a module of its own because it imports the Envoy API
// (github.com/envoyproxy/go-control-plane/envoy); the root module never does.
//
// # Mapping
//
// A request is read whole before anything is counted:
//
//   - domain selects the limiter: the limiter of that name, or the one
//     Options.Domains maps it to. An unknown domain is answered NOT_FOUND
//     naming it (Envoy counts an error and, unless failure_mode_deny is set,
//     lets the request through), or OK by Options.UnknownDomain.
//   - Each descriptor is one Check of that limiter, its entries the
//     identifier: the entry [generic_key=api, user=alice] is the identifier
//     {"generic_key": "api", "user": "alice"}. Keys are identifier properties
//     (^[a-z0-9_]{1,64}$) and, with Options.Available, must be among the
//     limiter's available_properties, as every rule's are. A key given twice
//     in one descriptor is an error. A value is any bytes: one that is not
//     UTF-8 (a header a client sent in Latin-1, which Envoy passes on as it
//     is) is counted like any other when the server decodes with
//     Service.Codec, as cmd/ratekit-envoy does; gRPC's proto codec would
//     refuse the whole request, and Envoy would let it through uncounted.
//     A value over Options.MaxValueLen (1024 bytes by default: a long path
//     or header a client sent) is not an error either: it is checked as
//     MaxValueLen bytes standing for it, its first MaxValueLen - 33 bytes
//     and a digest of the whole, so two long values keep their own
//     counters, and a rule that matches how a value starts (a regex
//     anchored with ^, within those bytes) matches it, but not one that
//     matches its end or the whole of it; a Go service that checks the
//     whole value counts it apart. ratekit explain and clear, given the
//     whole value, find the counters of the bytes standing for it when
//     MaxValueLen is the default, as cmd/ratekit-envoy's is (they cannot
//     know another); so does the admin page.
//   - hits_addend is the check's cost: the descriptor's when set (0 reads
//     without counting), else the request's, else 1. A cost over
//     Options.MaxHits (2^20 by default) can never pass: that descriptor is
//     OVER_LIMIT without a check (nothing is counted, no current_limit;
//     a shadow mode of the limiter, which no rule reached, does not soften
//     it), as one whose cost is over its rule's limit, and the others are
//     checked as usual. It is not an error, which Envoy would let through
//     uncounted.
//   - A descriptor's limit override becomes a per-request limit rule above
//     every tier of the limiter (ratelimit.WithRules; only the skip rules
//     opening the limiter's list, its exemptions, come before it), named
//     OverrideRulePrefix plus its window in seconds ("envoy_override_60s"),
//     counting by all the descriptor's keys. It is never shadow, as in
//     envoyproxy/ratelimit: its block stands even where the limiter's
//     result is softened to allow by a shadow mode of the limiter. Its window is unit × unit_multiplier (a month is
//     30 days, a year 365); 0 requests per unit denies every request. The
//     limiter's own rules still apply below it. No tier holds the rule, so
//     ratekit explain lists its counter apart (its count and reset; its
//     limit came with the request and is kept nowhere) and ratekit clear
//     removes it, each finding it by a bounded SCAN of the limiter's
//     override keys; the admin page does not see it.
//   - Every descriptor is checked, even after one is over the limit
//     (envoyproxy/ratelimit does the same), so each status is true. They
//     are checked together with ratelimit.CheckBatch: each as if it were
//     sent alone, and all in one store call (one round trip) on a store
//     that implements ratelimit.BatchStore. Options.Concurrent checks them
//     concurrently instead, one call each, for a store without it.
//
// Rules select their descriptors with match: a rule whose characteristic a
// descriptor lacks is left out of that check and the check is degraded
// (logged at WARN), never folded into one shared counter. Give each rule of a
// gateway limiter a match on a key its descriptors carry, such as
// {generic_key: per_ip} (Envoy's generic_key action names a descriptor's
// purpose), or {remote_address: {regex: ".*"}} for "present".
//
// # Answer
//
//   - overall_code is OVER_LIMIT when any descriptor's check blocks.
//   - Each status has code OK or OVER_LIMIT and, from the most constraining
//     evaluation of an enforcing (limit) rule: current_limit (the rule's name,
//     its limit per the longest unit that divides its window, with
//     unit_multiplier for the rest), limit_remaining and duration_until_reset.
//     A descriptor that only shadow rules (or none) counted has no
//     current_limit.
//   - response_headers_to_add carries the rate-limit headers of the most
//     constraining enforcing rule across all descriptors in the profile of
//     Options.Headers (IETF RateLimit-Policy and RateLimit by default, the
//     HTTP adapters' profiles, from middleware/headers), and on OVER_LIMIT
//     Retry-After (none when a descriptor's hits_addend alone is over its
//     rule or over MaxHits, which it can never pass) and Cache-Control: no-store. Envoy adds them to the 429 it
//     sends, and to the upstream's response when the request is allowed.
//   - Shadow (log) rules count and show in the limiter's metrics
//     (ratelimit_rule_evaluations_total{result="log"}, observability/observe) and never
//     block nor change the answer.
//
// # Failure
//
// The service fails open per ratekit's rules: a descriptor whose check fails
// (Redis down or slow, the breaker open) is OK and counted in
// ratekit_envoy_fail_open_descriptors_total. Since nothing was counted, its
// status carries no limit at all: no current_limit, limit_remaining nor
// duration_until_reset on the wire, and no rate-limit headers, so a gateway
// never reads an outage as "exhausted" (limit_remaining is a proto3 scalar:
// a dump that prints defaults shows it as 0; a status reports a limit only
// when current_limit is set). On a Redis Cluster a descriptor fails on its
// own: a master that does not answer fails open the descriptors whose
// counters it holds, and the request's other descriptors are enforced
// (ratelimit.CheckBatch). Each check is bounded
// by the limiter's Timeout (-timeout, 100ms by default) and, once the breaker
// opens, does not touch Redis. So Envoy's failure_mode_deny matters only when
// ratekit-envoy itself cannot be reached, provided the filter's timeout (20ms
// by default) is longer than -timeout; a shorter one ends the call first
// while Redis is slow, and failure_mode_deny decides. Envoy's deadline
// bounds the checks too: a call whose deadline passes, or that its caller
// cancels, before its checks end is answered DEADLINE_EXCEEDED (or
// CANCELED), as Envoy already read it, counted in
// ratekit_envoy_requests_total{code="canceled"} and not as failed open. A
// malformed request (no descriptors, a bad or undeclared key,
// a bound exceeded but MaxHits and MaxValueLen, a refund via is_negative_hits, an invalid override) is
// answered INVALID_ARGUMENT naming the descriptor and entry, and nothing of
// it is counted; Service.Codec refuses one over MaxDescriptors or MaxEntries
// before decoding it, with the same message, which gRPC answers INTERNAL (a
// codec's error) and Envoy reads as it reads INVALID_ARGUMENT. A panic below
// the service is recovered and answered INTERNAL. Every size a caller controls is bounded (Options.MaxDescriptors,
// MaxEntries, MaxValueLen, MaxHits; domains of at most 256 bytes).
//
// # Worked Envoy configuration
//
// The example directory holds an Envoy bootstrap (example/envoy.yaml) and the
// ratekit files it is wired to. Its core: the route sends descriptors,
//
//	rate_limits:
//	  - actions:                      # [generic_key=per_ip, remote_address=<client>]
//	      - generic_key: {descriptor_value: per_ip}
//	      - remote_address: {}
//	  - actions:                      # [generic_key=api, user=<x-user-id>, method=<:method>]
//	      - generic_key: {descriptor_value: api}
//	      - request_headers: {header_name: x-user-id, descriptor_key: user}
//	      - request_headers: {header_name: ":method", descriptor_key: method}
//
// the HTTP filter envoy.filters.http.ratelimit asks for domain "edge" on the
// cluster ratekit_envoy (gRPC, so HTTP/2),
//
//	http_filters:
//	  - name: envoy.filters.http.ratelimit
//	    typed_config:
//	      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
//	      domain: edge
//	      failure_mode_deny: false
//	      timeout: 0.2s                 # above ratekit-envoy's -timeout (see Failure)
//	      rate_limit_service:
//	        transport_api_version: V3
//	        grpc_service: {envoy_grpc: {cluster_name: ratekit_envoy}}
//
// and available_limiters.yaml declares the limiter "edge" with properties
// generic_key, remote_address, user, method and path, and rules such as
//
//	default_rules:
//	  - name: per_user_api
//	    match: {generic_key: api}
//	    characteristics: [user]
//	    limit: 120
//	    period_s: 60
//	    action: limit
//
// Envoy's remote_address action sends the whole client address, so every IPv6
// address is a client of its own, where the ratekit adapters key an IPv6
// client by its /64 (identifiers.SetIP). To do the same at the gateway, send
// Envoy's masked_remote_address action with v6_prefix_mask_len: 64 (descriptor
// key masked_remote_address, value "2001:db8::/64") and declare that key.
// Envoy's mask does not know the addresses identifiers.SetIP reads as IPv4
// clients (NAT64's 64:ff9b::/96, Teredo): it gives their /64, which every
// client of one translator or Teredo server shares. A rule matching method
// GET applies to HEAD as well (ratelimit.PropertyMethod).
//
// Run the server beside Envoy:
//
//	ratekit-envoy -available available_limiters.yaml -rate-limits rate_limits.yaml \
//	    -redis-url redis://redis:6379 -listen :8081 -http :9090
//
// A Go service behind the gateway that builds the limiter "edge" from the
// same available_limiters.yaml on the same Redis and checks
// Identifier{"generic_key": "api", "user": id} shares the gateway's counter:
// the counter key is the limiter, the rule and the characteristic values.
package ratekitenvoy
