// Package bench compares ratekit with peer Go rate limiters on the same Redis
// (a standalone server and a 3-master Redis Cluster) and in memory:
// ulule/limiter v3 (fixed window, one EVALSHA per limit, and its memory store)
// and go-redis/redis_rate v10 (GCRA, one EVALSHA per limit).
// It is a module of its own so that the peers never enter ratekit's go.mod.
//
// BenchmarkCheck/<group>/<contender>/<c1|c64> checks one of 1,000 rotating
// identifiers per operation, with limits high enough that nothing is denied
// (a denied check fails the benchmark, as an allowed one does on the banned
// row), with one caller and with 64 (b.SetParallelism), and reports checks/s,
// round trips per check (rt/check: counted with a go-redis hook, per node on
// the cluster, and for redisstore.Dial's rows as the writes that carry a
// check), the Redis main thread's CPU time per check (redis-us/check, from
// INFO cpu, summed over the cluster's masters: what bounds a Redis serving
// many clients), B/op and allocs/op. A group holds contenders doing the same work:
// one limit on Redis (ratekit on go-redis, with go-redis' AutoPipeliner, on
// redisstore.Dial's rueidis client, and a client already banned), five limits
// on Redis (ratekit's five rules in one check against each peer's five
// calls), the same two on the cluster (ratekit on go-redis' ClusterClient and
// on Dial, the peers on the ClusterClient), and one limit in memory. The
// cluster groups run when RATEKIT_TEST_REDIS_CLUSTER names the cluster's
// nodes, the others when RATEKIT_TEST_REDIS_URL names the server; a group
// whose variable is unset is skipped. Each benchmark deletes its keys when
// it ends, so that every row starts on the same Redis.
//
// `make bench` (bench/run.sh) starts a fresh redis-server and a fresh local
// 3-master Redis Cluster, proves with TestContendersAgree that every
// contender really limits (and with TestClusterKeysSpread that the cluster
// rows use every master), runs the benchmarks and regenerates README.md with
// cmd/benchtable: the table, each row's ratio against the best peer of its
// group, each Dial row's ratio against the same check on go-redis, the date
// and the machine. By hand:
//
//	RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:6379 \
//	RATEKIT_TEST_REDIS_CLUSTER=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 \
//		go test -run '^$' -bench Check -benchmem ./bench
//
// Compare ratios within one run, not absolute figures across runs: a shared
// 2-core VM is noisy.
//
// `make bench-rls` (cmd/rlsbench) compares ratekit-envoy with
// envoyproxy/ratelimit, each a server of its own on one fresh Redis, driven
// by go-control-plane's RLS client; it writes rls.md, which run.sh keeps at
// the end of README.md.
//
// A two-core machine hides what decides speed on real servers (Redis CPU
// per check, lock contention): device/run.sh makes the same measurements on
// a many-core machine with no Go toolchain and no network, pinning Redis,
// the servers and the clients to cores of their own, from the static
// binaries and the Redis that device/kit.sh packs into device/kit.tgz.
package bench
