#!/usr/bin/env bash
# Fails when the committed generated Go of proto/ (under proto/ and
# controlplane/remoterules/rulesv1) differs from what
# scripts/gen-proto.sh produces now (a .proto edited without regenerating, or a
# generated file edited by hand). Offline and a few seconds: it regenerates into
# a temporary directory and compares. The protoc version line of the header is
# ignored, so a different Debian protoc patch release does not count as stale.
set -euo pipefail
cd "$(dirname "$0")/.."

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-check-generated.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

scripts/gen-proto.sh "$TMP/out" >/dev/null

strip() { sed '/^\/\/ \tprotoc  *v/d' "$1"; }

stale=()
while IFS= read -r f; do
  rel=${f#"$TMP/out/"}
  if [ ! -f "$rel" ] || ! diff -q <(strip "$f") <(strip "$rel") >/dev/null; then
    stale+=("$rel")
  fi
done < <(find "$TMP/out" -name '*.pb.go' | sort)
while IFS= read -r f; do
  [ -f "$TMP/out/$f" ] || stale+=("$f (no .proto generates it any more)")
done < <(find proto controlplane/remoterules -name '*.pb.go' -not -path 'proto/internal/*' | sort)

if [ ${#stale[@]} -gt 0 ]; then
  echo "check-generated: generated code is stale; run scripts/gen-proto.sh and commit the result:" >&2
  printf '  %s\n' "${stale[@]}" >&2
  exit 1
fi
echo "check-generated: generated code of proto/ is up to date" >&2
