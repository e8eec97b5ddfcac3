#!/usr/bin/env bash
# run.sh runs, on a many-core machine, the measurements that a two-core box
# cannot make (../shared/design/reference/many-core-bench.md): every
# contender of BenchmarkCheck on a pinned Redis and a pinned 3-master Cluster,
# the memory store's mutex and block profiles at GOMAXPROCS = all CPUs, the
# script's Redis CPU per call (scriptcpu, through redisstore.New and Dial)
# and the RateLimitService table
# (rlsbench) against envoyproxy/ratelimit, with its Redis defaults and again
# with the pipeline window its README suggests. It needs no Go toolchain and no
# network: bench/device/kit.sh builds bench/device/kit.tgz, which it unpacks.
# Results go to $OUT (a directory); bench.txt becomes README.md's tables here
# with cmd/benchtable (its flags as bench/run.sh passes them), and the
# profiles read with `go tool pprof -top`.
#
# Pinning: Redis on CPU 0 (the cluster's masters on 1-3) and the benchmark's
# clients on the rest with GOMAXPROCS 8; for rlsbench, Redis on 0, the server
# under test on 1-6 and the load generator on the rest. It takes about six
# minutes, seven with the peer's second configuration; DEVICE_ROUNDS (2) and
# DEVICE_RLS_DURATION (3s) change that.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:?run.sh writes its results to \$OUT}
mkdir -p "$out"
t=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-device.XXXXXX")
tar -xzf "$repo/bench/device/kit.tgz" -C "$t"
k=$t/kit
export PATH=$k/bin:$PATH
n=$(nproc)
last=$((n - 1))
# cpus LIST: LIST where the machine has the 8 CPUs the pinning needs, else
# every CPU (a dry run of the script: its figures mean nothing).
cpus() { if ((n >= 8)); then echo "$1"; else echo "0-$last"; fi; }
if ((n < 8)); then echo "run.sh: only $n CPUs: nothing is pinned, the figures mean nothing" >&2; fi
rlspin=(-redis-cpus "$(cpus 0)" -server-cpus "$(cpus 1-6)")
if ! command -v taskset >/dev/null; then
	echo "run.sh: no taskset: nothing is pinned" >&2
	taskset() { shift 2; "$@"; }
	rlspin=()
fi
rounds=${DEVICE_ROUNDS:-2}
{
	echo "kit: $(cat "$k/VERSION")"
	echo "cpus: $n × $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
	echo "redis: $(redis-server --version)"
	echo "kernel: $(uname -r)"
} | tee "$out/info.txt"

pids=()
cleanup() {
	for p in "${pids[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
	rm -rf "$t"
}
trap cleanup EXIT
start_redis() { # port cpu [flags...]
	local port=$1 cpu=$2
	shift 2
	mkdir -p "$t/$port"
	taskset -c "$(cpus "$cpu")" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize yes --dir "$t/$port" --logfile "$t/$port/log" "$@"
	pids+=("$port")
	for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
	cat "$t/$port/log" >&2
	return 1
}
step() { echo "== $(date -u +%T) $*" | tee -a "$out/steps.txt"; }

step "redis and cluster"
start_redis 21500 0
nodes=()
for i in 1 2 3; do
	start_redis $((21500 + i)) "$i" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000
	nodes+=("127.0.0.1:$((21500 + i))")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$out/cluster-create.txt" 2>&1
for nd in "${nodes[@]}"; do
	for _ in $(seq 100); do
		redis-cli -p "${nd#*:}" cluster info | grep -q cluster_state:ok && break
		sleep 0.1
	done
done
export RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:21500
RATEKIT_TEST_REDIS_CLUSTER=$(IFS=,; echo "${nodes[*]}")
export RATEKIT_TEST_REDIS_CLUSTER

cd "$repo/bench"
clients=(taskset -c "$(cpus "4-$last")" env GOMAXPROCS=8)
step "contenders agree"
"${clients[@]}" bench.test -test.run 'TestContendersAgree|TestBannedClientIsBlocked|TestClusterKeysSpread' 2>&1 | tee "$out/proof.txt"
for r in $(seq "$rounds"); do
	step "BenchmarkCheck round $r of $rounds"
	"${clients[@]}" bench.test -test.run '^$' -test.bench '^BenchmarkCheck$' -test.benchmem -test.benchtime 1s 2>&1 | tee -a "$out/bench.txt"
done

step "memory store at GOMAXPROCS $n: mutex and block profiles"
GOMAXPROCS=$n bench.test -test.run '^$' -test.bench '^BenchmarkCheck$/memory' -test.benchmem -test.benchtime 2s \
	-test.mutexprofile "$out/mutex.pprof" -test.blockprofile "$out/block.pprof" 2>&1 | tee "$out/memory.txt"

step "script Redis CPU per call"
taskset -c "$(cpus "4-$last")" scriptcpu -redis "$RATEKIT_TEST_REDIS_URL" -n 20000 -rounds 3 2>&1 | tee "$out/scriptcpu.txt"
redis-cli -p 21500 info commandstats >"$out/commandstats-after-scriptcpu.txt"
# The same through a Store from Dial, which sends the counters whose windows
# it remembers as INCRBY alone inside the script.
taskset -c "$(cpus "4-$last")" scriptcpu -redis "$RATEKIT_TEST_REDIS_URL" -n 20000 -rounds 3 -store dial -shapes rule 2>&1 | tee "$out/scriptcpu-dial.txt"

for p in "${pids[@]}"; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
pids=()

step "RateLimitService: ratekit-envoy vs envoyproxy/ratelimit"
taskset -c "$(cpus "7-$last")" rlsbench -peer-bin "$k/bin/envoy-ratelimit" -ratekit-bin "$k/bin/ratekit-envoy" \
	-redis-server "$k/bin/redis-server" "${rlspin[@]}" \
	-duration "${DEVICE_RLS_DURATION:-3s}" -rounds 2 -out "$out/rls.md" \
	-note "$n CPUs, Redis pinned to CPU 0, each server to 1-6, the load generator to 7-$last ($(cat "$k/VERSION"))" 2>&1 | tee "$out/rls.txt"
# envoyproxy/ratelimit's README suggests a pipeline window of 150 to 500 µs
# for throughput: the peer again with 150 µs, where it could gain.
step "RateLimitService: the peer with REDIS_PIPELINE_WINDOW=150us"
taskset -c "$(cpus "7-$last")" rlsbench -peer-bin "$k/bin/envoy-ratelimit" -ratekit-bin "$k/bin/ratekit-envoy" \
	-redis-server "$k/bin/redis-server" "${rlspin[@]}" -peer-pipeline-window 150us -callers 64,256 \
	-duration "${DEVICE_RLS_DURATION:-3s}" -rounds 2 -out "$out/rls-window.md" \
	-note "$n CPUs, Redis pinned to CPU 0, each server to 1-6, the load generator to 7-$last ($(cat "$k/VERSION"))" 2>&1 | tee "$out/rls-window.txt"
step "done"
