#!/usr/bin/env bash
# Runs the bench module's BenchmarkCheck on a fresh redis-server and a fresh
# local 3-master Redis Cluster, and regenerates bench/README.md from the
# results (see cmd/benchtable).
#
#   bench/run.sh                      # every contender, 3 rounds of -benchtime 1s (BENCH_ROUNDS)
#   BENCH_ROUNDS=5 BENCH_FLAGS='-benchtime 2s' bench/run.sh
#   BENCH_REDIS_PORT=21201 bench/run.sh     # a fixed port instead of a free one
#   BENCH_CLUSTER_PORT=21451 bench/run.sh   # the cluster's nodes on 21451..21453 (and their
#                                           # cluster bus on 31451..31453) instead of free ports
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

dir=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-bench.XXXXXX")
out=$dir/bench.txt
cleanup() {
	local pids=() pid
	for f in "$dir"/*/redis.pid; do
		if [[ -f $f ]]; then pids+=("$(cat "$f")"); fi
	done
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do # a node writes its files as it stops
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	done
	rm -rf "$dir"
}
trap cleanup EXIT

taken=() # ports chosen so far: free_port runs in a subshell, its caller records them
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A free loopback port below 45000, with port+10000 (a cluster node's bus)
# free too.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 25000))
		if [[ " ${taken[*]} " != *" $p "* ]] && ! listening "$p" && ! listening $((p + 10000)); then
			echo "$p"
			return 0
		fi
	done
	echo "run.sh: no free port" >&2
	return 1
}

start_redis() { # port [redis-server flags...]
	local port=$1
	shift
	mkdir -p "$dir/$port"
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize yes --pidfile "$dir/$port/redis.pid" --dir "$dir/$port" --logfile "$dir/$port/redis.log" "$@"
	for _ in $(seq 50); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	redis-cli -p "$port" ping >/dev/null || { cat "$dir/$port/redis.log" >&2; return 1; }
}

port=${BENCH_REDIS_PORT:-}
if [[ -z $port ]]; then
	port=$(free_port)
	taken+=("$port")
fi
start_redis "$port"

nodes=()
for i in 0 1 2; do
	if [[ -n ${BENCH_CLUSTER_PORT:-} ]]; then
		p=$((BENCH_CLUSTER_PORT + i))
	else
		p=$(free_port)
		taken+=("$p")
	fi
	start_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000
	nodes+=("127.0.0.1:$p")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/cluster-create.log" 2>&1 ||
	{ cat "$dir/cluster-create.log" >&2; exit 1; }
for n in "${nodes[@]}"; do # every node must know the whole slot map before a client asks it
	for _ in $(seq 100); do
		redis-cli -p "${n#*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
		sleep 0.1
	done
	redis-cli -p "${n#*:}" cluster info | grep -q 'cluster_state:ok' ||
		{ echo "run.sh: cluster node $n not ready" >&2; exit 1; }
done

flags=${BENCH_FLAGS:--benchtime 1s}
rounds=${BENCH_ROUNDS:-3}
export RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:$port
RATEKIT_TEST_REDIS_CLUSTER=$(IFS=,; echo "${nodes[*]}")
export RATEKIT_TEST_REDIS_CLUSTER
echo "run.sh: redis $RATEKIT_TEST_REDIS_URL, cluster $RATEKIT_TEST_REDIS_CLUSTER"
# The proof that every contender limits, then the measurements.
go test -count=1 -run 'TestContendersAgree|TestBannedClientIsBlocked|TestClusterKeysSpread' .
# Whole rounds rather than -count, so that a disturbance of the shared machine
# hits every contender alike; benchtable keeps each benchmark's median round.
go test -c -o "$dir/bench.test" .
tflags=()
for f in $flags; do # go test flags as the test binary spells them
	case $f in
	-test.*) tflags+=("$f") ;;
	-*) tflags+=("-test.${f#-}") ;;
	*) tflags+=("$f") ;;
	esac
done
for round in $(seq "$rounds"); do
	echo "run.sh: round $round of $rounds"
	"$dir/bench.test" -test.run '^$' -test.bench '^BenchmarkCheck$' -test.benchmem "${tflags[@]}" | tee -a "$out"
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
go run ./cmd/benchtable \
	-date "$(date -u +%Y-%m-%d)" \
	-machine "$(nproc) × ${cpu:-unknown CPU} ($(go env GOOS)/$(go env GOARCH), $(go version | awk '{print $3}'))" \
	-redis "Redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')" \
	-command "go test -run '^\$' -bench '^BenchmarkCheck\$' -benchmem $flags ./bench" \
	-rounds "$rounds" \
	<"$out" >README.md.new
if [[ -f rls.md ]]; then
	# The RateLimitService comparison (make bench-rls) keeps its section.
	printf '\n' >>README.md.new
	cat rls.md >>README.md.new
fi
mv README.md.new README.md
echo "run.sh: wrote $here/README.md"
