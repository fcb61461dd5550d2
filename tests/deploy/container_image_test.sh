#!/usr/bin/env bash
# Opt-in (DEVPLACE_TEST_CONTAINER_IMAGE=1, root, podman + buildah + debootstrap; about 5 minutes,
# most of it apt inside the image): builds the RUNTIME stage of deploy/container/Containerfile for
# real and runs the image. The base image is made with debootstrap from Debian's archive (no
# registry needed); the build stage (scripts/setup + a full Release build, tens of minutes on two
# cores) is replaced by this build tree's .deb, packed with CPack, in place of its COPY --from=build.
# The image's devplaced runs as its default user (uid 7465) on a fixture host mounted at /host and
# is called with this build's CLI. podman builds with --isolation=chroot and the daemon runs under
# `buildah run --isolation=chroot`: on this machine crun cannot start containers (cgroup v1/v2
# hybrid, and setrlimit is not permitted), chroot isolation needs neither.
# Usage: container_image_test.sh <repository root> <build dir> <cpack> <cli> <fixture host dir>
set -euo pipefail
root="$1" build="$2" cpack="$3" cli="$4" fixture="$5"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ "${DEVPLACE_TEST_CONTAINER_IMAGE:-}" != 1 ]; then
  echo "SKIP: opt-in (about 5 minutes, downloads from Debian's archive): DEVPLACE_TEST_CONTAINER_IMAGE=1 ctest -R deploy.container_image"
  exit 77
fi
[ "$(id -u)" = 0 ] || { echo "SKIP: podman builds here as root only"; exit 77; }
for tool in podman buildah debootstrap; do
  command -v "$tool" >/dev/null || fail "$tool is missing: scripts/setup installs it"
done

tmp=$(mktemp -d /tmp/devplace-image-XXXXXX)
chmod 755 "$tmp"
image=localhost/devplace-test:$$
ctr=""
cleanup() {
  [ -z "${runner:-}" ] || kill "$runner" 2>/dev/null || true
  [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
  podman rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
start=$(date +%s)

base=localhost/debian:bookworm-slim
if ! podman image exists "$base"; then
  debootstrap --variant=minbase bookworm "$tmp/rootfs" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log"; fail "debootstrap"; }
  tar -C "$tmp/rootfs" -c . | podman import - "$base" >/dev/null
  rm -rf "$tmp/rootfs"
  echo "made $base with debootstrap in $(( $(date +%s) - start )) s"
fi

mkdir "$tmp/context"
"$cpack" -G DEB -B "$tmp/pkg" --config "$build/CPackConfig.cmake" >"$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log"; fail cpack; }
cp "$tmp"/pkg/devplace_*.deb "$tmp/context/"
# The runtime stage, verbatim except where its .deb comes from (and the ARG it is based on).
{
  echo "ARG BASE_IMAGE"
  sed -n '/^FROM \${BASE_IMAGE} AS runtime$/,$p' "$root/deploy/container/Containerfile" |
    sed 's|^COPY --from=build /out/devplace_\*\.deb /tmp/$|COPY devplace_*.deb /tmp/|'
} >"$tmp/context/Containerfile"
grep -qx 'COPY devplace_\*.deb /tmp/' "$tmp/context/Containerfile" || fail "the runtime stage no longer copies /out/devplace_*.deb"
t=$(date +%s)
podman build --isolation=chroot --network=host --build-arg BASE_IMAGE="$base" -f "$tmp/context/Containerfile" \
  -t "$image" "$tmp/context" >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; fail "podman build"; }
echo "built the runtime stage in $(( $(date +%s) - t )) s: $(podman image inspect --format '{{.Size}}' "$image") bytes"

mkdir -m 0777 "$tmp/sock"
ctr=$(buildah from "$image")
# The image's entrypoint and user; only the socket moves to a directory mounted from the host
# (chroot isolation mounts its own /run over the image's).
timeout 120 buildah run --isolation=chroot --network=host -v "$fixture:/host:ro" -v "$tmp/sock:/srv/devplace" "$ctr" -- \
  sh -c 'id -u >/srv/devplace/uid; exec /usr/sbin/devplaced --host_root=/host --listen=unix:/srv/devplace/devplace.sock --socket_group=7465' \
  >"$tmp/daemon.log" 2>&1 &
runner=$!
socket="$tmp/sock/devplace.sock"
for _ in $(seq 1 300); do
  "$cli" --address="unix:$socket" --timeout=1s health >/dev/null 2>&1 && break
  kill -0 "$runner" 2>/dev/null || { cat "$tmp/daemon.log"; fail "the image's devplaced exited"; }
  sleep 0.1
done
[ "$(cat "$tmp/sock/uid")" = 7465 ] || fail "the image runs as uid $(cat "$tmp/sock/uid"), not the non-root 7465"
grep -q 'probe_command=/usr/lib/devplace/devplace-probe ' "$tmp/daemon.log" || { cat "$tmp/daemon.log"; fail "probe path"; }
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/run_installed_daemon.sh"
expect_nvidia_h100s "$cli"
echo "ok: the image's devplaced (uid 7465, installed paths) served the fixture host; $(( $(date +%s) - start )) s in all"
