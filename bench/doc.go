// Package bench compares ratekit with peer Go rate limiters on the same Redis:
// ulule/limiter v3 (fixed window, one EVALSHA) and go-redis/redis_rate v10
// (GCRA, one EVALSHA). It is a module of its own so that the peers never enter
// ratekit's go.mod.
//
// Each benchmark checks one key out of 1,000 rotating keys with limits high
// enough that nothing is denied, and reports round trips per check (rt/op,
// counted with a go-redis hook) next to ns/op and allocs/op. Run with a Redis:
//
//	RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:6379 go test -run '^$' -bench . -benchmem ./bench
//
// or `make bench`, which starts Redis itself. Compare ratios, not absolute
// times: a loopback round trip dominates, and a shared 2-core VM is noisy.
package bench
