// Package rulesserver is the reference rules service of ratekit: it answers
// ratekit.rules.v1.RulesService/GetRules from override documents held in
// Redis, and manages them through a JSON-over-HTTP API that a Terraform REST
// provider or a CI job can drive. cmd/ratekit-rules serves both, with gRPC
// health and reflection, Prometheus metrics and graceful shutdown.
//
// An override document holds the rules of one (service, limiter) pair, so a
// rule for one service's rack_request never reaches another service's:
//
//	{"service": "web", "limiter": "rack_request",
//	 "overrides": [
//	   {"selector": {"root_namespace": "345"}, "rules": {"rules": [...]}},
//	   {"selector": {"plan": "premium"},       "rules": {"rules": [...]}}],
//	 "default_rules": {"rules": []}}
//
// GetRules answers the rules of the most specific override whose selector
// the request's identifier matches (most selector properties first, document
// order among equals), else the default rules. Its vary list is every
// selector property (a document's selectors use at most
// MaxSelectorProperties, 16, the protocol's bound on vary), so clients cache
// one answer per combination of their values; its revision changes on every write, and a client holding the
// current revision gets not_modified.
//
// Documents are validated on every write and every read alike: protovalidate,
// the rule checks of rate_limits.yaml and, for services configured with their
// available_limiters.yaml, the cross-document checks (a selector's
// properties too must be the limiter's); a rule list that sets
// a mode is refused (per-request rules have none: config.ErrPerRequestMode),
// and so is a field this version does not know (a PUT's JSON refuses one; a
// stored document of a later version may hold one). An invalid stored
// document answers Unavailable, so clients keep their cached answer or their
// local tiers; it is logged at ERROR once, and not read or parsed again while
// its revision stays (a PUT or DELETE replaces it). A valid one is kept
// decoded, so an unchanged document costs GetRules one round trip to Redis
// and no decoding: at most 10,000 documents and an estimated 256 MiB of heap
// (16 documents of 1 MiB), past which the kept ones are dropped and read
// again.
//
// The management API (Server.Handler):
//
//	PUT    /v1/overrides/{service}/{limiter}   store the document whole; idempotent
//	GET    /v1/overrides/{service}/{limiter}   read it; ETag is its revision
//	DELETE /v1/overrides/{service}/{limiter}   delete it; 404 when there is none
//	POST   /v1/rules                           GetRules over HTTP: the rules a request would get
//
// PUT and DELETE honour If-Match (a PUT body's revision works too): another
// revision than the stored one answers 409, and so does a PUT's If-Match: *
// where nothing is stored (it holds for any stored document). A DELETE where
// nothing is stored answers 404 whatever its If-Match, as it would without
// one (RFC 9110 §13.2.1). An invalid document answers 400 naming its
// problems and their rules (the first config.MaxReportedErrors, then a count
// of the others).
//
// Security: PUT and DELETE pass Config.Authorize (who may write, named in
// the audit log) before their body is read; without a hook only clients
// connecting from loopback to loopback may write (not one forwarded from
// 127.0.0.6 to the host's IP by a mesh sidecar). Each write logs one record
// "rate_limit_rules_write" (who, op, service, limiter, the Redis key,
// outcome; for a document written its revision and how many overrides and
// rules it holds; INFO, or WARN with the error when it failed),
// each refusal one WARN record "rate_limit_rules_refused". On a loopback
// listener every request must name a loopback Host (localhost, 127.0.0.1,
// [::1]) unless Config.AllowedHosts names others, against DNS rebinding.
// A stored document's size is checked in Redis (HSTRLEN) before it is read:
// one over MaxDocumentBytes is refused without crossing the wire. ParseOverrideFile and Apply are the
// `ratekit-rules apply` command: a YAML file of documents, checked whole with
// file, line and rule, then PUT one by one.
package rulesserver
