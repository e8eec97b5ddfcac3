.PHONY: test quickstart bench

# Every test of every module, with real Redis and Redis Cluster (see scripts/test.sh).
test:
	./scripts/test.sh

quickstart:
	go run ./examples/quickstart

# Benchmarks of the core package on memory, Redis and Redis Cluster.
bench:
	./scripts/test.sh -run '^$$' -bench . -benchmem
