#!/usr/bin/env bash
# Runs the bench module's BenchmarkCheck on a fresh redis-server and
# regenerates bench/README.md from the results (see cmd/benchtable).
#
#   bench/run.sh                      # every contender, 3 rounds of -benchtime 1s (BENCH_ROUNDS)
#   BENCH_ROUNDS=5 BENCH_FLAGS='-benchtime 2s' bench/run.sh
#   BENCH_REDIS_PORT=21201 bench/run.sh   # a fixed port instead of a free one
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

port=${BENCH_REDIS_PORT:-}
if [[ -z $port ]]; then
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			port=$p
			break
		fi
	done
fi
[[ -n $port ]] || { echo "run.sh: no free port" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-bench.XXXXXX")
out=$dir/bench.txt
cleanup() {
	if [[ -f $dir/redis.pid ]]; then kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; fi
	rm -rf "$dir"
}
trap cleanup EXIT

redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--daemonize yes --pidfile "$dir/redis.pid" --dir "$dir" --logfile "$dir/redis.log"
for _ in $(seq 50); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$port" ping >/dev/null

flags=${BENCH_FLAGS:--benchtime 1s}
rounds=${BENCH_ROUNDS:-3}
export RATEKIT_TEST_REDIS_URL=redis://127.0.0.1:$port
# The proof that every contender limits, then the measurements.
go test -count=1 -run 'TestContendersAgree|TestBannedClientIsBlocked' .
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
