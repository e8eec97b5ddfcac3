#!/usr/bin/env bash
# Runs every test of every module, as CI does. On a fresh Debian machine it
# installs what the tests need (redis-server from Debian's packages, copier from
# PyPI, chromium and prometheus/promtool from Debian's packages), starts a standalone Redis, a 3-master Redis Cluster and a Sentinel
# setup (one master, one replica, one sentinel) on free loopback ports,
# exports RATEKIT_TEST_REDIS_URL / RATEKIT_TEST_REDIS_CLUSTER /
# RATEKIT_TEST_REDIS_SENTINEL, runs
# gofmt, then in each module the go mod tidy check, go vet, a 32-bit build
# (GOARCH=386), golangci-lint
# (installed from the Go module proxy, configured by .golangci.yml) and
# go test -race, and stops the servers.
#
# Usage: scripts/test.sh [extra go test flags]   e.g. scripts/test.sh -run TestConformance
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '== %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

ensure_redis() {
  if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then return; fi
  log "installing redis-server (Debian package)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
}

ensure_chromium() {
  # the debug page is also tested in a real headless browser
  if [ -z "${RATEKIT_TEST_CHROMIUM:-}" ]; then
    if ! command -v chromium >/dev/null; then
      log "installing chromium (Debian package)"
      as_root apt-get update -qq
      DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
    fi
    RATEKIT_TEST_CHROMIUM=$(command -v chromium)
  fi
  export RATEKIT_TEST_CHROMIUM
}

ensure_prometheus() {
  # the shipped Prometheus rules: promtool checks and unit-tests them, and a
  # real Prometheus scraping an example evaluates them (examples/observability)
  if [ -z "${RATEKIT_TEST_PROMETHEUS:-}" ] || [ -z "${RATEKIT_TEST_PROMTOOL:-}" ]; then
    if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
      log "installing prometheus (Debian package: prometheus and promtool)"
      as_root apt-get update -qq
      DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq prometheus >/dev/null
    fi
    RATEKIT_TEST_PROMETHEUS=${RATEKIT_TEST_PROMETHEUS:-$(command -v prometheus)}
    RATEKIT_TEST_PROMTOOL=${RATEKIT_TEST_PROMTOOL:-$(command -v promtool)}
  fi
  export RATEKIT_TEST_PROMETHEUS RATEKIT_TEST_PROMTOOL
}

ensure_copier() {
  [ -d copier-template ] || return 0
  if command -v copier >/dev/null; then return; fi
  log "installing copier (PyPI)"
  if python3 -m pip install --quiet --disable-pip-version-check 'copier>=9,<10' 2>/dev/null; then
    if command -v pyenv >/dev/null; then pyenv rehash; fi # console scripts of a pyenv Python need shims
    if ! command -v copier >/dev/null; then
      PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
      export PATH
    fi
  else
    # A distribution's own Python refuses pip installs (PEP 668, "externally
    # managed": Debian 12, Ubuntu 23.04 on) or has no pip: copier goes into a
    # virtual environment of its own, kept between runs.
    venv=${XDG_CACHE_HOME:-$HOME/.cache}/ratekit/copier-venv
    if [ ! -x "$venv/bin/pip" ]; then
      rm -rf "$venv"
      python3 -m venv "$venv" 2>/dev/null || {
        log "installing python3-venv (Debian package)"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$venv"
        python3 -m venv "$venv"
      }
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'copier>=9,<10'
    PATH="$venv/bin:$PATH"
    export PATH
  fi
  command -v copier >/dev/null || { log "copier installed but not on PATH"; exit 1; }
}

# A free port below 45000: a cluster node also listens on port+10000, which
# must stay below 65536 and free.
free_port() {
  python3 - <<'PY'
import random, socket
for _ in range(1000):
    p = random.randint(20000, 45000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    print(p); break
PY
}

RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-test.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  rm -rf "$RUNDIR"
}
trap cleanup EXIT

start_redis() { # port [extra args...]
  local port=$1; shift
  mkdir -p "$RUNDIR/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$RUNDIR/$port" --logfile "$RUNDIR/$port/redis.log" --daemonize no "$@" &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "redis-server on port $port did not start"; cat "$RUNDIR/$port/redis.log" >&2; return 1
}

# golangci-lint, pinned, built from the Go module proxy with the local Go
# (a prebuilt binary made with an older Go cannot load this Go's packages).
GOLANGCI_LINT_VERSION=v2.15.0
ensure_golangci_lint() {
  local bin
  bin="$(go env GOPATH)/bin/golangci-lint"
  if ! [ -x "$bin" ] || ! "$bin" version 2>/dev/null | grep -q "version ${GOLANGCI_LINT_VERSION#v} "; then
    log "installing golangci-lint $GOLANGCI_LINT_VERSION (Go module proxy)"
    GOBIN="$(go env GOPATH)/bin" GOFLAGS= go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
  fi
  GOLANGCI_LINT=$bin
}

ensure_redis
ensure_copier
ensure_chromium
ensure_prometheus
ensure_golangci_lint

if [ -z "${RATEKIT_TEST_REDIS_URL:-}" ]; then
  port=$(free_port)
  start_redis "$port"
  export RATEKIT_TEST_REDIS_URL="redis://127.0.0.1:$port"
fi
if [ -z "${RATEKIT_TEST_REDIS_CLUSTER:-}" ]; then
  nodes=()
  for _ in 1 2 3; do
    port=$(free_port)
    start_redis "$port" --cluster-enabled yes --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 2000
    nodes+=("127.0.0.1:$port")
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$RUNDIR/cluster-create.log" 2>&1 ||
    { cat "$RUNDIR/cluster-create.log" >&2; exit 1; }
  for n in "${nodes[@]}"; do
    for _ in $(seq 1 100); do
      redis-cli -h "${n%:*}" -p "${n#*:}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
      sleep 0.1
    done
  done
  RATEKIT_TEST_REDIS_CLUSTER=$(IFS=,; echo "${nodes[*]}")
  export RATEKIT_TEST_REDIS_CLUSTER
fi
if [ -z "${RATEKIT_TEST_REDIS_SENTINEL:-}" ]; then
  master=$(free_port)
  start_redis "$master"
  replica=$(free_port)
  start_redis "$replica" --replicaof 127.0.0.1 "$master"
  sentinel=$(free_port)
  mkdir -p "$RUNDIR/sentinel-$sentinel"
  # A sentinel rewrites its configuration file: it must be a file of its own.
  printf 'port %s
bind 127.0.0.1
sentinel monitor mymaster 127.0.0.1 %s 1
sentinel down-after-milliseconds mymaster 2000
sentinel failover-timeout mymaster 5000
' \
    "$sentinel" "$master" >"$RUNDIR/sentinel-$sentinel/sentinel.conf"
  redis-server "$RUNDIR/sentinel-$sentinel/sentinel.conf" --sentinel --dir "$RUNDIR/sentinel-$sentinel" \
    --logfile "$RUNDIR/sentinel-$sentinel/sentinel.log" --daemonize no &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    redis-cli -p "$sentinel" sentinel get-master-addr-by-name mymaster 2>/dev/null | grep -q "$master" &&
      redis-cli -p "$replica" info replication 2>/dev/null | grep -q 'master_link_status:up' && break
    sleep 0.1
  done
  export RATEKIT_TEST_REDIS_SENTINEL="127.0.0.1:$sentinel/mymaster"
fi
log "redis: $RATEKIT_TEST_REDIS_URL  cluster: $RATEKIT_TEST_REDIS_CLUSTER  sentinel: $RATEKIT_TEST_REDIS_SENTINEL"

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then echo "gofmt needed:" >&2; echo "$unformatted" >&2; exit 1; fi

log "promtool: observability/prometheus rules"
(cd observability/prometheus && "$RATEKIT_TEST_PROMTOOL" check rules ratekit.rules.yml && "$RATEKIT_TEST_PROMTOOL" test rules ratekit.rules.test.yml)

if [ -x scripts/check-generated.sh ]; then
  log "generated code up to date"
  scripts/check-generated.sh
fi

mods=$(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' -not -path './copier-template/*' -printf '%h\n' | sort)
status=0
for m in $mods; do
  log "module $m: go mod tidy"
  (cd "$m" && go mod tidy -diff) || { log "module $m is not tidy: run go mod tidy in $m"; status=1; }
  log "module $m: go vet"
  (cd "$m" && go vet ./...) || status=1
  # A constant past a 32-bit int builds on amd64 and breaks 386 and arm.
  log "module $m: go build for GOARCH=386 (a 32-bit int)"
  (cd "$m" && GOARCH=386 go build ./...) || status=1
  log "module $m: golangci-lint"
  # Serialised around golangci-lint's lock, not refused, when another run
  # (a second checkout's tests on the same machine) holds it.
  (cd "$m" && "$GOLANGCI_LINT" run --allow-serial-runners ./...) || status=1
  log "module $m: go test -race"
  (cd "$m" && go test -race -count=1 -timeout 30m "$@" ./...) || status=1
done
exit $status
