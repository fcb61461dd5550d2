"""Every RPC of the real devplaced through the Python client, over the unix socket and TCP, and
watch cancellation (nvidia-2x-h100 fixture host)."""

import os
import signal
import threading
import time
import unittest
from unittest import mock

import grpc

import devplace
from devplace.v1 import devplace_pb2
from devplace_testing import Daemon, fixture, h100_with_nvml


class EveryRpc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = h100_with_nvml(["--refresh_interval=0s"])
        cls.daemon.wait_serving()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def targets(self):
        return [self.daemon.unix_target, self.daemon.tcp_target]

    def test_health_backends_inventory(self):
        for target in self.targets():
            with self.subTest(target=target), devplace.Client(target) as client:
                self.assertIs(client.health(), True)
                self.assertIs(client.health("devplace.v1.DevicePlacement"), True)
                backends = client.backends()
                self.assertEqual(len(backends), 12)  # 12 rows: SDAA is the 12th (docs/SEMANTICS.md)
                self.assertEqual(backends[1].name, "cuda/nvidia")
                self.assertEqual(backends[1].device_type, "cuda")
                inventory = client.inventory()
                self.assertIsInstance(inventory, devplace_pb2.Inventory)
                self.assertEqual(inventory.backends[1].row, devplace_pb2.ROW_CUDA_NVIDIA)
                self.assertEqual([d.pci_bus_id for d in inventory.backends[1].devices],
                                 ["0000:18:00.0", "0000:9a:00.0"])
                self.assertEqual(inventory.revision, 1)

    def test_resolve_in_the_jobs_numbering(self):
        for target in self.targets():
            with self.subTest(target=target), devplace.Client(target) as client:
                answer = client.resolve("training", from_environment=False, local_rank=1, world_size=2,
                                        env={"CUDA_VISIBLE_DEVICES": "1,0"})
                self.assertEqual(answer.device, "cuda:1")
                self.assertEqual(str(answer), "cuda:1")
                self.assertEqual(answer.devices, ["cuda:1"])
                self.assertEqual(answer.placed[0].pci_bus_id, "0000:18:00.0")  # job's cuda:1 is host GPU 0
                self.assertEqual(answer.backend, "ROW_CUDA_NVIDIA")
                self.assertEqual(answer.package, "torch")
                self.assertEqual(answer.inventory_revision, 1)
                self.assertEqual(answer.inventory_epoch, client.inventory().epoch)
                self.assertTrue(any(step.startswith("T-DIST") for step in answer.explanation), answer.explanation)

    def test_max_memory_in_accelerates_format(self):
        with devplace.Client(self.daemon.unix_target) as client:
            answer = client.resolve("inference", "auto", from_environment=False)
        self.assertEqual(answer.device, "cuda:0")
        self.assertEqual(answer.devices, ["cuda:0", "cuda:1", "cpu"])
        self.assertEqual(list(answer.max_memory), [0, 1, "cpu"])  # GPU indices are ints, as Accelerate wants
        raw = answer.response.max_memory
        self.assertEqual(answer.max_memory, {0: raw["0"], 1: raw["1"], "cpu": raw["cpu"]})
        self.assertTrue(all(isinstance(v, int) and v > 0 for v in answer.max_memory.values()))
        # Two GPUs: each one's free memory (from the fake NVML).
        with devplace.Client(self.daemon.unix_target) as client:
            gpus = client.inventory().backends[1].devices
        self.assertEqual(answer.max_memory[1], gpus[1].memory_free_bytes)

    def test_refresh_needs_the_socket(self):
        with devplace.Client(self.daemon.unix_target) as client:
            before = client.inventory()
            refreshed = client.refresh()  # root over the unix socket may re-probe
            self.assertEqual(refreshed.revision, before.revision)  # nothing changed on the host
            self.assertEqual(len(refreshed.backends[1].devices), 2)
        with devplace.Client(self.daemon.tcp_target) as client:
            with self.assertRaises(devplace.PermissionDeniedError) as raised:
                client.refresh()
            self.assertEqual(raised.exception.code, grpc.StatusCode.PERMISSION_DENIED)

    def test_one_liner_uses_devplace_address(self):
        with mock.patch.dict(os.environ, {"DEVPLACE_ADDRESS": self.daemon.unix_target}):
            device = devplace.resolve_device("inference", device_map="cuda:1", from_environment=False)
        self.assertEqual(device, "cuda:1")

    def test_watch_first_snapshot_then_cancel_from_another_thread(self):
        with devplace.Client(self.daemon.tcp_target) as client:
            revision = client.inventory().revision
            watch = client.watch()
            first = next(watch)
            self.assertEqual(first.revision, revision)
            received = []
            ended = threading.Event()

            def consume():
                for inventory in watch:  # blocks: no new revision comes
                    received.append(inventory)
                ended.set()

            consumer = threading.Thread(target=consume, daemon=True)
            consumer.start()
            time.sleep(0.2)
            self.assertFalse(ended.is_set())  # still waiting for a revision
            watch.cancel()
            self.assertTrue(ended.wait(10), "the watch did not end after cancel()")
            self.assertEqual(received, [])
            self.assertTrue(watch.cancelled)
            self.assertRaises(StopIteration, next, watch)
            watch.cancel()  # idempotent

    def test_watch_with_block_cancels_on_exit(self):
        with devplace.Client(self.daemon.unix_target) as client:
            with client.watch(known_revision=1) as watch:  # no known_epoch: the snapshot still comes first
                self.assertEqual(next(watch).revision, 1)
            self.assertTrue(watch.cancelled)
            self.assertRaises(StopIteration, next, watch)


class WatchSeesChangesAndShutdown(unittest.TestCase):
    def test_new_revision_then_daemon_shutdown_aborts(self):
        import shutil
        import tempfile
        host = tempfile.mkdtemp(prefix="devplace-pyhost-", dir="/tmp")
        try:
            shutil.copytree(fixture("nvidia-2x-h100"), host, symlinks=True, dirs_exist_ok=True)
            os.remove(os.path.join(host, "dev", "nvidia1"))
            with Daemon(host, ["--refresh_interval=0s"]) as daemon:
                daemon.wait_serving()
                with devplace.Client(daemon.unix_target) as client:
                    watch = client.watch()
                    first = next(watch)
                    self.assertFalse(first.backends[1].devices[1].usable)  # its /dev node is missing
                    open(os.path.join(host, "dev", "nvidia1"), "w").close()
                    daemon.process.send_signal(signal.SIGHUP)  # re-probe
                    second = next(watch)
                    self.assertEqual(second.revision, first.revision + 1)
                    self.assertTrue(second.backends[1].devices[1].usable)
                    daemon.process.send_signal(signal.SIGTERM)
                    with self.assertRaises((devplace.AbortedError, devplace.UnavailableError)) as raised:
                        next(watch)
                    self.assertIn(raised.exception.code, (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE))
                    self.assertEqual(daemon.stop(), 0)
        finally:
            shutil.rmtree(host, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
