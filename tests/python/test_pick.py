"""devplace.pick() on a shared host, against the real devplaced on nvidia-2x-h100 with the fake NVML
(host device 0 holds 0.5 GB, device 1 40 GB): the least used GPU is leased to the job (its process
group when the caller leads it, else the caller, with a warning), os.environ selects exactly it, the
lease ends with its holder, and a second process meanwhile gets the other GPU; the request's
arguments are checked before anything is sent. (A launcher SIGKILLed while its workers run:
tests/integration/job_lease_test.cc.)"""

import json
import os
import subprocess
import time
import unittest
import warnings

import devplace
from devplace.v1 import devplace_pb2
from devplace_testing import PYTHON, Daemon, clean_env, fixture, h100_with_nvml

GPU0 = "GPU-00000000-0000-4000-8000-000000000001"  # 0000:18:00.0, the less used
GPU1 = "GPU-00000000-0000-4000-8000-000000000002"

# A job process: picks (its /dev says nothing here: for_job sends no device nodes), prints what it
# got as JSON, then waits for a line on stdin before exiting, so the test decides when its lease ends.
JOB = """
import json, os, sys, warnings
import devplace
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    p = devplace.pick(count=1, job=devplace.for_job({}), address=sys.argv[1], holder=sys.argv[2] or None)
print(json.dumps({"cvd": os.environ["CUDA_VISIBLE_DEVICES"], "device": p.device, "lease_pid": p.lease.pid,
                  "holder": devplace.v1.devplace_pb2.LeaseHolder.Name(p.lease.holder), "pid": os.getpid(),
                  "holder_warnings": [w for w in p.warnings if "process group" in w],
                  "issued": [str(w.message) for w in caught if issubclass(w.category, devplace.DevplaceWarning)]}),
      flush=True)
sys.stdin.readline()
"""


class Pick(unittest.TestCase):
    def start_job(self, target, holder="", start_new_session=False):
        """A job process; start_new_session makes it lead its process group (as an interactive shell does)."""
        return subprocess.Popen([PYTHON, "-c", JOB, target, holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=start_new_session,
                                env=clean_env({"PYTHONPATH": os.environ["PYTHONPATH"]}))

    def wait_no_leases(self, target):
        deadline = time.monotonic() + 10  # a guard: a lease ends a moment after its holder does
        while self.leases(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.leases(target), [])

    def leases(self, target):
        with devplace.Client(target) as client:
            return list(client.inventory().leases)

    def test_the_least_used_gpu_is_leased_to_the_process_and_released_when_it_exits(self):
        with h100_with_nvml() as daemon:
            daemon.wait_serving()
            first = self.start_job(daemon.unix_target)
            got = json.loads(first.stdout.readline())
            self.assertEqual(got["cvd"], GPU0)
            self.assertEqual(got["device"], "cuda:0")
            self.assertEqual(got["holder"], "LEASE_HOLDER_PROCESS")
            self.assertEqual(got["lease_pid"], got["pid"])
            # Meanwhile a second job gets the other GPU; a third finds none free.
            second = self.start_job(daemon.unix_target)
            self.assertEqual(json.loads(second.stdout.readline())["cvd"], GPU1)
            with self.assertRaises(devplace.FailedPreconditionError) as refused:
                with devplace.Client(daemon.unix_target) as client:
                    client.pick_request(devplace.make_pick_request(job=devplace.for_job({})))
            self.assertIn("0 free for this job now (2 it may use)", str(refused.exception))
            self.assertEqual(sorted(lease.pid for lease in self.leases(daemon.unix_target)),
                             sorted([got["pid"], second.pid]))
            for job in (first, second):
                job.communicate("\n", timeout=20)
                self.assertEqual(job.returncode, 0)
            self.wait_no_leases(daemon.unix_target)

    def test_the_lease_is_the_jobs_process_group_when_the_caller_leads_it_else_the_callers_with_a_warning(self):
        with h100_with_nvml() as daemon:
            daemon.wait_serving()
            leader = self.start_job(daemon.unix_target, start_new_session=True)
            got = json.loads(leader.stdout.readline())
            self.assertEqual(got["holder"], "LEASE_HOLDER_PROCESS_GROUP")
            self.assertEqual(got["lease_pid"], got["pid"])
            self.assertEqual(got["holder_warnings"], [])
            # In this test's process group (as under a batch script): its own lease, and it is told.
            member = self.start_job(daemon.unix_target)
            got = json.loads(member.stdout.readline())
            self.assertEqual(got["holder"], "LEASE_HOLDER_PROCESS")
            self.assertEqual(got["lease_pid"], got["pid"])
            self.assertEqual(len(got["holder_warnings"]), 1, got)
            warning = got["holder_warnings"][0]
            self.assertTrue(warning.startswith(f"the lease is held for this process only (pid {got['pid']}): it does "
                                               f"not lead its process group {os.getpgrp()}"), warning)
            self.assertIn("os.setpgid(0, 0) before pick()", warning)
            self.assertIn('holder="process" keeps this process\'s lease', warning)
            self.assertIn(warning, got["issued"])
            for job in (leader, member):
                job.communicate("\n", timeout=20)
                self.assertEqual(job.returncode, 0)
            self.wait_no_leases(daemon.unix_target)
            # Asked for explicitly, a group's leader gets the lease for itself alone, without a warning.
            alone = self.start_job(daemon.unix_target, holder="process", start_new_session=True)
            got = json.loads(alone.stdout.readline())
            self.assertEqual((got["holder"], got["holder_warnings"]), ("LEASE_HOLDER_PROCESS", []))
            alone.communicate("\n", timeout=20)
            self.wait_no_leases(daemon.unix_target)
            # A caller that does not lead its group and asks for the group's lease is refused.
            refused = self.start_job(daemon.unix_target, holder="process_group")
            _, err = refused.communicate("\n", timeout=20)
            self.assertNotEqual(refused.returncode, 0)
            self.assertIn("does not lead its process group", err)

    def test_pick_sets_os_environ_and_a_ttl_lease_over_tcp_is_released_by_id(self):
        with h100_with_nvml() as daemon:
            daemon.wait_serving()
            saved = dict(os.environ)
            try:
                os.environ["HIP_VISIBLE_DEVICES"] = "0"  # not the row's variable: left alone
                picked = devplace.pick(job=devplace.for_job({}), address=daemon.tcp_target, ttl=60)
                self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], GPU0)
                self.assertEqual(str(picked), "cuda:0")
                self.assertEqual(picked.lease.holder, devplace_pb2.LEASE_HOLDER_TTL)
                self.assertTrue(any("picked" in line for line in picked.explanation))
                with devplace.Client(daemon.tcp_target) as client:
                    kept = client.keep_lease_alive(picked.lease_id, 120)
                    self.assertGreater(kept.expires_at.seconds, picked.lease.expires_at.seconds)
                    self.assertEqual(client.release_lease(picked.lease_id).lease_id, picked.lease_id)
                    with self.assertRaises(devplace.NotFoundError):
                        client.release_lease(picked.lease_id)
            finally:
                os.environ.clear()
                os.environ.update(saved)

    def test_a_lease_is_renewed_and_released_by_id_and_its_keep_alive_follows(self):
        with h100_with_nvml() as daemon:
            daemon.wait_serving()
            saved = dict(os.environ)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    picked = devplace.pick(job=devplace.for_job({}), address=daemon.tcp_target, ttl=3)
                    lease = devplace.Lease(picked.lease_id, address=daemon.tcp_target)
                    renewed = lease.renew(ttl=7200)
                    self.assertGreaterEqual(renewed.expires_at.seconds - picked.lease.created_at.seconds, 7190)
                    # pick()'s keep-alive renews with the new ttl (every third of it), not its own 3 s.
                    time.sleep(2.5)
                    with devplace.Client(daemon.tcp_target) as client:
                        (held,) = [l for l in client.inventory().leases if l.lease_id == picked.lease_id]
                    self.assertGreaterEqual(held.expires_at.seconds, renewed.expires_at.seconds)
                    self.assertEqual(lease.release().lease_id, picked.lease_id)
                    with self.assertRaises(devplace.NotFoundError):
                        lease.release()
                    with self.assertRaises(devplace.NotFoundError):
                        lease.renew()
                    time.sleep(1.5)  # the keep-alive thread ends without a word
                self.assertEqual([str(w.message) for w in caught if "kept alive" in str(w.message)], [])
                with self.assertRaisesRegex(devplace.InvalidArgumentError, "ttl: 0: want seconds from 1 to 86400"):
                    lease.renew(ttl=0)
                with self.assertRaisesRegex(devplace.InvalidArgumentError, "lease_id: ''"):
                    devplace.Lease("")
            finally:
                os.environ.clear()
                os.environ.update(saved)

    def test_the_answers_warnings_are_issued_once_as_devplace_warnings(self):
        # Without a vendor library the pick takes the GPUs as idle, and says so.
        with Daemon(fixture("nvidia-2x-h100")) as daemon:
            daemon.wait_serving()
            saved = dict(os.environ)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    picked = devplace.pick(job=devplace.for_job({}), address=daemon.unix_target)
                issued = [str(w.message) for w in caught if issubclass(w.category, devplace.DevplaceWarning)]
                self.assertTrue(picked.warnings)
                self.assertEqual(issued, list(picked.warnings))
                self.assertTrue(any("usage unknown" in w for w in issued), issued)
                self.assertEqual(caught[0].filename, __file__)  # attributed to the job's line
            finally:
                os.environ.clear()
                os.environ.update(saved)

    def test_arguments_are_checked_before_sending(self):
        request = devplace.make_pick_request(2, min_free="20G", allow_shared=True, row="cuda/nvidia", wait=1.5,
                                             job=devplace.for_job({}))
        self.assertEqual(request.count, 2)
        self.assertEqual(request.min_free_bytes, 20 << 30)
        self.assertEqual(request.row, devplace_pb2.ROW_CUDA_NVIDIA)
        self.assertEqual(request.wait_ms, 1500)
        self.assertEqual(devplace.make_pick_request(ttl=30, job=devplace.for_job({})).holder,
                         devplace_pb2.LEASE_HOLDER_TTL)
        for bad in ({"count": 0}, {"count": 65}, {"min_free": "lots"}, {"wait": 7200}, {"row": "gpu"}):
            with self.subTest(bad), self.assertRaises(devplace.InvalidArgumentError):
                devplace.make_pick_request(**bad, job=devplace.for_job({}))
        # Both spellings of a row are accepted; the error lists the documented ones (`devplace backends`).
        self.assertEqual(devplace.make_pick_request(row="cuda_amd", job=devplace.for_job({})).row,
                         devplace_pb2.ROW_CUDA_AMD)
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            devplace.make_pick_request(row="bogus", job=devplace.for_job({}))
        self.assertIn("row: 'bogus': want one of cuda/nvidia, cuda/amd, neuron, tpu, xpu, hpu, npu", str(raised.exception))
        self.assertNotIn("cuda_nvidia", str(raised.exception))
        # ttl is checked here, in the parameter's own terms: 0 is no time to live, as for devplace pick.
        self.assertEqual(devplace.make_pick_request(ttl=0, job=devplace.for_job({})).holder,
                         devplace_pb2.LEASE_HOLDER_UNSPECIFIED)
        for ttl in (0.1, 86401, -1, "60"):
            with self.subTest(ttl=ttl), self.assertRaises(devplace.InvalidArgumentError) as raised:
                devplace.make_pick_request(ttl=ttl, job=devplace.for_job({}))
            self.assertIn(f"ttl: {ttl!r}: want None or 0 (no time to live: the lease is held for the job, see "
                          "holder) or seconds from 1 to 86400", str(raised.exception))
            self.assertNotIn("ttl_ms", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
