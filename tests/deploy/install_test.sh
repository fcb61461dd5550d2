#!/usr/bin/env bash
# `cmake --install` of this build tree into a temporary prefix: checks the complete layout
# (bin/devplace, sbin/devplaced, lib/devplace/ probes, the proto, the systemd unit rewritten to
# the prefix, the flag file), verifies that unit with `systemd-analyze verify` (and that the check
# catches a misspelled directive), that two installs at once each get their own unit, then runs
# the installed devplaced, which must find its probe in ../lib/devplace/, with the installed flag
# file, and calls it with the installed CLI; and the installed real-hardware check, which must find
# those binaries from its own place (a GPU node with only the .deb runs it so).
# Usage: install_test.sh <build dir> <cmake> <fixture host dir> <with torch: ON|OFF>
set -euo pipefail
build="$1" cmake="$2" fixture="$3" with_torch="$4"
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/run_installed_daemon.sh"

tmp=$(mktemp -d /tmp/devplace-install-XXXXXX)
chmod 755 "$tmp"
trap 'stop_daemon >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix="$tmp/prefix"

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
(cd "$prefix" && find . -type f | sort)
executables=(bin/devplace sbin/devplaced lib/devplace/devplace-probe)
[ "$with_torch" = ON ] && executables+=(lib/devplace/devplace-torch-probe)
for f in "${executables[@]}"; do [ -x "$prefix/$f" ] || fail "$f is not installed as an executable"; done
[ -x "$prefix/share/devplace/real_host_check" ] || fail "share/devplace/real_host_check is not installed as an executable"
for f in share/devplace/proto/devplace/v1/devplace.proto lib/systemd/system/devplaced.service \
         etc/devplace/devplaced.flags share/doc/devplace/README.md include/devplace/client.h; do
  [ -f "$prefix/$f" ] || fail "$f is not installed"
done
compgen -G "$prefix/share/devplace/python/devplace-*-py3-none-any.whl" >/dev/null ||
  fail "share/devplace/python/devplace-<version>-py3-none-any.whl (the Python client's wheel) is not installed"
cmp "$prefix/share/devplace/proto/devplace/v1/devplace.proto" "$here/../../proto/devplace/v1/devplace.proto" ||
  fail "the installed proto differs from proto/devplace/v1/devplace.proto"
# Every line of the default flag file is a comment or blank: defaults are documented, not set.
if grep -Ev '^(#.*)?$' "$prefix/etc/devplace/devplaced.flags"; then fail "the flag file sets flags (above)"; fi
# ... and every flag it documents is one the installed devplaced has.
known=$( { "$prefix/sbin/devplaced" --helpfull 2>&1 || true; } | grep -oE '^ +--[a-z0-9_]+' | tr -d ' ' | sort -u)
for flag in $(grep -oE '^#--[a-z0-9_]+' "$prefix/etc/devplace/devplaced.flags" | tr -d '#'); do
  grep -qx -- "$flag" <<<"$known" || fail "the flag file documents $flag, which devplaced does not have"
done
# ... and it documents every flag of devplaced's own (--help lists those, not absl's).
documented=$(grep -oE '^#--[a-z0-9_]+' "$prefix/etc/devplace/devplaced.flags" | tr -d '#' | sort -u)
for flag in $( { "$prefix/sbin/devplaced" --help 2>&1 || true; } | grep -oE '^ +--[a-z0-9_]+' | tr -d ' ' | sort -u); do
  grep -qx -- "$flag" <<<"$documented" || fail "the flag file does not document $flag (devplaced --help has it)"
done

# ---- the unit, with paths of this prefix ----
unit="$prefix/lib/systemd/system/devplaced.service"
grep -q "^ExecStart=$prefix/sbin/devplaced .*--flagfile=$prefix/etc/devplace/devplaced.flags" "$unit" ||
  { grep ExecStart "$unit"; fail "the installed unit's ExecStart does not point into $prefix"; }
verify() {  # prints systemd-analyze's complaints; any output at all is a failure
  systemd-analyze verify "$1" 2>&1 | grep -v -e '^$' || true
}
complaints=$(verify "$unit")
[ -z "$complaints" ] || fail "systemd-analyze verify: $complaints"
echo "ok: systemd-analyze verify accepts $unit"
mkdir "$tmp/broken"
sed 's/^ProtectSystem=strict/ProtectSystm=strict/' "$unit" >"$tmp/broken/devplaced.service"
complaints=$(verify "$tmp/broken/devplaced.service")
grep -q ProtectSystm <<<"$complaints" || fail "systemd-analyze verify did not notice a misspelled directive"
echo "ok: and it names a misspelled directive: $complaints"
for directive in RuntimeDirectory=devplace ProtectSystem=strict ProtectHome=yes NoNewPrivileges=yes PrivateTmp=yes \
                 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' Restart=on-failure StartLimitIntervalSec=0 \
                 'ExecReload=/bin/kill -HUP $MAINPID'; do
  grep -qxF "$directive" "$unit" || fail "the unit lacks $directive"
done
if grep -Eq '^(PrivateDevices=yes|DevicePolicy=|ProcSubset=pid)' "$unit"; then
  fail "the unit hides /dev or /proc from the probe"
fi

# ---- installs running at once from this build tree each get a unit with their own paths ----
# (ctest -j runs this beside the .deb test, whose CPack installs into /usr; a staging file shared by
# both installed one's unit into the other about one time in five, so 10 rounds catch it.)
for round in $(seq 1 10); do
  rm -rf "$tmp/at-once"
  "$cmake" --install "$build" --prefix "$tmp/at-once/a" --component devplace_daemon >/dev/null &
  DESTDIR="$tmp/at-once/b" "$cmake" --install "$build" --prefix /usr --component devplace_daemon >/dev/null &
  wait
  grep -q "^ExecStart=$tmp/at-once/a/sbin/devplaced " "$tmp/at-once/a/lib/systemd/system/devplaced.service" ||
    fail "round $round: an install into $tmp/at-once/a beside one into /usr got a unit with other paths"
  grep -q "^ExecStart=/usr/sbin/devplaced " "$tmp/at-once/b/usr/lib/systemd/system/devplaced.service" ||
    fail "round $round: an install into /usr beside one into $tmp/at-once/a got a unit with other paths"
done
echo "ok: 10 rounds of two installs at once each got their own unit"

# ---- the installed daemon finds lib/devplace/devplace-probe and reads the installed flag file ----
start_daemon "$prefix/sbin/devplaced" "$prefix/bin/devplace" "$tmp" "$fixture" \
  --flagfile="$prefix/etc/devplace/devplaced.flags" --torch_probe_command=none
grep -q "probe_command=$prefix/lib/devplace/devplace-probe " "$tmp/daemon.log" ||
  { cat "$tmp/daemon.log"; fail "the installed devplaced did not find $prefix/lib/devplace/devplace-probe"; }
expect_nvidia_h100s "$prefix/bin/devplace"
stop_daemon
echo "ok: the installed devplaced ran from $prefix"

# ---- the installed real_host_check runs the installed binaries, with a daemon and without ----
for mode in daemon no_daemon; do
  flags=(--json --host_root="$fixture" --python=/usr/bin/python3)
  [ "$mode" = no_daemon ] && flags+=(--no_daemon)
  (cd "$tmp" && "$prefix/share/devplace/real_host_check" "${flags[@]}") >"$tmp/check-$mode.json" 2>"$tmp/check-$mode.err" ||
    { cat "$tmp/check-$mode.err"; fail "the installed real_host_check ($mode) failed"; }
  python3 - "$tmp/check-$mode.json" "$prefix" "$mode" <<'PY' || fail "the installed real_host_check ($mode): see above"
import json, sys
out, prefix, mode = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
want = {"devplaced": prefix + "/sbin/devplaced", "devplace": prefix + "/bin/devplace",
        "probe": prefix + "/lib/devplace/devplace-probe"}
assert out["binaries"] == want, "ran %s, expected the installed %s" % (out["binaries"], want)
assert out["mode"] == mode, out["mode"]
buses = sorted(d["pciBusId"] for b in out["inventory"]["backends"] for d in b.get("devices", [])
               if b.get("row") == "ROW_CUDA_NVIDIA")
assert buses == ["0000:18:00.0", "0000:9a:00.0"], "the fixture's H100s, got %s" % buses
PY
done
echo "ok: the installed real_host_check ran the installed binaries, with a daemon and without"
