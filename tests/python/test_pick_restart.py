"""devplace.pick(wait=...) across a daemon restart, against the real devplaced on nvidia-2x-h100 with
the fake NVML: a waiting pick whose daemon is stopped (SIGTERM, as a package upgrade's restart) and
started again in the same directory comes back by itself and keeps its place in the queue; a waiter
id presented by another user earns that user no earlier place. (The CLI's `devplace run --wait`
and raw gRPC callers: tests/integration/waiter_restart_test.cc.)"""

import json
import os
import re
import subprocess
import time
import unittest
import urllib.request

import grpc

import devplace
from devplace.v1 import devplace_pb2_grpc
from devplace_testing import PYTHON, TempDir, clean_env, h100_with_nvml

# A job that waits for a GPU with devplace.pick(wait=120) (its lease its own), prints what it got as
# JSON, then waits for a line on stdin before exiting. argv: the address.
JOB = """
import json, os, sys
import devplace
p = devplace.pick(job=devplace.for_job({}), address=sys.argv[1], wait=120, holder="process")
print(json.dumps({"cvd": os.environ["CUDA_VISIBLE_DEVICES"], "lease_id": p.lease_id}), flush=True)
sys.stdin.readline()
"""

# Another user's waiting pick that presents a waiter id (argv[2]): prints what it got and the waiter
# id it was sent (grpcio hands a unary call's initial metadata over with its answer).
PRESENTS_AN_ID = """
import json, sys
import grpc, devplace
from devplace.v1 import devplace_pb2_grpc
request = devplace.make_pick_request(job=devplace.for_job({}), wait=120, ttl=600)
request.waiter_id = sys.argv[2]
with grpc.insecure_channel(sys.argv[1]) as channel:
    answer, call = devplace_pb2_grpc.DevicePlacementStub(channel).PickDevices.with_call(request, timeout=150)
print(json.dumps({"cvd": answer.env["CUDA_VISIBLE_DEVICES"], "lease_id": answer.lease.lease_id,
                  "waiter_id": dict(call.initial_metadata()).get("devplace-waiter-id", "")}), flush=True)
sys.stdin.readline()
"""

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


class PickRestart(unittest.TestCase):
    def start_job(self, script, *args, as_nobody=False):
        return subprocess.Popen((AS_NOBODY if as_nobody else []) + [PYTHON, "-c", script, *args],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env({"PYTHONPATH": os.environ["PYTHONPATH"]}))

    def picks_waiting(self, daemon, n):
        """Waits until devplace_picks_waiting shows ``n`` (placeholders of a restart included)."""
        url = re.search(r"event=metrics_listening url=(\S+)", daemon.log())
        self.assertIsNotNone(url, daemon.log())
        deadline = time.monotonic() + 60  # a guard, not a target
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url.group(1), timeout=10) as page:
                if f"\ndevplace_picks_waiting {n}\n" in page.read().decode():
                    return
            time.sleep(0.05)
        self.fail(f"never {n} picks waiting; log:\n" + daemon.log())

    def wait_log_count(self, daemon, needle, n):
        deadline = time.monotonic() + 60
        while daemon.log().count(needle) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(daemon.log().count(needle), n, daemon.log())

    def test_a_waiting_pick_comes_back_after_a_restart_and_another_uid_earns_no_earlier_place(self):
        nobody = os.getuid() == 0 and subprocess.run(
            AS_NOBODY + [PYTHON, "-c", "import devplace"], capture_output=True,
            env=clean_env({"PYTHONPATH": os.environ["PYTHONPATH"]})).returncode == 0
        with TempDir() as tmp:
            os.chmod(tmp.path, 0o755)  # the socket's directory, for nobody
            flags = ["--metrics_listen=127.0.0.1:0", "--waiter_restart_grace=5m"]
            daemon = h100_with_nvml(flags, dir=tmp.path)
            try:
                daemon.wait_serving()
                daemon.wait_log("event=metrics_listening", 10)
                target = daemon.unix_target
                with devplace.Client(target) as client:  # both GPUs held, by TTL leases of this process
                    held = [client.pick_request(devplace.make_pick_request(job=devplace.for_job({}), ttl=600))
                            for _ in range(2)]
                # W (this process, raw gRPC) waits first, then J (a job's devplace.pick(wait=120)).
                channel = grpc.insecure_channel(target)
                stub = devplace_pb2_grpc.DevicePlacementStub(channel)
                w_request = devplace.make_pick_request(job=devplace.for_job({}), wait=120, ttl=600)
                w = stub.PickDevices.future(w_request, timeout=150)
                self.picks_waiting(daemon, 1)
                job = self.start_job(JOB, target)
                self.picks_waiting(daemon, 2)

                daemon.stop()
                self.assertEqual(daemon.process.returncode, 0, daemon.log())
                with self.assertRaises(grpc.RpcError) as gone:
                    w.result()
                self.assertEqual(gone.exception.code(), grpc.StatusCode.UNAVAILABLE)
                w_id = dict(w.initial_metadata()).get("devplace-waiter-id", "")  # sent when it queued
                self.assertRegex(w_id, "^[0-9a-f]{32}$")
                daemon.close()
                daemon = h100_with_nvml(flags, dir=tmp.path)
                daemon.wait_serving()
                daemon.wait_log("event=metrics_listening", 10)
                self.assertIn("waiters=2", daemon.log())
                self.wait_log_count(daemon, "action=waiter_returned", 1)  # J, by itself
                # N: nobody, presenting W's id, while W's place is still kept for W.
                stranger = self.start_job(PRESENTS_AN_ID, target, w_id, as_nobody=True) if nobody else None
                if stranger is not None:
                    self.picks_waiting(daemon, 3)  # W's place, J, and N queued behind J
                # W comes back: its place is before J's.
                w_request.waiter_id = w_id
                w_request.wait_ms = 100_000
                w = stub.PickDevices.future(w_request, timeout=130)
                self.wait_log_count(daemon, "action=waiter_returned", 2)
                with devplace.Client(target) as client:
                    client.release_lease(held[0].lease_id)
                    w_answer = w.result()
                    self.assertEqual(w_answer.env["CUDA_VISIBLE_DEVICES"], held[0].env["CUDA_VISIBLE_DEVICES"])
                    client.release_lease(held[1].lease_id)
                    got = json.loads(job.stdout.readline())  # J, before N
                    self.assertEqual(got["cvd"], held[1].env["CUDA_VISIBLE_DEVICES"])
                    if stranger is not None:
                        self.assertIsNone(stranger.poll())  # N still waits
                        client.release_lease(w_answer.lease.lease_id)
                        n_got = json.loads(stranger.stdout.readline())
                        self.assertEqual(n_got["cvd"], held[0].env["CUDA_VISIBLE_DEVICES"])
                        self.assertRegex(n_got["waiter_id"], "^[0-9a-f]{32}$")
                        self.assertNotEqual(n_got["waiter_id"], w_id)  # a place of its own, not W's
                        stranger.communicate("\n", timeout=30)
                        self.assertEqual(stranger.returncode, 0)
                        client.release_lease(n_got["lease_id"])
                    else:
                        client.release_lease(w_answer.lease.lease_id)
                job.communicate("\n", timeout=30)
                self.assertEqual(job.returncode, 0)
                channel.close()
            finally:
                daemon.close()


if __name__ == "__main__":
    unittest.main()
