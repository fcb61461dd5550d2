"""A process with a GPU mask and a job /dev view gets the same answer from the Python client and
from `devplace resolve` (the C++ client), both capturing that same process environment.

Each environment runs in a private mount namespace whose /dev holds only the listed nodes
(unshare(1), root); where that is not allowed, every environment runs with this machine's own
/dev instead (still the same view for both clients) and the checks of the expected devices that
depend on the view are skipped."""

import json
import os
import shlex
import sys
import unittest

from devplace_testing import (CLI, PYTHON, TempDir, can_unshare, clean_env, h100_with_nvml, python_answer_script, run,
                              with_dev_view)

BOTH = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"]

# name -> (placement variables, /dev nodes of the job)
ENVIRONMENTS = {
    "container_without_gpus": ({}, []),
    "mask_1": ({"CUDA_VISIBLE_DEVICES": "1"}, BOTH),
    "rank_1_of_2_mask_1_0": ({"CUDA_VISIBLE_DEVICES": "1,0", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}, BOTH),
    "only_nvidia1_mounted": ({}, ["nvidia1", "nvidiactl"]),
    "only_nvidia1_mounted_mask_1": ({"CUDA_VISIBLE_DEVICES": "1"}, ["nvidia1", "nvidiactl"]),
    "control_node_only": ({}, ["nvidiactl"]),
    "mask_set_but_empty": ({"CUDA_VISIBLE_DEVICES": ""}, BOTH),
    "accelerate_use_cpu": ({"ACCELERATE_USE_CPU": "true"}, BOTH),
    "accelerate_torch_device": ({"ACCELERATE_TORCH_DEVICE": "cuda:1"}, BOTH),
    "bad_local_rank": ({"LOCAL_RANK": "abc"}, BOTH),
    "rank_3_of_4_on_2_gpus": ({"LOCAL_RANK": "3", "WORLD_SIZE": "4"}, BOTH),
}

# (CLI flags after `resolve`, Python workload, Python keyword arguments)
REQUESTS = [
    (["--workload=inference", "--device_map=auto"], "inference", {"device_map": "auto"}),
    (["--workload=training"], "training", {}),
    (["--workload=training", "--convention=accelerate"], "training", {"convention": "accelerate"}),
    (["--workload=inference", "--convention=pipeline", "--device_map=0"], "inference",
     {"convention": "pipeline", "device_map": 0}),
    (["--workload=inference", "--device_map=cuda:1", "--strict"], "inference", {"device_map": "cuda:1", "strict": True}),
]

# Answers this fixture host (2 H100) must give, where the /dev view is the listed one.
EXPECTED = {
    ("container_without_gpus", 0): "cpu",
    ("container_without_gpus", 1): "cpu",
    ("mask_1", 0): "cuda:0",
    ("mask_1", 1): "cuda:0",
    ("rank_1_of_2_mask_1_0", 1): "cuda:1",
    ("rank_1_of_2_mask_1_0", 2): "cuda:1",
    ("control_node_only", 1): "cpu",
    ("mask_set_but_empty", 1): "cpu",
    ("accelerate_use_cpu", 2): "cpu",
    ("accelerate_torch_device", 2): "cuda:1",
    ("bad_local_rank", 1): "INVALID_ARGUMENT",
    ("rank_3_of_4_on_2_gpus", 2): "cuda:1",
}


def commands(address, out):
    """The shell commands: each request through the CLI, then all of them through one Python process."""
    lines = []
    for i, (flags, _, _) in enumerate(REQUESTS):
        argv = [CLI, "--json", f"--address={address}", "resolve"] + flags
        base = shlex.quote(os.path.join(out, f"cli-{i}"))
        lines.append(f"{' '.join(shlex.quote(a) for a in argv)} > {base}.out 2> {base}.err; echo $? > {base}.rc")
    requests = json.dumps([[workload, kwargs] for _, workload, kwargs in REQUESTS])
    lines.append(" ".join(shlex.quote(a) for a in [PYTHON, python_answer_script(), address, out, requests]))
    return "\n".join(lines)


def read(out, side, i):
    base = os.path.join(out, f"{side}-{i}")
    with open(base + ".rc") as rc, open(base + ".out") as stdout, open(base + ".err") as stderr:
        return int(rc.read()), stdout.read(), stderr.read()


class PythonAndCliAgree(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = h100_with_nvml()
        cls.daemon.wait_serving()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_same_answers_in_the_same_process_environment(self):
        isolated = can_unshare()
        compared = 0
        for name, (variables, nodes) in ENVIRONMENTS.items():
            with TempDir() as dir:
                out = dir.file("out")
                os.makedirs(out)
                script = commands(self.daemon.unix_target, out)
                argv = with_dev_view(script, nodes, dir.path) if isolated else ["/bin/sh", "-c", script]
                ran = run(argv, env=clean_env(variables), timeout=120)
                self.assertEqual(ran.returncode, 0, ran.stderr)
                for i, (flags, _, _) in enumerate(REQUESTS):
                    with self.subTest(environment=name, request=" ".join(flags)):
                        cli_rc, cli_out, cli_err = read(out, "cli", i)
                        py_rc, py_out, py_err = read(out, "py", i)
                        self.assertEqual(cli_rc, py_rc, (cli_err, py_err))
                        if cli_rc == 0:
                            cli_answer, py_answer = json.loads(cli_out), json.loads(py_out)
                            self.assertEqual(py_answer, cli_answer)
                            got = cli_answer["device"]
                        else:
                            prefix = "devplace: resolve: "
                            # INVALID_ARGUMENT (a bad value) exits 2 like a usage error, the rest 1.
                            self.assertEqual(cli_rc, 2 if cli_err.startswith(prefix + "INVALID_ARGUMENT: ") else 1,
                                             cli_err)
                            self.assertTrue(cli_err.startswith(prefix), cli_err)
                            # The same code and message: "CODE: message".
                            self.assertEqual(py_err.strip(), cli_err.strip()[len(prefix):])
                            got = py_err.split(":", 1)[0]
                        compared += 1
                        want = EXPECTED.get((name, i))
                        if want is not None and isolated:
                            self.assertEqual(got, want)
                        if isolated and name == "container_without_gpus" and i == 0:
                            self.assertTrue(any("/dev" in w for w in cli_answer["warnings"]), cli_answer["warnings"])
                        if isolated and name == "mask_1" and i == 0:
                            self.assertEqual(cli_answer["placed"][0]["hostIndex"], 1)  # the job's cuda:0 is host GPU 1
        self.assertEqual(compared, len(ENVIRONMENTS) * len(REQUESTS))
        if not isolated:
            print("note: no private mount namespace here (unshare): compared with this machine's /dev only, "
                  "expected devices not checked", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
