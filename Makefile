.PHONY: test quickstart bench bench-core

# Every test of every module, with real Redis and Redis Cluster (see scripts/test.sh).
test:
	./scripts/test.sh

quickstart:
	go run ./examples/quickstart

# ratekit against peer libraries on a fresh Redis; regenerates bench/README.md.
bench:
	./bench/run.sh

# Benchmarks of every module's packages on memory, Redis and Redis Cluster.
bench-core:
	./scripts/test.sh -run '^$$' -bench . -benchmem
