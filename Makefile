.PHONY: test quickstart bench bench-core bench-rls

# Every test of every module, with real Redis and Redis Cluster (see scripts/test.sh).
test:
	./scripts/test.sh

quickstart:
	go run ./examples/quickstart

# ratekit against peer libraries on a fresh Redis and Redis Cluster; regenerates bench/README.md.
bench:
	./bench/run.sh

# ratekit-envoy against envoyproxy/ratelimit on one fresh Redis; writes
# bench/rls.md and its section of bench/README.md (RLS_FLAGS, e.g. -duration 2s).
bench-rls:
	cd bench && go run ./cmd/rlsbench -out rls.md -readme README.md $(RLS_FLAGS)

# Benchmarks of every module's packages on memory, Redis and Redis Cluster.
bench-core:
	./scripts/test.sh -run '^$$' -bench . -benchmem
