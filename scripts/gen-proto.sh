#!/usr/bin/env bash
# Regenerates the Go code of every .proto file under proto/ (output beside each
# file). Works offline on a fresh machine with only Debian packages and the Go
# module proxy:
#   - protoc comes from Debian's protobuf-compiler (installed if missing);
#   - protoc-gen-go is built from google.golang.org/protobuf at the version in
#     go.mod, so generated code always matches the runtime;
#   - buf/validate/validate.proto and its imports are not copied into the tree:
#     proto/internal/depset dumps the descriptors that the pinned protovalidate
#     Go module registers, and protoc reads them with --descriptor_set_in.
#
# Usage: scripts/gen-proto.sh [OUTDIR]   (default: proto/, i.e. in place)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-proto}

if ! command -v protoc >/dev/null; then
  echo "gen-proto: installing protobuf-compiler (Debian package)" >&2
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null 2>&1 ||
    { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null; }
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-gen-proto.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

go build -o "$TMP/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go run ./proto/internal/depset "$TMP/deps.binpb"

mapfile -t files < <(cd proto && find . -name '*.proto' -not -path './internal/*' | sed 's|^\./||' | sort)
mkdir -p "$OUT"
protoc -I proto --descriptor_set_in="$TMP/deps.binpb" \
  --plugin=protoc-gen-go="$TMP/protoc-gen-go" \
  --go_out="$OUT" --go_opt=paths=source_relative \
  "${files[@]}"
