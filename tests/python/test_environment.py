"""The Python capture equals libdevplace's ResolveOptions::FromEnvironment(), asked of the C++ side
itself (devplace_capture_dump) for a set of environments and fake /dev trees."""

import json
import os
import unittest
from unittest import mock

from google.protobuf import json_format

import devplace
from devplace_testing import CAPTURE_DUMP, TempDir, clean_env, run

# Fake /dev trees: accelerator nodes of every row, and look-alikes that are not job device nodes.
DEV_TREES = {
    "empty": [],
    "nvidia": ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvidia-caps/nvidia-cap1"],
    "everything": ["nvidia7", "nvidia12", "nvidiactl", "dri/renderD128", "dri/renderD129", "dri/card0", "dri/by-path/",
                   "kfd", "neuron0", "neuron1", "vfio/vfio", "vfio/12", "vfio/3", "accel0", "accel/accel1",
                   "accel/other", "davinci0", "davinci_manager", "davinci7", "cambricon_dev0", "cambricon_ctl",
                   "mtgpu.0", "mtgpu", "hl0", "nvidia3/"],
    "directories_only": ["nvidia0/", "dri/renderD128/", "neuron0/"],
}

# Environments: placement variables (set, set-but-empty, odd LOCAL_RANK / WORLD_SIZE values) and others.
ENVIRONMENTS = [
    {},
    {"CUDA_VISIBLE_DEVICES": "1,0", "LOCAL_RANK": "1", "WORLD_SIZE": "2"},
    {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": ""},
    {"LOCAL_RANK": " 3 ", "WORLD_SIZE": "+4"},
    {"LOCAL_RANK": "-1", "WORLD_SIZE": "0"},
    {"LOCAL_RANK": "abc", "WORLD_SIZE": "1.0"},
    {"LOCAL_RANK": "2147483647", "WORLD_SIZE": "2147483648"},
    {"LOCAL_RANK": "99999999999999999999", "WORLD_SIZE": "\u0663"},  # past int64; an Arabic-Indic digit
    {"LOCAL_RANK": "1_0", "WORLD_SIZE": "\t2\n"},
    {"LOCAL_RANK": "", "WORLD_SIZE": ""},
    {"ZE_AFFINITY_MASK": "0.1", "ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE", "ASCEND_RT_VISIBLE_DEVICES": "1,2",
     "NEURON_RT_VISIBLE_CORES": "0-3", "HABANA_VISIBLE_MODULES": "1", "TPU_VISIBLE_CHIPS": "0",
     "ACCELERATE_TORCH_DEVICE": "cuda:1", "USE_TORCH_XLA": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    {"MUSA_VISIBLE_DEVICES": "4,5", "MLU_VISIBLE_DEVICES": "1", "CN_VISIBLE_DEVICES": "0",
     "NEURON_RT_NUM_CORES": "2", "ROCR_VISIBLE_DEVICES": "GPU-1", "NOT_A_PLACEMENT_VARIABLE": "x",
     "CUDA_VISIBLE_DEVICES_EXTRA": "1"},
    {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1", "HABANA_VISIBLE_DEVICES": "0,1", "HABANA_VISIBLE_MODULES": ""},
    # Near misses of placement variables (E-TYPO): more than the capture's bound of 8.
    {"CUDA_VISIBLE_DEVICE": "0", "cuda_visible_devices": "1", "LOCAL_RANKS": "1", "WORLDSIZE": "2",
     "ROCR_VISIBLE_DEVICE": "", "HIP_VISIBLE_DEVICE": "0", "TPU_VISIBLE_CHIP": "0", "USE_TORCH_XLAA": "1",
     "ZE_AFFINITY_MASKS": "0", "ACCELERATE_USE_GPU": "1", "CUDA_VISIBLE_DEVICES": "1"},
]

def make_tree(root, nodes):
    os.makedirs(root, exist_ok=True)
    for node in nodes:
        path = os.path.join(root, node)
        if node.endswith("/"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()


class CaptureMatchesLibdevplace(unittest.TestCase):
    def test_variable_list_is_libdevplaces(self):
        listed = run([CAPTURE_DUMP, "--variables"])
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(list(devplace.PLACEMENT_ENVIRONMENT_VARIABLES), listed.stdout.split())
        self.assertIn("CUDA_VISIBLE_DEVICES", devplace.PLACEMENT_ENVIRONMENT_VARIABLES)
        # Read by the daemon beyond the mask variables (E-ORDER for Level Zero, H-HPU).
        self.assertIn("ZE_ENABLE_PCI_ID_DEVICE_ORDER", devplace.PLACEMENT_ENVIRONMENT_VARIABLES)
        self.assertIn("HABANA_VISIBLE_DEVICES", devplace.PLACEMENT_ENVIRONMENT_VARIABLES)

    def test_same_request_for_every_environment_and_dev_tree(self):
        with TempDir() as dir:
            for tree, nodes in DEV_TREES.items():
                make_tree(dir.file(tree), nodes)
            for tree in list(DEV_TREES) + ["missing"]:
                for variables in ENVIRONMENTS:
                    with self.subTest(tree=tree, env=variables):
                        env = clean_env(variables)
                        cxx = run([CAPTURE_DUMP, dir.file(tree)], env=env)
                        self.assertEqual(cxx.returncode, 0, cxx.stderr)
                        py = devplace.from_environment(dir.file(tree), environ=env)
                        self.assertEqual(json_format.MessageToDict(py), json.loads(cxx.stdout))

    def test_values_of_the_capture(self):
        with TempDir() as dir:
            make_tree(dir.file("dev"), DEV_TREES["everything"])
            self.assertEqual(devplace.job_device_nodes(dir.file("dev")), [
                "/dev/accel/accel1", "/dev/accel0", "/dev/cambricon_dev0", "/dev/davinci0", "/dev/davinci7",
                "/dev/dri/card0", "/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/mtgpu.0", "/dev/neuron0",
                "/dev/neuron1", "/dev/nvidia12", "/dev/nvidia7", "/dev/vfio/12", "/dev/vfio/3"])
            request = devplace.from_environment(dir.file("missing"), environ={
                "LOCAL_RANK": " 3 ", "WORLD_SIZE": "0", "CUDA_VISIBLE_DEVICES": "", "HOME": "/root"})
            self.assertEqual(request.local_rank, 3)
            self.assertFalse(request.HasField("world_size"))
            self.assertEqual(dict(request.env), {"WORLD_SIZE": "0", "CUDA_VISIBLE_DEVICES": ""})
            self.assertTrue(request.HasField("job_devices"))  # present and empty: sees no accelerator
            self.assertEqual(list(request.job_devices.device_nodes), [])
            request = devplace.from_environment(dir.file("missing"), environ={
                "ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1", "HABANA_VISIBLE_DEVICES": "3"})
            self.assertEqual(dict(request.env), {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1", "HABANA_VISIBLE_DEVICES": "3"})

    def test_near_misses_are_bounded_and_sent_without_values(self):
        typos = ["CUDA_VISIBLE_DEVICE", "cuda_visible_devices", "LOCAL_RANKS", "WORLDSIZE", "ROCR_VISIBLE_DEVICE",
                 "HIP_VISIBLE_DEVICE", "TPU_VISIBLE_CHIP", "USE_TORCH_XLAA", "ZE_AFFINITY_MASKS", "ACCELERATE_USE_GPU"]
        env = {name: "secret" for name in typos}
        env.update({"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin", "LOCAL_WORLD_SIZE": "2"})
        expected = {name: "" for name in sorted(typos)[:8]}
        expected["CUDA_VISIBLE_DEVICES"] = "1"
        self.assertEqual(devplace.MAX_CAPTURED_NEAR_MISSES, 8)
        self.assertEqual(dict(devplace.from_environment("/nonexistent", environ=env).env), expected)
        self.assertEqual(dict(devplace.for_job(env).env), expected)
        self.assertTrue(devplace.possible_placement_typo("LOCAL_RANKS"))
        self.assertFalse(devplace.possible_placement_typo("LOCAL_RANK"))
        self.assertFalse(devplace.possible_placement_typo("CUDA_VISIBLE_DEVIC\u00c9"))

    def test_for_job_reads_nothing_of_this_process(self):
        request = devplace.for_job({"LOCAL_RANK": "2", "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "3"})
        self.assertEqual(request.local_rank, 2)
        self.assertEqual(dict(request.env), {"CUDA_VISIBLE_DEVICES": "3"})
        self.assertFalse(request.HasField("job_devices"))  # unknown
        self.assertEqual(list(devplace.for_job({}, []).job_devices.device_nodes), [])
        self.assertTrue(devplace.for_job({}, []).HasField("job_devices"))


class RequestFromArguments(unittest.TestCase):
    """make_request: the arguments win over the capture, as `devplace resolve`'s flags do."""

    def test_overrides(self):
        env = {"LOCAL_RANK": "1", "WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "0,1"}
        with mock.patch.dict(os.environ, env):
            captured = devplace.make_request("training")
            self.assertEqual((captured.local_rank, captured.world_size), (1, 2))
            self.assertEqual(captured.env["CUDA_VISIBLE_DEVICES"], "0,1")
            r = devplace.make_request("training", local_rank=0, env={"CUDA_VISIBLE_DEVICES": None, "WORLD_SIZE": "x"},
                                      job_device_nodes=["/dev/nvidia1"], runtime_backends=["cuda"])
            self.assertEqual(r.local_rank, 0)
            self.assertFalse(r.HasField("world_size"))  # env WORLD_SIZE replaces the captured world_size
            self.assertEqual(dict(r.env), {"WORLD_SIZE": "x"})
            self.assertEqual(list(r.job_devices.device_nodes), ["/dev/nvidia1"])
            self.assertEqual(list(r.runtime_backends), ["cuda"])
            self.assertFalse(devplace.make_request("training", job_device_nodes=None).HasField("job_devices"))
            none = devplace.make_request("training", from_environment=False)
            self.assertEqual(dict(none.env), {})
            self.assertFalse(none.HasField("local_rank") or none.HasField("job_devices"))

    def test_device_map_forms(self):
        self.assertEqual(devplace.make_request("inference", 1, from_environment=False).device_map, "1")
        self.assertEqual(devplace.make_request("inference", -1, from_environment=False).device_map, "-1")
        self.assertEqual(devplace.make_request("inference", None, from_environment=False).device_map, "")
        self.assertEqual(devplace.make_request("INFERENCE", "auto", convention="Pipeline",
                                               from_environment=False).convention, 4)
        self.assertEqual(devplace.make_request("inference", model_size_bytes=10**9,
                                               from_environment=False).model_size_bytes, 10**9)


if __name__ == "__main__":
    unittest.main()
