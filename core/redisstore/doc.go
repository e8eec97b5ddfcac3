// Package redisstore is the Redis counter store of ratekit: a ratelimit.Store
// that a fleet of processes shares, with the exact semantics of
// ratelimit.NewMemoryStore.
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	limiter, err := ratelimit.New(ratelimit.Config{
//		Name:  "http_request",
//		Store: redisstore.New(client),
//		Rules: rules,
//	})
//
// New accepts any go-redis v9 client: *redis.Client (standalone, or
// Sentinel-backed from redis.NewFailoverClient), *redis.ClusterClient and
// *redis.Ring, detected by type, and go-redis' *redis.AutoPipeliner of a
// client or cluster client, which batches concurrent callers' checks into one
// pipeline (worth it with many checks in flight per process; see the
// repository README). For a wrapper whose type hides a cluster client, force
// the cluster path with WithClusterMode(true).
//
// # One round trip per check
//
// A check is one call of an embedded Lua script (EVALSHA, falling back to
// EVAL when the server has not cached the script yet) that applies all of the
// check's rules in order, whatever their number: it reads the ban, charges the
// counter (INCRBYFLOAT) or the distinct set (SADD), starts the window on the
// first write (PEXPIRE), sets the ban, and stops after the first exceeded
// limit rule. Scripts run atomically, so concurrent checks from any number of
// processes never admit more than the limit: with a limit of 50, exactly 50
// of any number of concurrent checks are allowed. Peek runs the same script in
// read-only mode (PTTL, GET, SCARD, SISMEMBER only).
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
// Counts are Redis INCRBYFLOAT values (long double, printed with 17 digits),
// so fractional costs such as 0.1+0.2 may differ from the memory store in
// the last binary digit (Redis reports 0.3).
//
// # Redis Cluster and Ring
//
// A script may only touch keys of one hash slot. Counter keys carry a
// {hash tag} (ratelimit.CounterKey), so a rule's counter and its ban share a
// slot, but different rules of one check usually live in different slots,
// often on different nodes. On a cluster the store groups a check's ops by
// slot (CRC16 of the hash tag modulo 16384; by hash tag on a Ring, which does
// not use slots), runs one script per group, and sends all groups in one
// pipeline: one round trip, the nodes working in parallel. A check whose rules
// share one slot is a single EVALSHA, as on one node.
//
// Each group applies its own ops in order, but groups do not see each other,
// so a group may charge an op that comes after a limit rule that blocked in
// another group, where sequential evaluation would have stopped. The script
// reports per op what it wrote (the cost added and whether it created the
// counter, whether it added the member, whether it set a ban). After the
// pipeline the store finds the first (lowest index) exceeded limit rule, marks
// every later op not evaluated, and, only if some of them wrote something,
// makes a second round trip with a compensation script that undoes exactly
// those writes: INCRBYFLOAT -cost (and DEL when it created the counter and the
// value is back to zero), SREM of the member it added (Redis drops an empty
// set), DEL of the ban it set. Hence on a cluster:
//
//   - verdicts and outcomes are those of sequential evaluation;
//   - the final state is exact: counters, sets and bans after the check are
//     those of sequential evaluation, except that a counter the compensated
//     op created and another check then charged keeps the window the
//     compensated op started, and that a window ending in the instant
//     between the two round trips may lose the undone cost from its
//     successor instead;
//   - between the two round trips (a fraction of a millisecond) other checks
//     can observe the uncompensated values, as if a request that is about to
//     be blocked had been counted a moment longer;
//   - the second round trip happens only on that blocking path, never for an
//     allowed check.
//
// A check in which some groups fail and others succeed returns the error (the
// Limiter then fails open); the groups that succeeded keep their charges.
//
// Scripts are cached per node and lost on restart, failover or SCRIPT FLUSH.
// Single calls fall back from EVALSHA to EVAL through redis.Script.Run;
// go-redis does not do so inside pipelines (go-redis#3228), so the store
// re-sends the groups that got NOSCRIPT with EVAL, in one more round trip,
// which also caches the script on those nodes again.
//
// # What the store does not do
//
// Timeouts and circuit breaking belong to the Limiter, which runs every store
// call under its per-check timeout; the store passes the context to go-redis
// and adds no deadline of its own.
package redisstore
