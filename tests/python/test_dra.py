"""Rule P-DRA over the wire: the devices Kubernetes DRA allocated to the job, read from Device
Metadata fixtures (tests/fixtures/dra, one per driver, written from the Kubernetes documentation and
the drivers' published attribute names), are the job's devices. A claim naming the second of two
devices gives `<type>:0` on that host device from the real devplaced on the matching fixture host,
from the Python client and from the CLI alike; an allocated device the host does not have is a
warning (FAILED_PRECONDITION under strict). The Python reader and libdevplace's agree on every
fixture."""

import json
import os
import unittest

from google.protobuf import json_format

import devplace
from devplace_testing import CAPTURE_DUMP, CLI, FIXTURES, Daemon, TempDir, cli_answer, fixture, run

DRA = os.path.join(FIXTURES, "dra")
# fixture directory -> (host fixture, answer, its host device, what the explanation says of the claim)
CASES = {
    "nvidia": ("nvidia-2x-h100", "cuda:0", 1,
               "P-DRA claim gpu-claim request gpu driver gpu.nvidia.com device gpu-1 (pool node-a) is cuda/nvidia host "
               "device 1 (0000:9a:00.0), by uuid GPU-00000000-0000-4000-8000-000000000002"),
    "amd": ("amd-2x-mi210", "cuda:0", 1,
            "P-DRA claim gpu (from a ResourceClaimTemplate) request gpu driver gpu.amd.com device gpu-1-129 (pool "
            "node-b) is cuda/amd host device 1 (0000:83:00.0), by resource.kubernetes.io/pciBusID 0000:83:00.0"),
    "intel": ("xpu-2x-arc", "xpu:0", 2,
              "P-DRA claim xpu-claim request gpu driver gpu.intel.com device 0000-07-00-0-0x56a0 (pool node-c) is xpu "
              "host device 2 (0000:07:00.0), by its name's PCI address 0000:07:00.0"),
    "tpu": ("tpu-2x-v5e", "tpu:0", 1,
            "P-DRA claim tpu-claim request tpus driver tpu.google.com device accel1 (pool node-d) is tpu host device 1 "
            "(0000:00:05.0), by index 1 (chip id)"),
}


def cli_resolve(address, *flags):
    return run([CLI, "--json", f"--address={address}", "resolve", "--workload=training", "--no_environment"] + list(flags))


def python_resolve(address, directory, **kwargs):
    with devplace.Client(address) as client:
        return client.resolve("training", from_environment=False,
                              device_allocation=devplace.device_allocation(directory), **kwargs)


class Readers(unittest.TestCase):
    def test_python_and_libdevplace_read_every_fixture_alike(self):
        for name in sorted(os.listdir(DRA)):
            directory = os.path.join(DRA, name)
            if not os.path.isdir(directory):
                continue
            with self.subTest(fixture=name):
                dumped = run([CAPTURE_DUMP, "--dra", directory])
                self.assertEqual(dumped.returncode, 0, dumped.stderr)
                self.assertEqual(json.loads(dumped.stdout),
                                 json_format.MessageToDict(devplace.device_allocation(directory)))

    def test_the_nvidia_file_gives_its_v1alpha1_device(self):
        allocation = devplace.device_allocation(os.path.join(DRA, "nvidia"))
        self.assertEqual(list(allocation.problems), [])
        self.assertEqual(len(allocation.devices), 1)
        device = allocation.devices[0]
        self.assertEqual((device.claim, device.from_template, device.request, device.driver, device.pool, device.name),
                         ("gpu-claim", False, "gpu", "gpu.nvidia.com", "node-a", "gpu-1"))
        # The stream's first object is a newer apiVersion (skipped); the v1alpha1 one has every attribute.
        self.assertEqual(dict(device.attributes), {
            "architecture": "Hopper", "brand": "Nvidia", "cudaComputeCapability": "9.0.0",
            "cudaDriverVersion": "12.4.0", "driverVersion": "550.54.15", "index": "1", "minor": "1",
            "productName": "NVIDIA H100 80GB HBM3", "resource.kubernetes.io/pciBusID": "0000:9a:00.0",
            "resource.kubernetes.io/pcieRoot": "pci0000:98", "type": "gpu",
            "uuid": "GPU-00000000-0000-4000-8000-000000000002"})

    def test_problems_and_bad_directories(self):
        allocation = devplace.device_allocation(os.path.join(DRA, "nvidia-unknown"))
        self.assertEqual(list(allocation.problems), [
            "resourceclaims/late-claim/gpu/gpu.nvidia.com-metadata.json: empty (its driver writes it later, or not at all)"])
        with TempDir() as dir:
            dir.write("resourceclaims/c/r/x.example.com-metadata.json", '{"kind": "DeviceMetadata", ')
            dir.write("resourceclaims/c/s/y.example.com-metadata.json",
                      '{"kind": "DeviceMetadata", "apiVersion": "metadata.resource.k8s.io/v9"}')
            dir.write("resourceclaims/c/t/ignored.json", "{}")
            dir.write("resourceclaims/c/u/z.example.com-metadata.json", json.dumps({
                "kind": "DeviceMetadata", "apiVersion": "metadata.resource.k8s.io/v1alpha1",
                "requests": [{"name": "u", "devices": [{"driver": "z.example.com", "name": "d0"},
                                                       {"driver": "z.example.com", "pool": "p", "name": "d1",
                                                        "attributes": {"n": {"int": 3}, "b": {"bool": True},
                                                                       "q": {"quantity": "1Gi"}}}]}]}))
            self.assertEqual(list(devplace.device_allocation(dir.path).problems), [
                "resourceclaims/c/r/x.example.com-metadata.json: not a JSON stream of DeviceMetadata objects",
                "resourceclaims/c/s/y.example.com-metadata.json: no DeviceMetadata of apiVersion "
                "metadata.resource.k8s.io/v1alpha1 (found: DeviceMetadata metadata.resource.k8s.io/v9)",
                "resourceclaims/c/u/z.example.com-metadata.json: a device without a driver, pool or name; not sent"])
            sent = devplace.device_allocation(dir.path).devices
            self.assertEqual([(d.request, d.name, dict(d.attributes)) for d in sent],
                             [("u", "d1", {"b": "true", "n": "3"})])
            dumped = run([CAPTURE_DUMP, "--dra", dir.path])
            self.assertEqual(json.loads(dumped.stdout), json_format.MessageToDict(devplace.device_allocation(dir.path)))
            with self.assertRaises(devplace.InvalidArgumentError):
                devplace.device_allocation(dir.write("file", ""))
        with self.assertRaises(devplace.NotFoundError):
            devplace.device_allocation("/nonexistent/dra")
        if not os.path.exists(devplace.DRA_METADATA_DIR):
            self.assertIsNone(devplace.device_allocation())
            self.assertFalse(devplace.make_request("training").HasField("device_allocation"))


class OverTheWire(unittest.TestCase):
    def test_a_claim_naming_the_second_device_gives_it_as_device_zero(self):
        for name, (host, device, host_index, line) in CASES.items():
            with self.subTest(fixture=name), Daemon(fixture(host)) as daemon:
                daemon.wait_serving()
                directory = os.path.join(DRA, name)
                answer = python_resolve(daemon.unix_target, directory)
                self.assertEqual(answer.device, device)
                self.assertEqual([p.host_index for p in answer.response.placed], [host_index])
                self.assertIn(line, answer.explanation)
                self.assertEqual(answer.warnings, [])
                # Without the allocation, the job would get host device 0 (or, for xpu, the first usable one).
                with devplace.Client(daemon.unix_target) as client:
                    unclaimed = client.resolve("training", from_environment=False)
                self.assertNotEqual([p.host_index for p in unclaimed.response.placed], [host_index])
                # The CLI reads the same directory: the same answer.
                result = cli_resolve(daemon.unix_target, f"--dra_metadata_dir={directory}")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(json.loads(result.stdout),
                                 json_format.MessageToDict(answer.response, including_default_value_fields=True))

    def test_an_unknown_device_is_warned_and_an_error_under_strict(self):
        directory = os.path.join(DRA, "nvidia-unknown")
        unknown = ("DRA claim gpu-claim request gpu driver gpu.nvidia.com device gpu-7 (pool node-a) in " + directory +
                   " matches no device of this host's inventory: no single inventory device has uuid "
                   "GPU-00000000-0000-4000-8000-00000000dead, or minor 7; the answer cannot account for it (P-DRA)")
        empty = ("DRA device metadata in " + directory + " could not be used: resourceclaims/late-claim/gpu/"
                 "gpu.nvidia.com-metadata.json: empty (its driver writes it later, or not at all); the job's allocated "
                 "devices may be incomplete (P-DRA)")
        with Daemon(fixture("nvidia-2x-h100")) as daemon:
            daemon.wait_serving()
            answer = python_resolve(daemon.unix_target, directory)
            self.assertEqual(answer.device, "cuda:0")
            self.assertEqual([p.host_index for p in answer.response.placed], [1])
            self.assertEqual(answer.warnings, [empty, unknown])
            with self.assertRaises(devplace.FailedPreconditionError) as caught:
                python_resolve(daemon.unix_target, directory, strict=True)
            self.assertIn("strict: " + empty + "; " + unknown, caught.exception.message)
            result = cli_resolve(daemon.unix_target, f"--dra_metadata_dir={directory}", "--strict")
            self.assertEqual(cli_answer(result), {"error": "FAILED_PRECONDITION: " + caught.exception.message})
            # `none` sends no allocation: both GPUs are the job's again.
            result = cli_resolve(daemon.unix_target, f"--dra_metadata_dir={directory}", "--dra_metadata_dir=none")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual([p["hostIndex"] for p in json.loads(result.stdout)["placed"]], [0, 1])

    def test_bad_flags_are_usage_errors(self):
        with Daemon(fixture("nvidia-2x-h100")) as daemon:
            daemon.wait_serving()
            for value, message in (
                    ("/nonexistent/dra", "--dra_metadata_dir=/nonexistent/dra: no such directory"),
                    (os.path.join(DRA, "README.md"), f"--dra_metadata_dir={DRA}/README.md: not a directory")):
                with self.subTest(value=value):
                    result = cli_resolve(daemon.unix_target, f"--dra_metadata_dir={value}")
                    self.assertEqual(result.returncode, 2, result.stderr)
                    self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main()
