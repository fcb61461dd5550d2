#!/bin/sh
# Smoke test of bench/load_gen (scripts/bench's load generator): against the real
# devplaced on a fixture host it makes one ResolveDevice and one grpc.health.v1 Check call and
# reports the real answer. No timing is asserted.
# Usage: load_gen_test.sh DEVPLACED LOAD_GEN FIXTURES_DIR
set -eu
daemon=$1 load_gen=$2 fixtures=$3
dir=$(mktemp -d /tmp/devplace-loadgen-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
"$daemon" --listen="unix:$dir/d.sock" --host_root="$fixtures/hosts/nvidia-2x-h100" --nvml_library= \
  --torch_probe_command=none --metrics_listen= 2>"$dir/log" &
pid=$!
# cold mode is not used here: the daemon is ours to stop. `once` waits for the socket (wait_for_ready);
# ResolveDevice is UNAVAILABLE until the first probe is in, so retry for up to 20 s.
i=0
until out=$("$load_gen" --mode=once --method=resolve --target="unix:$dir/d.sock" 2>"$dir/err"); do
  i=$((i + 1))
  if [ "$i" -ge 200 ]; then echo "no answer: $(cat "$dir/err")"; cat "$dir/log"; exit 1; fi
  sleep 0.1
done
echo "resolve: $out"
case "$out" in *"ok=1 "*"device=cuda:0"*) ;; *) echo "unexpected answer"; exit 1 ;; esac
# The request at the DRA bounds (1,024 devices x 64 attributes, none matching) is answered.
out=$("$load_gen" --mode=once --method=resolve --request=dra_bound --target="unix:$dir/d.sock")
echo "dra_bound: $out"
case "$out" in *"ok=1 "*"device=cuda:0"*) ;; *) echo "the DRA-bound request was not answered"; exit 1 ;; esac
out=$("$load_gen" --mode=once --method=check --target="unix:$dir/d.sock")
echo "check: $out"
case "$out" in *"ok=1 bytes=2 "*) ;; *) echo "unexpected Check answer (want SERVING, 2 bytes)"; exit 1 ;; esac
out=$("$load_gen" --mode=load --method=resolve --callers=2 --seconds=0.2 --target="unix:$dir/d.sock")
echo "load: $out"
case "$out" in *" errors=0"*) ;; *) echo "load had errors"; exit 1 ;; esac
if "$load_gen" --mode=once --method=nope --target="unix:$dir/d.sock" 2>"$dir/err"; then exit 1; fi
grep -q -- "--method=nope: accepted: check, resolve, list, inventory" "$dir/err"
