# Sourced by the install tests: start_daemon DAEMON CLI TMP FIXTURE [flags...] starts DAEMON on
# unix:TMP/devplace.sock against the fixture host tree FIXTURE (log in TMP/daemon.log) and waits
# until CLI reports it SERVING (at most 30 s); stop_daemon sends SIGTERM and waits for exit 0.
start_daemon() {
  local daemon="$1" cli="$2" tmp="$3" fixture="$4"
  shift 4
  socket="$tmp/devplace.sock"
  "$daemon" --listen="unix:$socket" --host_root="$fixture" --nvml_library= "$@" >"$tmp/daemon.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 1 300); do
    if "$cli" --address="unix:$socket" --timeout=1s health >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$daemon_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "FAIL: $daemon did not become SERVING on unix:$socket; its log:" >&2
  cat "$tmp/daemon.log" >&2
  return 1
}

stop_daemon() {
  [ -n "${daemon_pid:-}" ] || return 0
  kill -TERM "$daemon_pid" 2>/dev/null || true
  local rc=0
  wait "$daemon_pid" || rc=$?
  daemon_pid=""
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: the daemon exited $rc on SIGTERM; its log:" >&2
    cat "$tmp/daemon.log" >&2
    return 1
  fi
}

# expect_nvidia_h100s CLI: the daemon's inventory has the fixture's two usable H100s, and a job
# asking for device_map=auto gets cuda:0.
expect_nvidia_h100s() {
  local cli="$1" out device
  out=$("$cli" --address="unix:$socket" inventory)
  if ! printf '%s\n' "$out" | grep -Eq '^cuda/nvidia +cuda +READY +2/2 usable'; then
    echo "FAIL: expected 'cuda/nvidia cuda READY 2/2 usable' from nvidia-2x-h100; the inventory:" >&2
    printf '%s\n' "$out" >&2
    return 1
  fi
  device=$("$cli" --address="unix:$socket" resolve --workload=inference --device_map=auto --no_environment)
  if [ "$device" != "cuda:0" ]; then
    echo "FAIL: resolve --device_map=auto answered '$device', expected cuda:0" >&2
    return 1
  fi
  echo "ok: the daemon serves the fixture's 2 H100s and resolves cuda:0"
}
