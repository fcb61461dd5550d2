#!/usr/bin/env bash
# Installs this build's libdevplace into a temporary prefix, then builds tests/client/consumer
# against it with find_package(devplace) and, separately, with `pkg-config devplace`, and runs
# both programs.
# Usage: consumer_test.sh <build dir> <consumer source dir> <cmake> <generator> [sanitizers]
# A sanitizer build installs instrumented libraries, so the consumers get the same -fsanitize.
set -euo pipefail
build="$1" src="$2" cmake="$3" generator="$4" sanitize="${5:-}"
san_flags=""
[ -n "$sanitize" ] && san_flags="-fsanitize=$sanitize"
tmp=$(mktemp -d /tmp/devplace-consumer-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"

"$cmake" --install "$build" --prefix "$prefix" --component devplace_client >/dev/null
echo "installed into $prefix:"
(cd "$prefix" && find . -type f | sort)

# find_package(devplace CONFIG REQUIRED) + devplace::client
"$cmake" -S "$src" -B "$tmp/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="$san_flags" -DCMAKE_EXE_LINKER_FLAGS="$san_flags" \
  >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
"$cmake" --build "$tmp/build" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
DEVPLACE_ADDRESS=unix:/consumer/test.sock "$tmp/build/consumer" | tee "$tmp/out"
grep -qx 'target unix:/consumer/test.sock' "$tmp/out"

# pkg-config --cflags --libs devplace
libdir=$(dirname "$(find "$prefix" -name devplace.pc)")
export PKG_CONFIG_PATH="$libdir"
flags=$(pkg-config --cflags --libs devplace)
echo "pkg-config: $flags"
includedir=$(pkg-config --variable=includedir devplace)
[ "$(realpath "$includedir")" = "$(realpath "$prefix/include")" ] || { echo "pkg-config: includedir $includedir"; exit 1; }
c++ -std=c++17 $san_flags "$src/main.cc" -o "$tmp/consumer_pc" $flags
"$tmp/consumer_pc" >/dev/null
echo "find_package and pkg-config consumers built and ran"
