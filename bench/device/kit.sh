#!/usr/bin/env bash
# kit.sh builds bench/device/kit.tgz: everything run.sh needs on a many-core
# machine that has no Go toolchain, no network and maybe another libc. Static
# Go binaries (the bench module's test binary, rlsbench, scriptcpu, both RLS
# servers) and this machine's redis-server and redis-cli with the shared
# libraries they load and the loader, started through it. Git ignores the
# kit; the device tool carries it:
#
#	bench/device/kit.sh      # here, once per change of the code measured
#	run(command="bench/device/run.sh", carry=["bench/device/kit.tgz"])
#
# See ../shared/design/reference/many-core-bench.md for why these figures
# need such a machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ratekit-kit.XXXXXX")
trap 'rm -rf "$work"' EXIT
k=$work/kit
mkdir -p "$k/bin" "$k/lib"

cd "$here/.."
export CGO_ENABLED=0
go test -c -trimpath -ldflags='-s -w' -o "$k/bin/bench.test" .
for c in rlsbench scriptcpu; do
	go build -trimpath -ldflags='-s -w' -o "$k/bin/$c" "./cmd/$c"
done
go run ./cmd/rlsbench -build "$k/bin"

# redis-server and redis-cli run through the loader they were linked with,
# on the libraries they were linked with: wrappers under their own names
# exec the loader, so a process ID stays the server's.
for b in redis-server redis-cli; do
	cp "$(command -v "$b")" "$k/lib/$b"
	ldd "$(command -v "$b")" | awk '/=> \// {print $3} /^\t\/.*ld-linux/ {print $1}' |
		while read -r lib; do cp -n "$lib" "$k/lib/"; done
	cat >"$k/bin/$b" <<WRAP
#!/bin/sh
lib=\$(cd "\$(dirname "\$0")/../lib" && pwd)
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" "\$lib/$b" "\$@"
WRAP
	chmod +x "$k/bin/$b"
done
"$k/bin/redis-server" --version >/dev/null

echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- .. || echo +dirty) built $(date -u +%FT%TZ)" >"$k/VERSION"
tar -C "$work" -czf "$here/kit.tgz" kit
ls -l "$here/kit.tgz"
