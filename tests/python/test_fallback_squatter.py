"""The implicit TCP fallback cannot be impersonated. With no daemon socket to use, both clients fall
back to 127.0.0.1:7465; a devplaced started there by nobody (Debian's setpriv) is refused by the CLI
and by the Python client, naming its uid, while root's own devplaced on that port is used, and an
address named explicitly stays the caller's choice.

Port 7465 and the default socket directories must be this test's own: it reruns itself in a private
network and mount namespace (unshare; loopback brought up with ip, an empty tmpfs over each default
socket directory that exists, /run/devplace and /tmp/devplace-<uid>; never over /tmp or /run
themselves, which may hold the checkout). Exits 77 (skipped) without root, unshare, setpriv or ip."""

import os
import shutil
import subprocess
import sys
import time
import unittest

import devplace
from devplace_testing import CLI, DAEMON, clean_env, fixture

FALLBACK = "127.0.0.1:7465"


def start_daemon(as_nobody):
    """devplaced on the nvidia-2x-h100 fixture listening on 127.0.0.1:7465 only; serving when returned."""
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_nobody else []
    process = subprocess.Popen(prefix + [DAEMON, f"--listen={FALLBACK}", f"--host_root={fixture('nvidia-2x-h100')}",
                                         "--metrics_listen=", "--torch_probe_command=none", "--refresh_interval=0s"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("devplaced exited: " + process.stdout.read())
        probe = subprocess.run([CLI, "health", f"--address={FALLBACK}"], capture_output=True, text=True,
                               env=clean_env())
        if probe.returncode == 0:
            return process
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("devplaced did not serve on " + FALLBACK)


def stop(process):
    process.terminate()
    process.wait(20)
    process.stdout.close()


def resolve_cli(*flags):
    return subprocess.run([CLI, "resolve", "--workload=training", "--no_environment", *flags], capture_output=True,
                          text=True,
                          env=clean_env(), timeout=30)


class FallbackSquatter(unittest.TestCase):
    def test_squatter_as_nobody_is_refused_by_both_clients(self):
        squatter = start_daemon(as_nobody=True)
        try:
            # The CLI: before this rule it printed the squatter's answer and exited 0.
            r = resolve_cli()
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertEqual(r.stdout, "")
            self.assertIn(f"refusing {FALLBACK} (default; DEVPLACE_ADDRESS is not set): the listener on {FALLBACK} "
                          f"is owned by uid 65534, not root or you (uid {os.geteuid()}): refused as possibly an "
                          "impersonator", r.stderr)
            # The Python client refuses before any call.
            with self.assertRaises(devplace.FailedPreconditionError) as raised:
                devplace.Client()
            self.assertIn("is owned by uid 65534", raised.exception.message)
            # Named explicitly, the same server is the caller's choice.
            explicit = resolve_cli(f"--address={FALLBACK}")
            self.assertEqual(explicit.returncode, 0, explicit.stderr)
            self.assertEqual(explicit.stdout, "cuda:0\n")
            with devplace.Client(FALLBACK) as c:
                self.assertEqual(c.resolve("training", from_environment=False).device, "cuda:0")
        finally:
            stop(squatter)

    def test_roots_own_daemon_on_the_fallback_port_is_used(self):
        daemon = start_daemon(as_nobody=False)
        try:
            r = resolve_cli()
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "cuda:0\n")
            with devplace.Client() as c:
                self.assertEqual(c.target, FALLBACK)
                self.assertEqual(c.resolve("training", from_environment=False).device, "cuda:0")
        finally:
            stop(daemon)


def main():
    if os.environ.get("DEVPLACE_TEST_NAMESPACE") != "1":
        if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "setpriv", "ip")):
            print("skipped: needs root, unshare, setpriv and ip")
            return 77
        # The clients' default sockets (client/grpc_connection.cc DefaultTarget, _target.py); a
        # directory that does not exist holds no socket.
        hide = " && ".join(f'{{ [ ! -d {d} ] || mount -t tmpfs tmpfs {d}; }}'
                           for d in ("/run/devplace", f"/tmp/devplace-{os.geteuid()}"))
        script = f'ip link set lo up && {hide} && exec "$0" "$@"'
        env = dict(os.environ, DEVPLACE_TEST_NAMESPACE="1")
        env.pop("XDG_RUNTIME_DIR", None)
        return subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c", script,
                               sys.executable, os.path.abspath(__file__)], env=env).returncode
    os.environ.pop("XDG_RUNTIME_DIR", None)
    os.environ.pop("DEVPLACE_ADDRESS", None)
    program = unittest.main(exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
