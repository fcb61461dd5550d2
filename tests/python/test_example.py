"""client/python/examples/pod_entrypoint.py against the real devplaced: it prints the device and
what it would pass to from_pretrained (no transformers here), the same device as `devplace
resolve` in the same environment; a container without GPU nodes gets cpu and the warning."""

import importlib.util
import os
import re
import shlex
import unittest

from devplace_testing import (CLI, PYTHON, SOURCE_DIR, TempDir, can_unshare, clean_env, h100_with_nvml, run,
                              with_dev_view)

EXAMPLE = os.path.join(SOURCE_DIR, "client", "python", "examples", "pod_entrypoint.py")


def read(path):
    with open(path) as f:
        return f.read()


@unittest.skipIf(importlib.util.find_spec("transformers") is not None,
                 "transformers is installed: the example would download a model")
class PodEntrypoint(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = h100_with_nvml()  # free memory known: max_memory budgets
        cls.daemon.wait_serving()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def run_both(self, nodes, variables=None):
        """(example's result, CLI's device) in one process environment with /dev holding `nodes`
        (this machine's /dev when no mount namespace may be made)."""
        with TempDir() as dir:
            ex, cl = dir.file("example"), dir.file("cli")
            script = (f"{shlex.quote(PYTHON)} {shlex.quote(EXAMPLE)} > {ex}.out 2> {ex}.err; echo $? > {ex}.rc\n"
                      f"{shlex.quote(CLI)} resolve --workload=inference --device_map=auto --quiet > {cl}.out 2>&1 || true")
            argv = with_dev_view(script, nodes, dir.path) if can_unshare() else ["/bin/sh", "-c", script]
            env = clean_env({"DEVPLACE_ADDRESS": self.daemon.unix_target, **(variables or {})})
            ran = run(argv, env=env, timeout=60)
            self.assertEqual(ran.returncode, 0, ran.stderr)
            return int(read(ex + ".rc")), read(ex + ".out"), read(ex + ".err"), read(cl + ".out").strip()

    def test_gpus_visible(self):
        rc, out, err, cli_device = self.run_both(["nvidia0", "nvidia1", "nvidiactl"])
        self.assertEqual(rc, 0, err)
        device = re.search(r"^device=(.*)$", out, re.M).group(1)
        self.assertEqual(device, cli_device)
        if can_unshare():
            self.assertEqual(device, "cuda:0")
            self.assertIn("would call: AutoModelForCausalLM.from_pretrained('distilgpt2', **{'device_map': 'auto', "
                          "'max_memory': {0: ", out)
            self.assertIn(", 1: ", out)

    def test_container_without_gpu_nodes(self):
        rc, out, err, cli_device = self.run_both([], {"CUDA_VISIBLE_DEVICES": "0"})
        self.assertEqual(rc, 0, err)
        device = re.search(r"^device=(.*)$", out, re.M).group(1)
        self.assertEqual(device, cli_device)
        if can_unshare():
            self.assertEqual(device, "cpu")
            self.assertIn("{'device_map': 'cpu'}", out)
            self.assertIn("pod_entrypoint: warning: ", err)

    def test_unreachable_daemon(self):
        result = run([PYTHON, EXAMPLE], env=clean_env({"DEVPLACE_ADDRESS": "127.0.0.1:1"}))
        self.assertEqual(result.returncode, 1)
        self.assertIn("pod_entrypoint: devplace: UNAVAILABLE: ", result.stderr)
        self.assertIn("devplace target 127.0.0.1:1 (from DEVPLACE_ADDRESS)", result.stderr)


if __name__ == "__main__":
    unittest.main()
