// Package config reads and checks ratekit's two configuration files
// (available_limiters.yaml and rate_limits.yaml) and the rule store's stored
// documents; docs/design.md#configuration-files explains them.
//
// available_limiters.yaml ships with the application. It is the contract of
// which limiters exist, which identifier properties each one may match and
// count by, and its default rules:
//
//	available_limiters:
//	  user_sign_in:
//	    description: "Enforced before a session is created for a specific user"
//	    available_properties: [ip, username]
//	    default_rules:
//	      - name: limit_user_sign_ins_by_username
//	        characteristics: [username]
//	        limit: 5
//	        period_s: 600
//	        action: limit
//	        ban_for_s: 900
//	  rack_request:
//	    description: "Every web, API and Git request"
//	    available_properties: [ip, path, request_type]
//	    allowed_skip_rules: [skip_health_checks] # guardrail: only this skip rule
//	    default_rules:
//	      - name: limit_rack_requests_by_ip
//	        characteristics: [ip]
//	        limit: 1000
//	        period_s: 60
//	        action: limit
//
// rate_limits.yaml is deployed by operators and is optional. Its rules come
// before the defaults, but for the skip rules that open the defaults (the
// application's exemptions, such as skip_health_checks: see Rules); a rule
// that reuses a default's name replaces it. A limiter written as a mapping also sets its mode for a rollout
// (`user_sign_in: {mode: shadow, rules: [...]}`: count, never block; see
// ratelimit.Enforcement):
//
//	rate_limits:
//	  user_sign_in:
//	    - name: limit_user_sign_ins_by_username   # replaces the default
//	      characteristics: [username]
//	      limit: 10
//	      period_s: 600
//	      action: limit
//	    - name: user_sign_in_distinct_users_per_ip
//	      description: "distinct users attempting to sign in from a single IP"
//	      limit: 10
//	      period_s: 3600
//	      characteristics: [ip]
//	      count_distinct: username
//	      action: limit
//	  rack_request:
//	    - name: skip_health_checks
//	      action: skip
//	      match:
//	        path: {one_of: [/-/health, /-/readiness]}
//	    - name: api_by_ip
//	      action: log                       # shadow mode: counts, never blocks
//	      limit: 300
//	      period_s: 60
//	      characteristics: [ip]
//	      match:
//	        request_type: api               # equality
//	        path: {regex: "^/api/v\\d+/"}   # RE2, unanchored
//
// Every rule states its action, lower-case: limit, log or skip. A rule
// without one is an error rather than a silent limit, so that a shadow rule
// that forgot `action: log` never enforces. Times are whole seconds. A match value is a scalar (equality),
// {regex: ...} or {one_of: [...]}.
//
// # Validation
//
// Each file goes YAML → message → protovalidate → hand-written checks. A
// file that still holds git's merge conflict markers (<<<<<<<, =======,
// >>>>>>> at the start of a line) is refused first, naming the line. The
// YAML is walked against the schema of package
// github.com/ratekit/ratekit/proto/ratelimit/config/v1, filling the message
// as it goes (unknown fields, duplicate keys, wrong types and two kinds given
// for one match value are errors, with their position); protovalidate
// enforces the schema's rules (name
// patterns, limit, period_s and ban_for_s at least 1, the CEL rules
// limit_requires_threshold, ban_excludes_count_distinct,
// ban_requires_threshold, count_distinct_requires_threshold,
// count_missing_requires_characteristics,
// algorithm_requires_threshold, count_distinct_fixed_window,
// burst_requires_token_bucket); then the
// cross-document checks run: limiters must
// be declared in available_limiters.yaml, properties must be in their
// limiter's available_properties, rule names unique within a limiter, regexes
// valid RE2 within 1024 bytes and 10000 instructions (the bounds of ratelimit.Regex), and
// skip rules within a limiter's allowed_skip_rules when it has that list
// (`allowed_skip_rules: []` allows none, no key any, and the key without a
// value, its items commented out, is an error rather than either; so is a
// rule's match key without a value: `match: {}` matches every request),
// and the bounds of the rules model (docs/limits.md: at most
// ratelimit.MaxRulesPerTier rules per list, ratelimit.MaxCharacteristics
// characteristics, ratelimit.MaxMatchEntries match entries and
// ratelimit.MaxOneOfValues one_of values per rule, property names of
// ratelimit.MaxPropertyLen bytes, an equality or one_of value of
// ratelimit.MaxMatchValueLen bytes; at most MaxAvailableProperties
// available_properties and MaxAllowedSkipRules allowed_skip_rules per
// limiter). A document over
// MaxFileSize (ratelimit.MaxDocumentBytes, 1 MiB) is refused before it is
// read or parsed. One whose YAML aliases expand it past 200,000 nodes (each
// mapping key a node), or past one node per byte of a larger document, or
// past 2 MiB of text (the bytes of its strings and keys), is refused as too
// large; no document without aliases has more nodes than bytes, or more
// than 1.5 bytes of text per byte. A map key longer than a name (64 bytes)
// is refused and its value left unread. A limiter whose default rules and
// rules of rate_limits.yaml would make a rule store document (the JSON a
// service seeds) over MaxFileSize is refused at its line.
//
// Every problem of a file is reported, up to MaxReportedErrors (100) of
// them, as a *ValidationError whose lines read
//
//	rate_limits.yaml:12:14: rack_request/api_by_ip: limit must be a whole number, got the value "ten"
//
// The first problems in file order are kept; a last line counts the others
// (ValidationError.Omitted). A problem quotes at most 80 characters of a
// name, key or value of the document (a longer one is cut, "..." after it)
// and lists at most 16 names.
//
// A document with any problem is rejected whole.
//
// # At run time
//
// LoadAvailableLimiters (the file must exist) and LoadRateLimits (a missing
// file means no rules) give the documents; Tiers and Rules give a limiter's
// rules as []ratelimit.Rule. When a new rate_limits.yaml is invalid, log the
// error and keep what the limiter has: (*ratelimit.Limiter).SetRules is only
// called with a list that passed every check, and it too rejects a bad list
// whole.
//
// Reload with LoadRateLimitsStable: it applies a file only when two reads,
// a settle delay apart, agree, because a file caught while a deploy writes it
// in place is often a valid file with fewer rules. The convention for
// deploys is to replace the file atomically (write a temporary file in the
// same directory and rename it over the old one, or the symlink swap of a
// Kubernetes ConfigMap volume); the double read covers deploys that do not.
//
// # Stored documents
//
// MarshalLimiterRules and UnmarshalLimiterRules read and write the rule
// store's per-limiter JSON, byte-compatible with the example of
// docs/design.md#the-rule-store;
// RuleToProto and RuleFromProto convert between core rules and the schema.
// ValidatePublishRulesRequest checks a publish payload before it is applied.
//
// # Why four walks of the schema
//
// A stored document is read on every rule-store refresh of every process, so
// reading has three shortcuts beside the general walk (they serve the config
// files too); each states the schema again for the messages of a rule, and a
// test holds it to the general path. Figures: BenchmarkUnmarshalLimiterRules
// (rich/rules=256) without the shortcut.
//
//   - decode.go: the general walk. It fills any message of the schema from
//     YAML nodes through protoreflect and reports shape errors with their
//     path, then runs protovalidate and the cross-document checks.
//   - typed.go: for Rule, MatchValue and StringSet the walk stores values
//     through the generated structs instead of protoreflect (1.6x as slow
//     and 4x the allocations without). TestTypedWalkSameResult.
//   - fastvalid.go: validRule states the schema's protovalidate rules in Go
//     for one Rule, so that protovalidate evaluates only the rules it
//     refuses (2.1x as slow, 3.6x the allocations without).
//     TestValidRuleAgreesWithProtovalidate, TestValidRuleSchemaPinned.
//   - json.go: a scanner that builds the nodes of a document json.Valid
//     accepted, from slabs, instead of encoding/json's tokenizer (3.1x as
//     slow, 18x the allocations without), and the writer of the stored
//     spelling. FuzzParseJSONPaths.
package config
