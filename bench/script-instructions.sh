#!/usr/bin/env bash
# script-instructions.sh [SCRIPT]: instructions Redis executes per EVALSHA of
# evaluate.lua (or SCRIPT, another version of it) for the shapes of check in
# docs/design.md ("What a check costs Redis"), counted by callgrind inclusive
# of evalShaCommand. Needs redis-server, redis-cli, valgrind and python3;
# runs a Redis of its own under valgrind on port 23500 (RATEKIT_CG_PORT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=${1:-$here/../core/redisstore/evaluate.lua}
port=${RATEKIT_CG_PORT:-23500}
n=4000

# measure SETUP ARGS...: per-call instructions of n EVALSHA calls, ARGS being
# numkeys, keys and args with KEY replaced by one of 1,000 key names; SETUP
# is python code printing commands to run first (not counted).
measure() {
	local setup=$1
	shift
	local d
	d=$(mktemp -d)
	valgrind --tool=callgrind --toggle-collect=evalShaCommand --callgrind-out-file="$d/cg.out" \
		redis-server --port "$port" --save '' --appendonly no >/dev/null 2>&1 &
	local vp=$!
	for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	local sha
	sha=$(redis-cli -p "$port" -x script load <"$script")
	if [ -n "$setup" ]; then python3 -c "$setup" | redis-cli -p "$port" --pipe >/dev/null; fi
	python3 - "$sha" "$n" "$@" >"$d/cmds" <<'PY'
import sys
sha, n, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
out = []
for i in range(n):
    a = ["EVALSHA", sha] + [x.replace("KEY", "k%d" % (i % 1000)) for x in args]
    out.append("*%d\r\n" % len(a) + "".join("$%d\r\n%s\r\n" % (len(s.encode()), s) for s in a))
sys.stdout.write("".join(out))
PY
	redis-cli -p "$port" --pipe <"$d/cmds" >"$d/pipe" 2>&1
	grep -q "errors: 0" "$d/pipe" || { cat "$d/pipe" >&2; exit 1; }
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$vp" || true
	local ir
	ir=$(callgrind_annotate "$d/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
	rm -rf "$d"
	echo $((ir / n))
}

cmds() { # python printing the RESP of the given commands (a list of lists)
	echo "import sys
out = []
for a in $1:
    out.append('*%d\r\n' % len(a) + ''.join('\$%d\r\n%s\r\n' % (len(s), s) for s in a))
sys.stdout.write(''.join(out))"
}
L=1099511627776 P=3600000
previous=$(cmds "[c for i in range(1000) for c in (['HSET', 'k%d' % i, 'c', '3', 'p', '7'], ['PEXPIRE', 'k%d' % i, '5000000'])]")
notfull=$(cmds "[['SET', 'k%d' % i, '0.25', 'PX', '1000000'] for i in range(1000)]")

printf '%-50s %s\n' "one check of" "instructions per EVALSHA"
row() { printf '%-50s %s\n' "$1" "$(measure "$2" "${@:3}")"; }
row "1 rule (fixed window)" "" 1 KEY t $L $P 1
row "1 rule with a ban" "" 2 KEY KEY:ban B $L $P $P 1
row "1 rule with a ban, window known (Dial)" "" 2 KEY KEY:ban V $L $P 1
row "5 rules (fixed windows)" "" 5 KEYa KEYb KEYc KEYd KEYe t $L $P 1 t $L $P 1 t $L $P 1 t $L $P 1 t $L $P 1
row "5 rules, windows known (Dial)" "" 5 KEYa KEYb KEYc KEYd KEYe U $L 1 U $L 1 U $L 1 U $L 1 U $L 1
row "1 sliding window" "" 1 KEY W $L $P 1
row "1 sliding window whose previous window counted" "$previous" 1 KEY W $L $P 1
# The full bucket's TTL and fraction as fullBucket computes them for a limit of
# 2^40 per hour and a cost of 1.
row "1 token bucket (full)" "" 1 KEY K $L $P 1 $L 1 0.9999967258190736
row "1 token bucket, not full (300 per hour)" "$notfull" 1 KEY K 300 $P 1 300 12000 0
row "1 sliding window with a ban" "" 2 KEY KEY:ban X $L $P $P 1
row "1 token bucket with a ban" "" 2 KEY KEY:ban Y $L $P $P 1 $L
