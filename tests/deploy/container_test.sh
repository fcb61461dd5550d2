#!/usr/bin/env bash
# deploy/container/Containerfile without building it (a real build runs scripts/setup and a full
# Release build: far beyond a test's time here; see deploy/README.md): lints it with
# dockerfile-utils (and proves the lint catches a misspelled instruction), then checks what the
# recipe promises: multi-stage on Debian bookworm, the build stage runs scripts/setup and packs
# the .deb, the runtime stage installs only that .deb, runs as a non-root user by default with
# --host_root=/host, and .containerignore keeps build trees and tools out of the context.
# Usage: container_test.sh <repository root>
set -euo pipefail
root="$1"
file="$root/deploy/container/Containerfile"
lint="$root/tests/deploy/lint_containerfile.js"
tools="$root/.tools"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -d "$tools/node_modules/dockerfile-utils" ] || fail "$tools/node_modules/dockerfile-utils is missing: run scripts/setup"

tmp=$(mktemp -d /tmp/devplace-container-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

node "$lint" "$tools" "$file" || fail "the Containerfile does not lint (above)"
sed 's/^COPY --from=build/COPPY --from=build/' "$file" >"$tmp/Containerfile"
if node "$lint" "$tools" "$tmp/Containerfile" >"$tmp/lint.out"; then fail "the lint accepted COPPY"; fi
grep -q COPPY "$tmp/lint.out" || { cat "$tmp/lint.out"; fail "the lint did not name COPPY"; }
echo "ok: the lint catches a misspelled instruction: $(cat "$tmp/lint.out")"

has() { grep -Eq -- "$1" "$file" || fail "the Containerfile lacks: $2"; }
[ "$(grep -c '^FROM ' "$file")" = 2 ] || fail "expected two stages (build, runtime)"
has '^ARG BASE_IMAGE=.*debian:bookworm' "a Debian bookworm base image"
has '^FROM \$\{BASE_IMAGE\} AS build$' "a build stage on the base image"
has '^FROM \$\{BASE_IMAGE\} AS runtime$' "a runtime stage on the base image"
has 'scripts/setup' "scripts/setup in the build stage"
has 'cmake --preset release' "a release build"
has 'cpack -G DEB' "the .deb packed in the build stage"
has '^COPY --from=build /out/devplace_\*\.deb' "the runtime stage taking only the .deb"
has '^USER 7465:7465$' "a non-root default user"
has '^ENTRYPOINT \["/usr/sbin/devplaced", "--host_root=/host"\]' "devplaced with --host_root=/host"
# The runtime stage installs no compiler or -dev package.
if sed -n '/AS runtime$/,$p' "$file" | grep -Eq -- '-dev\b|g\+\+|cmake'; then fail "the runtime stage installs build tools"; fi
for entry in build/ .tools/ .git; do
  grep -qx -- "$entry" "$root/.containerignore" || fail ".containerignore lacks $entry"
done
echo "ok: Containerfile recipe checks"
