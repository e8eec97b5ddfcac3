// Package rulestore is ratekit's Redis rule store (docs/design.md#the-rule-store):
// one LimiterRules document per limiter holding its three rule tiers, written
// through a publish API, read by every process into an in-memory replica that
// feeds its limiters.
//
//	store, err := rulestore.New(client, rulestore.Options{Available: available})
//	if err != nil {
//		return err
//	}
//	// At start-up: the limiters follow their documents; the service seeds its
//	// own tiers, collects the documents of removed limiters, and refreshes.
//	store.Bind(limiter, tiers.Set{File: fileRules, Defaults: defaults}) // or config.Tiers
//	store.SeedBound(ctx) // bounded; Redis down, the seed is owed (ErrSeedOwed): written at the first refresh that reaches it
//	store.GC(ctx, available)
//	store.Start(ctx) // refreshes every Options.Interval until ctx is done
//
//	// At run time, from anywhere (an admin form, a settings callback, a job):
//	store.Publish(ctx, &configv1.PublishRulesRequest{RateLimits: ...})
//	store.Delete(ctx, "autocomplete_users", "limit_user_autocompletes_by_user")
//
// # Tiers and precedence
//
// A limiter evaluates file_rules (rate_limits.yaml, seeded at start) ++
// published_rules (the publish API) ++ default_rules (the application's,
// seeded at start). A rule whose name appears in a higher tier removes the
// lower tier's rule of that name and, since the name is in the counter key,
// carries on its counter: publishing a lower limit does not reset a window
// already counted. The skip rules that open default_rules (the application's
// exemptions, such as skip_health_checks) come first, ahead of every tier,
// unless a higher tier replaces one by name (package tiers). Each writer owns
// one tier: Seed replaces the file and
// default tiers and never touches the published one; Publish upserts rules
// by name into the published tier and never removes one (removal is the
// explicit Delete); limiters outside a publish batch are untouched.
//
// A SeedBound that fails leaves the seed owed: until one succeeds, the bound
// limiters run on the tiers given to Bind over their documents' published
// tier (what the documents will hold), never on the file and default tiers
// an older version of the service seeded. When Redis failed it (down, hung,
// refusing writes), each Refresh seeds again before reading (the seed and
// the read share one Options.Timeout), and logs once
// (rate_limit_rule_store_seeded) when the seed lands, so a service started
// while Redis was down needs no restart and no retry loop of its own. A seed
// refused for what it would write (ErrInvalidDocument, ErrOverBounds, an
// invalid rule) is not tried again, as it would be refused again; a refresh
// that meets such a refusal logs it (rate_limit_rule_store_seed_refused). A
// stored document this version cannot read (a newer version's, in a rolling
// deploy) holds back only its own limiter's seed: the others are written.
// Once a SeedBound succeeded, a refresh that finds gone a document it had
// applied (Redis restarted empty, a failover to an empty replica, an
// invalid document an operator removed) seeds again, logged as
// rate_limit_rule_store_seeded; a store that never seeded writes nothing
// and logs, once, that its limiters run on their local tiers
// (rate_limit_rule_store_documents_gone).
//
// A tier may also set the limiter's mode ({"mode":"shadow","rules":[...]}):
// shadow counts but never blocks (ratelimit.Shadow), for a rollout beside a
// legacy check. The highest tier that sets one wins, as for rules (file, then
// published, then the limiter's own Config.Enforcement), so publishing
// {mode: enforce, rules: []} flips every bound process at its next refresh.
// A published mode survives the deletion of the published rules: DeleteMode
// removes it, and the limiter's mode then comes from the tiers below.
//
// # The stored document
//
// The document is the JSON of the design's example, byte for byte:
//
//	{"default_rules":{"rules":[{"name":"limit_user_autocompletes_by_user","limit":300,"period_s":60,"action":"limit","characteristics":["user"],"match":{}}]},"published_rules":{"rules":[...]}}
//
// Rules are encoded by config.MarshalLimiterRules and read by
// config.UnmarshalLimiterRules, the one schema of the config files. A
// document another SDK wrote in this shape is read as is, and a write edits
// it in place: rules a write does not replace keep their bytes. Keys never
// expire: a rule store is configuration, not a cache.
//
// # Keys, Redis Cluster, and the one-slot trade-off
//
// A limiter's document is Options.Prefix + limiter name. Beside the
// documents live the index of limiters with a document (Prefix+"@index", a
// set of at most MaxLimiters), the GC's orphan marks (Prefix+"@orphans", a hash) and a revision
// counter (Prefix+"@rev") bumped by every write that changes something, and
// the cursor of GC's scan (Prefix+"@scan"); '@' never occurs in a limiter
// name, so they cannot collide with a document.
// These keys are the store's own bookkeeping, never rules, so one written
// by hand or by a foreign tool never stops a write: an index of another
// Redis type is replaced by the next write or GC, orphan marks of another
// type by the next GC (each with a WARN rate_limit_rule_store_key_replaced;
// List refuses such an index, naming GC), and a revision counter that holds
// no integer starts again from 0. Each seed indexes its service's limiters
// again, and GC the orphans it had marked whose documents remain, and the
// documents of the other limiters, which no service seeds any more, that
// its bounded scan of the prefix finds (see Garbage collection).
// Readers receive none of them unbounded: an orphan mark longer than a
// time in ms reads as none, a revision counter longer than an int64 is
// refused by its length, and a scan cursor that is no cursor starts a pass
// again.
//
// A publish batch, its index update and the revision must change together,
// and Redis only runs a script atomically over keys of one cluster slot. The
// default prefix, "ratekit:rules:{rules}:", therefore puts every key of the
// store under one hash tag: one slot, one node (and its replicas). That node
// serves all rule-store traffic, which is small by design: a document per
// limiter, read once per refresh interval per process (one read script for
// all of a process's limiters), written at human pace. In exchange every write,
// however many limiters it spans, is one atomic script, and no write leaves
// the index disagreeing with the documents it wrote. Counters, the heavy
// traffic, live elsewhere and spread over the cluster (package redisstore). On a
// standalone Redis the prefix "labkit:ratelimit:rules:" gives the design's
// own layout; New refuses a prefix without a hash tag on a cluster client.
//
// # Writes
//
// Every write (Seed, Publish, Delete, Remove) is one Lua script that reads,
// edits and writes the documents of its batch on the server, so concurrent
// writers in any number of processes never conflict and never lose one
// another's rules. The script never encodes a rule: the client sends each rule as the
// bytes config.MarshalLimiterRules gives, and the script splices whole rules
// into the document and reassembles its canonical envelope. Before that the
// client validates the request (protovalidate, and with Options.Available the
// cross-document checks: limiter declared, properties available, skip rules
// allowed, the bounds of docs/limits.md) and reads the batch's documents to
// refuse editing one that a process could not load; the script itself
// refuses a result over a bound (more than ratelimit.MaxRulesPerTier rules
// in a tier, more than ratelimit.MaxDocumentBytes bytes: ErrOverBounds), so
// batches that are each valid cannot add up to a document no reader
// accepts. Any problem fails the whole batch before anything is written.
// A document that no process would load (ErrInvalidDocument: written past
// the store, by hand or by another SDK) never wedges the store: Delete still
// shrinks it, and Remove deletes it whatever the key holds. A document that would come out identical is not rewritten:
// repeating a write writes nothing, and WriteResult.Changed and the revision
// say so.
//
// An editor that shows rules, lets a person change them and saves uses the
// compare-and-set writes: VersionedDocument (or List) gives each document's
// Version (the SHA-1 of its bytes), and PublishIf, DeleteIf and RemoveIf
// write only if the document still has it, checked inside the same script;
// otherwise they write nothing and return ErrConflict, so a save never
// silently overwrites a change its author did not see, and a remove of an
// invalid document never takes the valid one that replaced it. The admin page (pages/admin) is such an editor.
//
// # The replica
//
// Bind hands a limiter to the store. Refresh (every Options.Interval in Run,
// never per check) reads the bound limiters' documents in one script call and, for
// each document that changed, merges its tiers and gives the list to
// (*ratelimit.Limiter).SetRules, which swaps it atomically: a check never
// waits for a refresh. What a limiter runs on:
//
//   - its document's tiers, once one is loaded (a tier the document lacks is
//     taken from the tiers given to Bind);
//   - the last good copy when Redis fails: a brief outage never turns into a
//     silent fleet-wide change of limits;
//   - the last good copy when a document is invalid or its merged list is
//     rejected, when it is over ratelimit.MaxDocumentBytes, or when the key
//     holds another Redis type: the problem is logged (once per bad
//     document) and reported to Options.Metrics. Redis never sends a
//     document over the byte bound (the read script answers with its size),
//     and a rejected document is remembered, not parsed again, while it
//     stays as it is;
//   - the tiers given to Bind (the rules compiled into the application) when
//     no document was ever loaded (Redis down at start) or the document is
//     gone (a flushed store, until the reconciler repopulates it);
//   - the tiers given to Bind over the document's published tier while a
//     seed is owed (see Tiers and precedence).
//
// Tiers and RefreshStatus report each limiter's tiers (a tiers.Set) and
// replica age: the debug page (pages/debug) takes the Store as its tier
// source. (The admin page reads the documents themselves, through its
// Options.Store.) The store itself depends on no
// telemetry package: Options.Metrics is an interface that *observe.Metrics
// implements.
//
// # Garbage collection
//
// GC compares the index with available_limiters.yaml. It never runs without
// that list; an orphan is marked with the Redis server's time (one clock for
// the fleet) and deleted only by a run a grace period later (Options.GCGrace,
// 7 days by default: longer than a deploy plus a rollback); a limiter that
// is declared again loses its mark. Services sharing a Redis must share
// their list, or use different prefixes, neither starting with the other:
// each would orphan the others' limiters.
//
// A document the index does not name (written by another SDK or by hand,
// or left by an index that was replaced) is found by GC's scan of the
// prefix, indexed, and then collected as any other: List shows it from
// then on. The scan is bounded (docs/limits.md): each run examines at most
// Options.GCScanKeys keys (65,536 by default: 64 SCANs of COUNT 1024, each
// its own script call) of the Redis server that holds the store's keys, and
// the next run goes on where it stopped, so a large keyspace takes several
// runs (GCReport.ScanCursor says whether this one ended a pass). It never
// indexes a document that may be another rule store's, when a store's
// @index or @rev key shows that its prefix starts with this one's or this
// one's with its (GCReport.Left). Every key of the prefix followed by a
// limiter name is taken as a document, whatever it holds: give the store a
// prefix no other tool writes under.
//
// CheckGC runs the same collection, its scan and script included, and
// writes nothing (not even the scan's cursor): its report is what GC would
// do (ratekit rules gc --dry-run prints it).
//
// # Publishing application settings
//
// A Publisher replaces per-check functions (Rule.LimitFunc) with published values:
// Register says once which setting is which rule's limit, PublishAll
// resolves them all and publishes them in one batch (idempotent), and Run
// reconciles on an interval, which also backfills at rollout and
// repopulates a flushed store.
package rulestore
