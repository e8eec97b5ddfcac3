// Package redisstore is the Redis counter store of ratekit: a ratelimit.Store
// that a fleet of processes shares, with the exact semantics of
// ratelimit.NewMemoryStore.
//
//	store, err := redisstore.Dial(ctx, "redis://localhost:6379")
//	if err != nil {
//		return err // a malformed URL: its error never shows the URL
//	}
//	defer store.Close()
//	limiter, err := ratelimit.New(ratelimit.Config{
//		Name:  "http_request",
//		Store: store,
//		Rules: rules,
//	})
//	if err != nil {
//		return err
//	}
//
// # Dial or New
//
// Dial is the default store, for a standalone Redis, a Redis Cluster or a
// master that Sentinel monitors, through one github.com/redis/rueidis client:
//
//	redisstore.Dial(ctx, "redis://:password@host:6379/0")                       // one server
//	redisstore.Dial(ctx, "redis://node1:6379?addr=node2:6379&addr=node3:6379")  // a Cluster
//	redisstore.Dial(ctx, "redis://sentinel1:26379?master_set=mymaster")         // Sentinel
//	redisstore.Dial(ctx, "redis-sentinel://sentinel1:26379,sentinel2:26379/mymaster")
//
// (ParseURL lists the forms and options; rediss:// is TLS, unix:// a Unix
// socket.) Open takes the rueidis options themselves (TLS, ACL credentials,
// dialer, pipelining) and RequireConnection. rueidis pipelines automatically:
// the checks that concurrent callers send go out together on a few
// connections per server, and their replies are read in order as they come;
// a lone caller's check goes out at once (see "Pipelining" below). On a
// Cluster, the commands of one round trip go to all the nodes involved at
// once (DoMulti), and MOVED and ASK redirections and failovers are followed
// by rueidis. A check waits for its reply no longer than its context (the
// Limiter's Config.Timeout).
//
// A service starts while Redis is down: Dial waits within its context for a
// first connection attempt and, when it fails, returns the Store anyway and
// keeps connecting in the background. Until it connects, checks fail at once
// with ErrNotConnected (wrapping the last attempt's error): the Limiter fails
// open and its breaker opens. Open with RequireConnection fails at start-up
// instead. Once connected, rueidis re-dials broken connections itself, while
// the checks that need them fail. Close the store to stop its goroutines.
//
// rueidis dials one connection to a server at a time, and a call to that
// server waits for the attempt in progress whatever its own context (up to
// the dial timeout, 5s by default, which also bounds the handshake: a
// stopped server's kernel still accepts the connection, and nothing answers
// HELLO); its own refreshes (a Cluster's topology, a Sentinel's master) dial
// with no deadline. So once connected, the store gives an attempt up (its
// dial canceled, its connection closed) when the server has answered nothing
// by the deadline of a call that may wait for it: one made while it runs
// (a check queued in the store's combiner makes none: it returns by its own
// deadline), or one already on its way, whose time is taken as the shortest
// check timeout of the last second or two. The calls that wait for an
// attempt given up fail together, those with a later deadline too. Checks therefore return by their
// deadline while a hung server is re-dialed
// (TestDialCheckWhileReconnectingToHungServer; before, they waited for the
// dial timeout). A caller whose deadline is shorter than a server's
// handshake makes the attempts of that second fail; they are tried again.
//
// A standalone server that has become a replica (a failover that moved the
// name the store dialed, such as a managed Redis' primary endpoint) answers
// writes READONLY, and rueidis keeps the connection. On a READONLY reply the
// store dials the URL again in the background, at most once a second while
// calls come, and takes the new client when ROLE says its server is a master.
// Until then every call fails at once with ErrReplica, peeks too: the
// Limiter's breaker probe only reads, which a replica answers, so it would
// close the breaker for the next checks to open it again
// (TestDialRecoversFromMasterTurnedReplica). A Cluster's and a Sentinel's
// failovers are followed by rueidis; a Sentinel's master that answers
// READONLY is dialed again the same way: rueidis learns of a failover from
// the one sentinel it watches, and while that sentinel hangs it kept writing
// to the old master, back as a replica (TestSentinelFailoverWatchedSentinelHung).
//
// New takes a go-redis v9 client instead, for a service that shares its
// existing client's pool, hooks (tracing, metrics) and options: a Cluster
// (*redis.ClusterClient), a Ring, Sentinel (redis.NewFailoverClient). It
// accepts *redis.Client, *redis.ClusterClient and *redis.Ring, detected by
// type, and go-redis' *redis.AutoPipeliner, which batches concurrent callers'
// checks into one pipeline. Any other client (an autopipeliner, a wrapper) is
// counted as one server until Redis answers a check CROSSSLOT (a cluster
// refuses a command whose keys span slots before running any of it): that
// check and every later one are then grouped by slot. WithClusterMode sets
// the mode instead. A wrapper of a *redis.Ring is never answered CROSSSLOT
// (a Ring's servers are standalone ones): counted as one server, a check's
// script would write every key on its first key's server, so give New the
// Ring itself. Build a go-redis client with ContextTimeoutEnabled, so
// that the Limiter needs no guard goroutine per check. Both stores send the
// same script call (but for Dial's plain form, below), and share the
// counters. GoRedisOptions gives the go-redis options of a Dial URL, for a
// program that needs both clients. A go-redis FailoverClient (v9.23) asks
// the sentinel it last used for the master at every dial and gives up when
// that sentinel hangs: a failover during such a hang is not followed until
// the sentinel answers again, where Dial's store asks the other sentinels.
//
// # One round trip per check
//
// A check is one call of an embedded Lua script (EVALSHA, falling back to
// EVAL when the server has not cached the script yet) that applies all of the
// check's rules in order, whatever their number: it reads the ban, charges the
// counter (INCRBY, or for fractional costs a sum in Lua) or the distinct set
// (SADD), starts the window on the first write (PEXPIRE), sets the ban, and
// stops after the first exceeded limit rule. Scripts run atomically, so
// concurrent checks from any number of processes never admit more than the
// limit: with a limit of 50, exactly 50 of any number of concurrent checks are
// allowed. Peek runs the same script in read-only mode (PTTL, GET, SCARD,
// SISMEMBER, HGET and HMGET of a sliding window, and TYPE of a value that
// a read refused: reads only).
//
// A Store from Dial sends the usual check, whose rules are counters charged a
// whole cost without a ban and of which only the last may block, as plain
// commands instead: INCRBY, PEXPIRE NX and PTTL per rule, in the same one
// write. Nothing the script does is needed there (no ban to read, no rule to
// stop at), INCRBY is atomic on its own, so the outcomes are the script's, and
// Redis spends well under half the time on them that it spends on EVALSHA.
// The Store remembers when the windows it read end (16,384 counters, the
// last charged), and a check of a counter whose window it remembers sends
// INCRBY alone: a third of the Redis work of the three commands. A counter
// whose key went away meanwhile (deleted elsewhere, evicted) is made anew by
// that INCRBY, which then answers no more than the cost, and the Store sets
// its window in a second round trip. So the TTL of such a check's outcome
// is the remembered one, up to a round trip earlier than Redis's, and a key
// that lost its TTL (PERSIST) gets one again at the first check once the
// remembered window has ended rather than at the next.
// A check that takes the script (several limit rules, a ban) sends a
// counter whose window the Store remembers in the script's known-window form:
// INCRBY alone (after the ban's PTTL for a rule with a ban), its count the
// only value in the reply, the TTL the Store's and the verdict derived as the
// script derives it. Five limit rules cost Redis 60k instructions per EVALSHA
// so, against 105k in the full form, and a rule with a ban 22k against 33k.
// The few ops this form cannot finish go on in one more round trip each: a
// key made anew gets its window as in the plain form, and an op the script
// hands back (banned, or a value INCRBY refuses) is evaluated again with
// the ops after it in the full form, the script having charged nothing from
// it on. A rule whose key another op of the check shares goes in the full
// form (a script reads such a key's TTL at once; settle would read it after
// the other op).
// A counter INCRBY refuses (it holds a fraction, a value of another type or
// one that is no number) costs a second round trip, through the script; a
// server before Redis 7.0, which has no PEXPIRE NX, gets the script for every
// check once one has found that out.
//
// # Redis time, not client time
//
// Windows and bans are key TTLs in milliseconds (PEXPIRE, SET PX), set on the
// first write of a window and never extended, and an outcome's TTL is the key's
// PTTL. The windows therefore run on the Redis server's own clock and the
// client's clock never enters the counting: processes whose clocks disagree
// still share one window, and Retry-After (reset = the limiter's now + the
// remaining TTL) carries no client/server skew, only the network latency of
// the check. The script needs no TIME call: a fixed window anchored at the
// first hit is exactly a key with a TTL.
//
// The other algorithms (docs/design.md#algorithms) keep their time in the TTL
// too, never as a timestamp. A sliding window is a hash of this window's and
// the previous window's counts whose TTL runs to one period after this
// window's end (a TTL over the period: this window is on; within it: this
// window ended and is now the previous one; none: both are gone). A token
// bucket (GCRA) is a string whose TTL runs to when the bucket is full again,
// rounded up to a millisecond, the rounding kept in its value. Their formulas
// are in milliseconds (those of the memory store, in core/memory_algo.go), so
// the conformance scenarios hold both stores to the same figures. Dial's
// plain form is for fixed windows only: a sliding window or a bucket charges
// an op only when it passes, which only the script can decide.
//
// Whole costs count with INCRBY, exactly. A fractional cost (or one added to
// a counter that holds a fraction) is summed by the script in a double and
// written with the 17 digits that read back as it, so the count is the
// memory store's float64 to the last binary digit (0.1+0.2 is
// 0.30000000000000004 in both). INCRBYFLOAT, which sums in a long double,
// kept what a float64 drops: past 2^52 every half, and the stores' verdicts
// parted. Both stores take a count as over its limit only by more than
// 1e-9, or above a limit of 17,592 by more than 2^-44 of it (at most 0.25),
// so that fractional costs that add up to a limit stay within it.
//
// # What a check costs Redis
//
// Starting a script and converting its reply cost Redis about as much as a
// few plain commands, and each command inside costs more than it would
// outside. So the script has short forms for the usual ops of a check (a
// whole positive cost): a fixed-window counter (INCRBY, PTTL, and PEXPIRE on
// its first write), a sliding window (PTTL, HINCRBY, HGET) and a token
// bucket (PTTL, GET, SET; without a ban one SET NX GET when it is full),
// each with or without a ban (PTTL of the ban key first), with the fewest
// arguments and no Lua function defined per call;
// the general code runs only for the rest (peeks, fractional costs, distinct
// counts, an active ban on the other algorithms, values of another type).
// A check of one op gets its values packed in one integer, which Redis
// converts far more cheaply than a table. Measured with callgrind
// (bench/script-instructions.sh), one check costs Redis 7.0 about 27k
// instructions per EVALSHA for one rule, 33k with a ban, 105k for five
// rules, 36k for a sliding window and 30k for a full token bucket; with the
// windows known (Dial), 22k for a rule with a ban and 60k for five rules
// (docs/design.md#what-a-check-costs-redis has the breakdown).
//
// # Redis Cluster and Ring
//
// A script may only touch keys of one hash slot. Counter keys carry a
// {hash tag} (internal/keys), so a rule's counter and its ban share a
// slot, but different rules of one check usually live in different slots,
// often on different nodes. On a cluster the store groups ops by slot
// (CRC16 of the hash tag modulo 16384; by hash tag on a Ring, which does not
// use slots) and runs one script per group, the groups of one round trip in
// one pipeline (one DoMulti on a Store from Dial), the nodes working in
// parallel.
//
// Evaluation is sequential, as on one node: no op is ever charged after a
// limit rule that blocks. The ops of a check are cut into stages. A stage
// never holds an op that follows a limit (terminal) op of another slot; each
// stage is one round trip, and a block found in a stage ends the check
// before any later stage is sent. Within a slot the script itself stops at a
// block. So:
//
//   - a check costs one round trip when no limit rule is followed by a rule
//     of another slot: one rule, several rules sharing a slot, or shadow (log)
//     rules in front of the limit rules; otherwise one round trip per stage,
//     at most one per limit rule, and the check ends at the first stage that
//     blocks (a blocked caller's later rules cost nothing);
//   - no other caller ever sees a charge past a block, so no caller is
//     blocked or banned because a blocked neighbour was counted on a later
//     rule (the conformance case BlockedCallerChargesNoLaterRule runs this on
//     a 3-master cluster);
//   - the one residual difference from a single node: a check's stages are
//     not one atomic step, so other callers' charges may land between them,
//     as between two checks; every op is still atomic, and the counts and
//     verdicts are those of the checks applied op by op in that order;
//   - a peek writes nothing, so it reads every slot in one round trip and
//     drops what follows a block;
//   - on a Store from Dial a stage that needs nothing of the script (its
//     counters charged a whole cost, without a ban, only the last a limit
//     rule: each stage of limit rules in different slots) goes in the plain
//     form, INCRBY alone once the Store knows the window.
//
// To keep every check at one round trip on a cluster, order the rules so that
// shadow rules come first, or give rules that are always checked together a
// common characteristic set; the Limiter's blocked-key cache (see package
// ratelimit) answers callers already blocked or banned without Redis at all.
//
// A Store on a Cluster tells the Limiter which master holds a key
// (Store.Partition), and the Limiter keeps a circuit breaker per master, at
// most 256 (docs/limits.md): a master that hangs or dies fails open only the
// checks with a key on it, while those on the other masters are still
// counted and blocked (docs/design.md#fail-open). A Store from Dial maps a
// key's slot to its master by the slot table of "Pipelining". A Store from
// New on a *redis.ClusterClient reads a table of its own, as go-redis does
// not share its: CLUSTER SLOTS (or the client's ClusterOptions.ClusterSlots)
// in the background when a check asks for a key's master and the table is
// due, which is at the first check, 10s after the last read and after a
// failed call (a failover moves slots), a read at most each second. No check
// waits for a read: until the first ends, keys are the Limiter's one
// breaker's. A read asks the master that answered the last one first and
// at most three masters, each for a second (the client's ReadTimeout
// without ContextTimeoutEnabled), so a hung master delays it only. New on
// any other client (a single server, Sentinel, a Ring, an autopipeliner or
// a wrapper) has one breaker per Limiter.
//
// # Batches
//
// The Store implements ratelimit.BatchStore: ratelimit.CheckBatch (an RLS
// request's descriptors, an HTTP request's limiters) sends it the ops of
// several checks in one EvalBatch call. Each check is applied as Eval
// applies it, check after check, and a check's block ends that check only.
// On a Store from Dial, one server (standalone or Sentinel) gets the whole
// batch in one round trip: one DoMulti with each check's plain-form
// commands, or its script call. The plain form serves a batch whose checks
// all take it in Eval; otherwise every check of the batch is a script call
// (an INCRBY that a value written by another check's script refuses would
// be evaluated again only after the later checks). On a Cluster a round
// trip carries the next stage of every check still running, so a batch
// costs as many round trips as its longest check has stages, and nothing is
// charged past a block. A stage that writes a key which an earlier check of
// the batch still has to write in a later stage waits for it, so that every
// key sees the writes in batch order; commands on one key go to one server
// on one connection, in order. After NOSCRIPT the calls concerned are sent
// again as EVAL; a script cached by another client between two calls of one
// round trip could then let a later check's call run before an earlier one
// on that node, as if the two checks were concurrent.
//
// A failure is a check's own, as a block is: on a Cluster, a master that
// does not answer by the deadline fails the checks with a key on it (their
// later stages are not sent), and the others are evaluated; EvalBatch then
// returns them with a *ratelimit.BatchError that names the failed checks,
// which CheckBatch fails open while it enforces the rest
// (TestCheckBatchHungMasterFailsOpenItsChecksOnly).
//
// Through go-redis (New), a single server's batch is one pipeline of script
// calls; a Cluster, a Ring or a client New cannot classify gets one Eval per
// check, each failing on its own (once the deadline passed, the rest fail
// unsent).
//
// A stored value of the other counting kind (a set where a counter belongs,
// from an older version of this store or written by hand), or a string that
// is no number where a count belongs ("hello", "nan", a bucket's or a
// sliding window's field alike), is replaced by a fresh counter when a check
// writes, and reads as absent in a peek: a wrong type or value is never an
// error ("WRONGTYPE", "value is not a valid float") that disables the
// limiter. A sliding window's previous count that is no number costs one
// more round trip, once: the script's short form fails on it (telling it
// apart would cost every check), and the call is sent again in the general
// form, which replaces the hash. The Limiter's
// keys encode the kind (a distinct-count rule's set ends in ":set"), so a
// rule overridden by one of the other kind starts afresh on its own key.
//
// A distinct-count set stops growing once it is over its limit: a member is
// added only while the set has at most limit members, so a set holds at most
// limit+1 bounded members (long values are hashed by the Limiter).
//
// A check in which some groups fail and others succeed returns the error (the
// Limiter then fails open); the groups that succeeded keep their charges.
//
// Scripts are cached per node and lost on restart, failover or SCRIPT FLUSH.
// Calls that get NOSCRIPT are sent again as EVAL, in one more round trip,
// which also caches the script on those nodes again: single calls and the
// scripts of a pipeline (go-redis does not fall back inside pipelines,
// go-redis#3228) or of a DoMulti alike.
//
// # Pipelining
//
// rueidis writes each call as soon as its connection's writer gets to it, so
// concurrent checks share a write only when they queue up meanwhile: with 64
// callers on two cores about 0.85 writes per check, and half of the client's
// CPU in write syscalls. So the plain form's calls go through a combiner: a
// check sends its commands at once while fewer than 8 calls are in flight;
// the checks that arrive meanwhile wait and go out together in one DoMulti
// when one of those returns, each with its own replies, and one whose
// context ends while it waits returns at once with nothing sent
// (TestPlainChecksCombined). A lone caller never waits. A batch whose checks
// all take the plain form (an Envoy request's descriptors) is combined the
// same way (TestPlainBatchesCombined): 5-descriptor requests through
// ratekit-envoy's service with 64 callers, in process, 3 alternating runs:
// 23.1k-23.5k requests/s against 19.9k-20.9k uncombined. Script calls are not
// combined: a sliding window's check through the combiner measured slower
// at 64 callers in each of three comparisons (about 5% in the last), as the
// script's own CPU in Redis, not the writes, bounds it.
// BenchmarkLimiterCheck/dial/rules=1 against no combiner, medians of 4
// alternating runs on a 2-core machine: 1.0x with 4 to 16 callers, 1.24x with
// 32, 1.58x with 64 (bench's redis_1limit ratekit_1rule_conn: about 0.05-0.1
// writes per check with 64 callers). On a Cluster a combined call waits for
// every node it touches, so each master has its own combiner and a check is
// combined only with checks for the same master (a check whose keys span
// masters is sent alone): a hung master holds up its own checks only
// (TestClusterChecksCombinedPerNode). The slot-to-master table comes from
// CLUSTER SLOTS at connection and every 10s after; a stale one only mixes
// two masters' checks for a while, as rueidis routes every command itself.
// bench's redis_cluster_1limit ratekit_1rule_conn with 64 callers, 3
// alternating runs: 1.17x-1.22x over no combining, 0.46 writes per check
// per master instead of 0.85. The limit of calls in flight counts the calls
// to every master together (a master with none in flight still sends at
// once, so that a hung master slows the others by a round trip at most):
// with a limit per master, 3 masters let 24 calls fly; together, 0.21 writes
// per check and 1.22x-1.27x the checks/s of a limit per master with 64
// callers, the same with 4 to 8 callers, 1.02x-1.10x with 16.
//
// rueidis' own MaxFlushDelay option (Options.Client) makes its writer pause,
// up to that long, before each write while more than one call waits. The
// store leaves it off: 20µs cut the writes per check with 64 callers to 0.27,
// but cost 4 callers 16% (a pause on a process with nothing else to run lasts
// about a millisecond, not the microseconds asked for); 50µs cost 8 callers
// 20%. One connection per server (PipelineMultiplex -1) gained nothing;
// DisableAutoPipelining cost 64 callers 24%.
//
// # Allocations
//
// A check through a Limiter on a Store from Dial allocates at most 6 times
// (TestDialCheckAllocations, with one caller and with 64): the key and the
// outcomes, rueidis' results of the usual check's DoMulti (3) or the array of
// a script's reply (none when the script packs a lone op's values in one
// integer: a sliding window's or token bucket's check allocates twice), and
// the evaluations' share of a block. The rest is
// reused: rueidis' commands, the store's command slices, the numbers of the
// usual check (strings in a fixed table) and the Limiter's per-check timeout
// context. Through go-redis (TestClientCheckAllocations: 10 with one rule) a
// check also pays for the command, each key as an interface and the reply,
// which go-redis decodes into interfaces (a slice, and each number of 256 or
// more: 2 per rule, 19 allocations with five rules), and for its pool's
// health check of each connection it takes, a non-blocking peek through the
// connection's SyscallConn that costs 3 allocations.
//
// The health check notices, before use, a connection that the server closed
// while it sat in the pool (an idle timeout, a restart). Connections that hide
// their SyscallConn skip it (TLS connections always do), so a client whose
// Dialer wraps its connections does without it:
//
//	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
//		d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
//		c, err := d.DialContext(ctx, network, addr)
//		if err != nil {
//			return nil, err
//		}
//		return struct{ net.Conn }{c}, nil // no SyscallConn: no health check
//	}
//
// A dead connection is then found when it is used: the command fails before
// any reply is read, and go-redis retries it on another connection, up to
// MaxRetries times (3 by default). After a server restart a check fails (and
// the Limiter fails open) when it meets more dead connections than that, until
// the pool has used them all up; a ConnMaxIdleTime below the server's timeout
// keeps idle connections from dying in the pool. Take it where the
// allocations matter more.
//
// # What the store does not do
//
// Timeouts and circuit breaking belong to the Limiter, which runs every store
// call under its per-check timeout; the store passes the context to go-redis
// or rueidis and adds no deadline of its own (the write_timeout of a Dial URL
// only decides when rueidis gives a connection up), but for the checks'
// deadlines that bound a Dial store's connection attempts (above).
package redisstore
