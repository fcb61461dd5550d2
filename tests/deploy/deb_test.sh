#!/usr/bin/env bash
# Builds the devplace .deb with CPack from this build tree (its binaries: the dev tree's Debug
# build, stripped by CPack), installs it into this machine with `dpkg -i`, checks the files, the
# `devplace` group, the conffile and that devplaced.service is enabled but not started, verifies
# the installed unit with systemd-analyze, runs the INSTALLED devplaced (with the installed flag
# file, on a temp socket, on a fixture host) and calls it with the installed `devplace` CLI,
# then purges the package and checks that nothing of it is left.
# Needs root (dpkg); exits 77 (ctest: skipped) with the reason otherwise.
# Usage: deb_test.sh <build dir> <cpack> <fixture host dir>
set -euo pipefail
build="$1" cpack="$2" fixture="$3"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/run_installed_daemon.sh"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: installing a .deb with dpkg needs root (run ctest as root)"
  exit 77
fi
if dpkg-query -W -f='${Status}' devplace 2>/dev/null | grep -q 'install ok installed'; then
  echo "FAIL: a devplace package is already installed on this machine; this test installs and purges" \
       "its own, so remove that one first (dpkg --purge devplace)" >&2
  exit 1
fi

tmp=$(mktemp -d /tmp/devplace-deb-XXXXXX)
installed=0
cleanup() {
  stop_daemon >/dev/null 2>&1 || true
  if [ "$installed" = 1 ]; then dpkg --purge devplace >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

start=$(date +%s)
"$cpack" -G DEB -B "$tmp/pkg" --config "$build/CPackConfig.cmake" >"$tmp/cpack.log" 2>&1 ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(ls "$tmp"/pkg/devplace_*.deb)
echo "built $(basename "$deb") in $(( $(date +%s) - start )) s"

# ---- the package's metadata ----
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libgrpc++1.51 libprotobuf32 libabsl20220623 adduser; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib (dpkg-shlibdeps): $depends"
done
[ "$(dpkg-deb -f "$deb" Package)" = devplace ] || fail "package name is not devplace"

# ---- install ----
dpkg -i "$deb" >"$tmp/dpkg-i.log" 2>&1 || { cat "$tmp/dpkg-i.log"; fail "dpkg -i failed"; }
installed=1
for f in /usr/bin/devplace /usr/sbin/devplaced /usr/lib/devplace/devplace-probe /usr/share/devplace/real_host_check; do
  [ -x "$f" ] || fail "$f is not installed as an executable"
done
for f in /usr/share/devplace/proto/devplace/v1/devplace.proto /lib/systemd/system/devplaced.service \
         /etc/devplace/devplaced.flags /usr/include/devplace/client.h /usr/lib/pkgconfig/devplace.pc \
         /usr/share/man/man1/devplace.1.gz /usr/share/man/man8/devplaced.8.gz \
         /usr/share/bash-completion/completions/devplace /usr/share/doc/devplace/docs/OPERATOR.md; do
  [ -f "$f" ] || fail "$f is not installed"
done
# `man devplace` finds the packaged page through man-db's own search path, not only by file name.
man -w devplace | grep -qx /usr/share/man/man1/devplace.1.gz || fail "man -w devplace: $(man -w devplace 2>&1)"
# The Python client's wheel, for jobs in their own venv or image (client/README.md "The wheel").
compgen -G '/usr/share/devplace/python/devplace-*-py3-none-any.whl' >/dev/null ||
  fail "/usr/share/devplace/python/devplace-<version>-py3-none-any.whl is not installed"
dpkg-query -W -f='${Conffiles}\n' devplace | grep -q '/etc/devplace/devplaced.flags' ||
  fail "/etc/devplace/devplaced.flags is not a conffile"
getent group devplace >/dev/null || fail "postinst did not create the devplace group"
grep -q '^ExecStart=/usr/sbin/devplaced .*--flagfile=/etc/devplace/devplaced.flags' /lib/systemd/system/devplaced.service ||
  fail "the installed unit does not start /usr/sbin/devplaced with /etc/devplace/devplaced.flags"
enabled=$(systemctl is-enabled devplaced.service 2>&1 || true)
[ "$enabled" = enabled ] || fail "devplaced.service is '$enabled' after install, expected enabled"
[ -L /etc/systemd/system/multi-user.target.wants/devplaced.service ] ||
  fail "no multi-user.target.wants link for devplaced.service"
for pid in $(pgrep -x devplaced || true); do  # enabled, not started: no daemon runs from /usr/sbin
  [ "$(readlink "/proc/$pid/exe" || true)" != /usr/sbin/devplaced ] || fail "postinst started /usr/sbin/devplaced (pid $pid)"
done
echo "ok: files, conffile, group, unit enabled"
systemd-analyze verify /lib/systemd/system/devplaced.service >"$tmp/verify.log" 2>&1 ||
  { cat "$tmp/verify.log"; fail "systemd-analyze verify rejects the installed unit"; }
[ ! -s "$tmp/verify.log" ] || { cat "$tmp/verify.log"; fail "systemd-analyze verify warns about the installed unit"; }
echo "ok: systemd-analyze verify accepts the installed unit"

# ---- the installed daemon, the installed flag file, the installed CLI ----
start_daemon /usr/sbin/devplaced /usr/bin/devplace "$tmp" "$fixture" \
  --flagfile=/etc/devplace/devplaced.flags --socket_group=devplace --torch_probe_command=none
grep -q 'probe_command=/usr/lib/devplace/devplace-probe ' "$tmp/daemon.log" ||
  { cat "$tmp/daemon.log"; fail "the installed devplaced did not use /usr/lib/devplace/devplace-probe"; }
[ "$(stat -c %G "$socket")" = devplace ] || fail "the socket's group is $(stat -c %G "$socket"), not devplace"
expect_nvidia_h100s /usr/bin/devplace
# The Python client from the package (client/python), imported by Debian's python3 from /usr.
py=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c "import devplace; print(devplace.__file__); print(devplace.Client('unix:$socket').resolve('inference', 'cuda:1', from_environment=False))") ||
  fail "the installed Python client failed: $py"
[ "$py" = "$(printf '/usr/lib/python3/dist-packages/devplace/__init__.py\ncuda:1')" ] ||
  fail "the installed Python client answered '$py', not cuda:1 from /usr/lib/python3/dist-packages"
stop_daemon
# The torch probe is found from the installed path too (the default, no --torch_probe_command).
start_daemon /usr/sbin/devplaced /usr/bin/devplace "$tmp" "$fixture"
grep -q 'torch_probe_command=/usr/lib/devplace/devplace-torch-probe ' "$tmp/daemon.log" ||
  { cat "$tmp/daemon.log"; fail "the installed devplaced did not pick /usr/lib/devplace/devplace-torch-probe"; }
stop_daemon
echo "ok: the installed devplaced answers the installed devplace CLI"

# ---- purge ----
# A daemon still running on the default socket (started by hand, not by the unit: prerm stops only
# the unit) keeps its runtime directory through the purge.
run_socket=/run/devplace/devplace.sock
live_daemon=""
if [ -S "$run_socket" ] && "$build/client/devplace" --address="unix:$run_socket" --timeout=1s health >/dev/null 2>&1; then
  echo "note: a devplaced already serves on $run_socket; the purge-while-running check is skipped"
else
  /usr/sbin/devplaced --listen="unix:$run_socket" --host_root="$fixture" --nvml_library= --metrics_listen= \
    --torch_probe_command=none >"$tmp/run-daemon.log" 2>&1 &
  live_daemon=$!
  for _ in $(seq 1 300); do
    "$build/client/devplace" --address="unix:$run_socket" --timeout=1s health >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
dpkg --purge devplace >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log"; fail "dpkg --purge failed"; }
installed=0
if [ -n "$live_daemon" ]; then
  [ -S "$run_socket" ] || { kill "$live_daemon"; fail "the purge removed $run_socket under a running devplaced"; }
  "$build/client/devplace" --address="unix:$run_socket" --timeout=2s health >/dev/null ||
    { kill "$live_daemon"; cat "$tmp/run-daemon.log"; fail "the running devplaced stopped serving after the purge"; }
  kill -TERM "$live_daemon"
  wait "$live_daemon" || fail "the devplaced that ran through the purge exited $? on SIGTERM"
  rmdir /run/devplace 2>/dev/null || true
  echo "ok: the purge left /run/devplace to the devplaced running there"
fi
for f in /usr/sbin/devplaced /usr/bin/devplace /usr/lib/devplace /etc/devplace /lib/systemd/system/devplaced.service \
         /usr/lib/python3/dist-packages/devplace /usr/share/devplace/python \
         /usr/share/man/man1/devplace.1.gz /usr/share/bash-completion/completions/devplace \
         /etc/systemd/system/multi-user.target.wants/devplaced.service; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || fail "$f is still there after dpkg --purge"
done
echo "ok: dpkg --purge removed the files and the unit's enablement in $(( $(date +%s) - start )) s total"
