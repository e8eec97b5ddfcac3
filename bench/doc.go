// Package bench compares ratekit with peer Go rate limiters on the same Redis
// and in memory: ulule/limiter v3 (fixed window, one EVALSHA per limit, and
// its memory store) and go-redis/redis_rate v10 (GCRA, one EVALSHA per limit).
// It is a module of its own so that the peers never enter ratekit's go.mod.
//
// BenchmarkCheck/<group>/<contender>/<c1|c64> checks one of 1,000 rotating
// identifiers per operation, with limits high enough that nothing is denied,
// with one caller and with 64 (b.SetParallelism), and reports checks/s,
// round trips per check (rt/check, counted with a go-redis hook), B/op and
// allocs/op. A group holds contenders doing the same work: one limit on Redis
// (ratekit with a plain client, with go-redis' AutoPipeliner, and a client
// already banned), five limits on Redis (ratekit's five rules in one check
// against each peer's five calls), and one limit in memory.
//
// `make bench` (bench/run.sh) starts a fresh redis-server, proves with
// TestContendersAgree that every contender really limits, runs the benchmarks
// and regenerates README.md with cmd/benchtable: the table, each row's ratio
// against the best peer of its group, the date and the machine. By hand:
//
//	RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:6379 go test -run '^$' -bench Check -benchmem ./bench
//
// Compare ratios within one run, not absolute figures across runs: a shared
// 2-core VM is noisy.
//
// `make bench-rls` (cmd/rlsbench) compares ratekit-envoy with
// envoyproxy/ratelimit, each a server of its own on one fresh Redis, driven
// by go-control-plane's RLS client; it writes rls.md, which run.sh keeps at
// the end of README.md.
package bench
