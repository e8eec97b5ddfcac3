#!/usr/bin/env bash
# Regenerates the Go code of every .proto file under proto/. Each file's Go
# lands where its go_package points inside this repository: the config schema
# beside its .proto, the rules service (ratekit/rules/v1) in
# controlplane/remoterules/rulesv1, the remoterules module, because its gRPC stubs
# import google.golang.org/grpc and the root module never does. Works offline
# on a fresh machine with only Debian packages and the Go module proxy:
#   - protoc comes from Debian's protobuf-compiler (installed if missing);
#   - protoc-gen-go is built from google.golang.org/protobuf at the version in
#     go.mod, so generated code always matches the runtime;
#   - protoc-gen-go-grpc is built from the module proxy at a pinned version,
#     for the services only (--go-grpc_out);
#   - buf/validate/validate.proto and its imports are not copied into the tree:
#     proto/internal/depset dumps the descriptors that the pinned protovalidate
#     Go module registers, and protoc reads them with --descriptor_set_in.
#
# Usage: scripts/gen-proto.sh [OUTROOT]   (default: ., i.e. in place; OUTROOT
# mirrors the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.}
MODULE=github.com/ratekit/ratekit
GRPC_PLUGIN_VERSION=v1.6.0

if ! command -v protoc >/dev/null; then
  echo "gen-proto: installing protobuf-compiler (Debian package)" >&2
  as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null 2>&1 ||
    { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null; }
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-gen-proto.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

go build -o "$TMP/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
GOBIN="$TMP" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$GRPC_PLUGIN_VERSION"
go run ./proto/internal/depset "$TMP/deps.binpb"

mapfile -t files < <(cd proto && find . -name '*.proto' -not -path './internal/*' | sed 's|^\./||' | sort)
mkdir -p "$OUT"
protoc -I proto --descriptor_set_in="$TMP/deps.binpb" \
  --plugin=protoc-gen-go="$TMP/protoc-gen-go" \
  --go_out="$OUT" --go_opt=module="$MODULE" \
  "${files[@]}"

# gRPC stubs for the files that declare a service.
mapfile -t services < <(cd proto && grep -l '^service ' "${files[@]}")
if [ ${#services[@]} -gt 0 ]; then
  protoc -I proto --descriptor_set_in="$TMP/deps.binpb" \
    --plugin=protoc-gen-go-grpc="$TMP/protoc-gen-go-grpc" \
    --go-grpc_out="$OUT" --go-grpc_opt=module="$MODULE" \
    "${services[@]}"
fi
