"""SEMANTICS.md section 11 cases over the wire: the real devplaced on fixture hosts, asked by the
Python client and by the C++ client (the `devplace` CLI, --no_environment), must give the same
answer (the whole response, or the same code and message) and the answer the rules say."""

import json
import os
import unittest
from unittest import mock

import devplace
from google.protobuf import json_format
from devplace_testing import FIXTURES, Daemon, clean_env, cli, cli_answer, fixture, h100_with_nvml

H100 = "nvidia-2x-h100"

# (case id, fixture host, Python keyword arguments of resolve(), expected device or error code).
# The fixture hosts have 2 devices per row; cases written for 4 or 8 are scaled down. The H100 host
# runs with the fake NVML (names, UUIDs, free memory), so max_memory budgets are filled.
CASES = [
    ("S01", H100, dict(workload="training"), "cuda:0"),
    ("S02", H100, dict(workload="training", convention="accelerate"), "cuda"),
    ("S03", H100, dict(workload="training", local_rank=1, world_size=2), "cuda:1"),
    ("S04", H100, dict(workload="training", local_rank=0, world_size=1, env={"CUDA_VISIBLE_DEVICES": "1"}), "cuda:0"),
    ("S05", H100, dict(workload="training", convention="accelerate", local_rank=3, world_size=4), "cuda:1"),
    ("S05_strict", H100, dict(workload="training", convention="accelerate", local_rank=3, world_size=4, strict=True),
     "FAILED_PRECONDITION"),
    ("S06", H100, dict(workload="training", use_cpu=True), "cpu"),
    ("S07_TA", H100, dict(workload="training", env={"ACCELERATE_USE_CPU": "true"}), "cuda:0"),
    ("S07_ACC", H100, dict(workload="training", convention="accelerate", env={"ACCELERATE_USE_CPU": "true"}), "cpu"),
    ("S09_TA", "xpu-2x-arc", dict(workload="training"), "xpu:0"),
    ("S09_ACC", "xpu-2x-arc", dict(workload="training", convention="accelerate"), "xpu"),
    ("S11", "npu-2x-910b", dict(workload="training", local_rank=1, world_size=2), "npu:1"),
    ("S12_TA", "npu-2x-910b", dict(workload="training"), "npu:0"),
    ("S12_ACC", "npu-2x-910b", dict(workload="training", convention="accelerate"), "npu"),
    ("S13", "tpu-2x-v5e", dict(workload="training", use_cpu=True, runtime_backends=["xla"]), "xla:0"),
    ("S14", "tpu-2x-v5e", dict(workload="training"), "tpu:0"),  # docs/SEMANTICS.md: TrainingArguments + torch-tpu
    ("S15", "cpu-only", dict(workload="training"), "cpu"),
    ("S16", "cpu-only", dict(workload="training", convention="accelerate", local_rank=1, world_size=2), "cpu"),
    ("S17_TA", H100, dict(workload="training", env={"ACCELERATE_TORCH_DEVICE": "cuda:1"}), "cuda:0"),
    ("S17_ACC", H100, dict(workload="training", convention="accelerate", env={"ACCELERATE_TORCH_DEVICE": "cuda:1"}),
     "cuda:1"),
    ("S18_TA", "neuron-2x-trn1", dict(workload="training"), "neuron:0"),
    ("S18_ACC", "neuron-2x-trn1", dict(workload="training", convention="accelerate"), "neuron"),
    ("S18_ACC_rank1", "neuron-2x-trn1", dict(workload="training", convention="accelerate", local_rank=1), "neuron:1"),
    ("S19", "hpu-2x-gaudi2", dict(workload="training"), "hpu:0"),
    ("S19_rank1", "hpu-2x-gaudi2", dict(workload="training", local_rank=1), "hpu:0"),
    ("S20", H100, dict(workload="training", env={"LOCAL_RANK": "abc"}), "INVALID_ARGUMENT"),
    ("S21", H100, dict(workload="training", convention="accelerate", env={"ACCELERATE_USE_CPU": "maybe"}),
     "INVALID_ARGUMENT"),
    ("S22", H100, dict(workload="inference"), "cpu"),
    ("S23", H100, dict(workload="inference", device_map="cuda:1"), "cuda:1"),
    ("S24", H100, dict(workload="inference", device_map="cuda:2"), "FAILED_PRECONDITION"),
    ("S25_1", H100, dict(workload="inference", device_map=1), "cuda:1"),
    ("S25_minus1", H100, dict(workload="inference", device_map=-1), "INVALID_ARGUMENT"),
    ("S26_CUDA", H100, dict(workload="inference", device_map="CUDA"), "INVALID_ARGUMENT"),
    ("S26_Auto", H100, dict(workload="inference", device_map="Auto"), "INVALID_ARGUMENT"),
    ("S26_disk", H100, dict(workload="inference", device_map="disk"), "INVALID_ARGUMENT"),
    ("S27", H100, dict(workload="inference", device_map="auto"), "cuda:0"),
    ("S28_sequential", H100, dict(workload="inference", device_map="sequential"), "cuda:0"),
    # Two GPUs: balanced_low_0 leaves GPU 0 only what the others cannot hold (I-AUTO-FIRST).
    ("S28_balanced_low_0", H100, dict(workload="inference", device_map="balanced_low_0"), "cuda:1"),
    ("S29_tpu", "tpu-2x-v5e", dict(workload="inference", device_map="auto"), "cpu"),
    ("S29_neuron", "neuron-2x-trn1", dict(workload="inference", device_map="auto"), "cpu"),
    ("S31", H100, dict(workload="inference", device_map="auto", env={"CUDA_VISIBLE_DEVICES": "1"}), "cuda:0"),
    ("S33", "neuron-2x-trn1", dict(workload="inference", device_map="neuron"), "neuron"),
    ("S34_empty", H100, dict(workload="inference", convention="pipeline"), "cuda:0"),
    ("S34_minus1", H100, dict(workload="inference", convention="pipeline", device_map=-1), "cpu"),
    ("S34_0", H100, dict(workload="inference", convention="pipeline", device_map=0), "cuda:0"),
    ("S35", "mlu-2x-mlu370", dict(workload="inference", convention="pipeline", device_map=1), "mlu:1"),
    ("S36", H100, dict(workload="inference", convention="pipeline", device_map="xpu:0"), "FAILED_PRECONDITION"),
    ("S37_leading_zero", H100, dict(workload="inference", device_map="cuda:01"), "INVALID_ARGUMENT"),
    ("S37_negative", H100, dict(workload="inference", device_map="cuda:-1"), "INVALID_ARGUMENT"),
    ("S37_space", H100, dict(workload="inference", device_map=" cuda"), "INVALID_ARGUMENT"),
    ("S37_two_colons", H100, dict(workload="inference", device_map="cuda:0:1"), "INVALID_ARGUMENT"),
    ("S38", H100, dict(workload="inference", device_map="cuda:99999999999"), "INVALID_ARGUMENT"),
    ("S39_hip", H100, dict(workload="inference", device_map="hip:0"), "INVALID_ARGUMENT"),
    ("S40", H100, dict(workload="training", env={"CUDA_VISIBLE_DEVICES": "0,-1,1"}), "cuda:0"),
    ("S41_repeat", H100, dict(workload="training", env={"CUDA_VISIBLE_DEVICES": "1,1"}), "cpu"),
    ("S41_empty", H100, dict(workload="training", env={"CUDA_VISIBLE_DEVICES": ""}), "cpu"),
    # NVML (fake) UUIDs: GPU-...0002 is host GPU 1 (9a:00.0); a unique prefix names it.
    ("S42", H100, dict(workload="training", env={"CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-4000-8000-000000000002"}),
     "cuda:0"),
    ("S43", "amd-2x-mi210", dict(workload="training", env={"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0,1"}),
     "INVALID_ARGUMENT"),
    ("S44", "amd-2x-mi210", dict(workload="training", local_rank=0, env={"ROCR_VISIBLE_DEVICES": "1"}), "cuda:0"),
    ("S45", "npu-2x-910b", dict(workload="training", env={"ASCEND_RT_VISIBLE_DEVICES": "1"}), "npu:0"),
    ("S46", H100, dict(workload="training", job_device_nodes=["/dev/nvidiactl"]), "cpu"),
    ("S46_container", H100, dict(workload="inference", device_map="auto", job_device_nodes=[]), "cpu"),
    ("S47", H100, dict(workload="training", runtime_backends=["cpu"]), "cpu"),
    ("S47_strict", H100, dict(workload="training", runtime_backends=["cpu"], strict=True), "FAILED_PRECONDITION"),
    ("S48", "musa-2x-s4000", dict(workload="training", local_rank=1, env={"MUSA_VISIBLE_DEVICES": "1,0"}), "musa:1"),
    # Version boundaries (section 10) through the transformers_version / accelerate_version overrides.
    ("V16_4.46.3", "hpu-2x-gaudi2", dict(workload="training", transformers_version="4.46.3"), "cpu"),
    ("V16_5.0.0", "hpu-2x-gaudi2", dict(workload="training", transformers_version="5.0.0"), "hpu:0"),
    # Boundaries from the release tags: pipeline's accelerator default is first tagged in v4.47.0 (v4.46.3 runs
    # on cpu), TrainingArguments' torch-tpu branch in v5.9.0.
    ("V19_4.46.3", H100, dict(workload="inference", convention="pipeline", runtime_backends=["cuda"],
                              transformers_version="4.46.3", accelerate_version="1.1.1"), "cpu"),
    ("V19_4.47.0", H100, dict(workload="inference", convention="pipeline", runtime_backends=["cuda"],
                              transformers_version="4.47.0", accelerate_version="1.1.1"), "cuda:0"),
    ("V17_5.8.1", "tpu-2x-v5e", dict(workload="training", runtime_backends=["tpu"], transformers_version="5.8.1"),
     "cpu"),
    ("V17_5.9.0", "tpu-2x-v5e", dict(workload="training", runtime_backends=["tpu"], transformers_version="5.9.0"),
     "tpu:0"),
    ("V04_0.34.2", "xpu-2x-arc", dict(workload="training", convention="accelerate", accelerate_version="0.34.2"),
     "xpu:0"),
    ("V04_1.0.0", "xpu-2x-arc", dict(workload="training", convention="accelerate", accelerate_version="1.0.0"), "xpu"),
    # I-CUDA-RANK: device_map "cuda" is the rank's own GPU from Transformers 5.0 (V-TF-CUDA-RANK).
    ("V24_4.57.0", H100, dict(workload="inference", device_map="cuda", local_rank=1, world_size=2,
                              transformers_version="4.57.0"), "cuda"),
    ("V24_5.0.0", H100, dict(workload="inference", device_map="cuda", local_rank=1, world_size=2,
                             transformers_version="5.0.0"), "cuda:1"),
    ("N22_minus1", H100, dict(workload="inference", device_map="cuda", env={"LOCAL_RANK": "-1"}), "INVALID_ARGUMENT"),
    # G-PLUGIN: a type only a plug-in registers, with the build told (the job's error) and not told.
    ("N23_told", H100, dict(workload="training", convention="accelerate", runtime_backends=["cuda"],
                            env={"ACCELERATE_TORCH_DEVICE": "npu"}), "FAILED_PRECONDITION"),
    ("N23_not_told", H100, dict(workload="training", convention="accelerate", env={"ACCELERATE_TORCH_DEVICE": "npu"}),
     "npu"),
    ("N25_told", "npu-2x-910b", dict(workload="inference", device_map="npu:1", runtime_backends=["cuda"]),
     "FAILED_PRECONDITION"),
    # V-SKEW: a release newer than the rules gets the newest rules and a warning; strict refuses it.
    ("VS01", H100, dict(workload="training", convention="accelerate", accelerate_version="1.16.0"), "cuda"),
    ("VS02", H100, dict(workload="training", transformers_version="6.0.0"), "cuda:0"),
    ("VS03", H100, dict(workload="training", convention="accelerate", accelerate_version="1.16.0", strict=True),
     "FAILED_PRECONDITION"),
]

# The releases each V case's answer must name (transformers_version, accelerate_version): the one
# asked for, and for the other library the newest, or Transformers 4.57.0 (the last 4.x line) when
# only an Accelerate below 1.1.0 is named.
ECHOED_VERSIONS = {
    "V16_4.46.3": ("4.46.3", "1.14.0"),
    "V19_4.46.3": ("4.46.3", "1.1.1"),
    "V19_4.47.0": ("4.47.0", "1.1.1"),
    "V17_5.8.1": ("5.8.1", "1.14.0"),
    "V17_5.9.0": ("5.9.0", "1.14.0"),
    "V16_5.0.0": ("5.0.0", "1.14.0"),
    "V04_0.34.2": ("4.57.0", "0.34.2"),
    "V04_1.0.0": ("4.57.0", "1.0.0"),
    "V24_4.57.0": ("4.57.0", "1.14.0"),
    "V24_5.0.0": ("5.0.0", "1.14.0"),
    "VS01": ("5.15.0", "1.14.0"),  # the rules applied, not the job's 1.16.0
    "VS02": ("5.15.0", "1.14.0"),
}


def cli_flags(kwargs):
    """`devplace resolve` flags for the same request (--no_environment: only what the flags say)."""
    flags = [f"--workload={kwargs['workload']}", "--no_environment"]
    for key, value in kwargs.items():
        if key == "workload":
            continue
        if key == "env":
            flags += [f"--env={k}={v}" for k, v in value.items()]
        elif key == "job_device_nodes":
            flags.append("--job_device_nodes=" + (",".join(value) if value else "none"))
        elif key == "runtime_backends":
            flags.append("--runtime_backends=" + ",".join(value))
        elif value is True:
            flags.append(f"--{key}")
        else:
            flags.append(f"--{key}={value}")
    return flags


class SemanticsOverTheWire(unittest.TestCase):
    maxDiff = None  # a difference between the two clients' answers is shown whole

    @classmethod
    def setUpClass(cls):
        cls.daemons = {}
        try:
            for host in sorted({case[1] for case in CASES}):
                cls.daemons[host] = h100_with_nvml() if host == H100 else Daemon(fixture(host))
            for daemon in cls.daemons.values():
                daemon.wait_serving()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for daemon in cls.daemons.values():
            daemon.close()

    def test_cases(self):
        for case_id, host, kwargs, want in CASES:
            with self.subTest(case=case_id, host=host):
                daemon = self.daemons[host]
                args = dict(kwargs)
                workload = args.pop("workload")
                try:
                    with devplace.Client(daemon.unix_target) as client:
                        answer = client.resolve(workload, from_environment=False, **args)
                    py = {"response": json_format.MessageToDict(answer.response, including_default_value_fields=True)}
                    got = answer.device
                except devplace.ResolveError as e:
                    py = {"error": str(e)}
                    got = e.code.name
                cxx = cli_answer(cli([f"--address={daemon.unix_target}", "--json", "resolve"] + cli_flags(kwargs)))
                self.assertEqual(py, cxx)
                self.assertEqual(got, want, py)
                if case_id in ("S04", "S31", "S42", "V24_5.0.0"):  # the job's cuda:0 (V24: cuda:1) is host GPU 1
                    self.assertEqual(answer.placed[0].host_index, 1)
                if case_id in ("S46", "S46_container"):  # the container case: cpu, with the warning
                    self.assertTrue(any("/dev" in w for w in answer.warnings), answer.warnings)
                if case_id == "S27":
                    self.assertEqual(list(answer.max_memory), [0, 1, "cpu"])
                if case_id in ECHOED_VERSIONS:
                    self.assertEqual((answer.transformers_version, answer.accelerate_version),
                                     ECHOED_VERSIONS[case_id])
                if case_id == "V16_4.46.3":  # TrainingArguments 4.x has no Gaudi branch: the warning names it
                    self.assertTrue(any("hpu" in w and "4.46.3" in w for w in answer.warnings), answer.warnings)
                if case_id in ("VS01", "VS02"):  # the job's release, said in the fields and one warning
                    library, job = ("accelerate", "1.16.0") if case_id == "VS01" else ("transformers", "6.0.0")
                    self.assertEqual((answer.newer_than_rules, answer.job_versions), ([library], {library: job}))
                    self.assertEqual(len([w for w in answer.warnings if "(V-SKEW)" in w]), 1, answer.warnings)
                if case_id == "VS03":
                    self.assertIn("strict: Accelerate 1.16.0 (accelerate_version) is newer than the newest release",
                                  py["error"])

    def test_unsupported_version_is_the_daemons_invalid_argument(self):
        daemon = self.daemons["hpu-2x-gaudi2"]
        with devplace.Client(daemon.unix_target) as client:
            for field, value, accepted in (("accelerate_version", "0.24.0", "0.25.0 or newer (rules up to 1.15.x"),
                                           ("transformers_version", "4.29.2", "4.30.0 or newer (rules up to 5.15.x"),
                                           ("transformers_version", "v5", "4.30.0 or newer (rules up to 5.15.x")):
                with self.subTest(field=field, value=value):
                    with self.assertRaises(devplace.InvalidArgumentError) as raised:
                        client.resolve("training", from_environment=False, **{field: value})
                    self.assertIn(f"{field}: '{value}'", raised.exception.message)  # the daemon's words
                    self.assertIn(accepted, raised.exception.message)
            with self.assertRaises(devplace.InvalidArgumentError) as raised:  # not a string: refused before the call
                client.resolve("training", from_environment=False, accelerate_version=1.0)
            self.assertIn("accelerate_version=1.0", raised.exception.message)
            newest = client.resolve("training", from_environment=False, transformers_version=None)
            self.assertEqual((newest.device, newest.transformers_version, newest.accelerate_version),
                             ("hpu:0", "5.15.0", "1.14.0"))

    def test_explicit_devices_name_their_rule_over_the_wire(self):
        """I-CUDA-RANK and G-PLUGIN reach both clients, `--explain` names the rule, and a job
        environment read by each client (--python_env, devplace.job_environment) tells the build."""
        daemon = self.daemons[H100]
        address = f"--address={daemon.unix_target}"
        explained = cli([address, "resolve", "--workload=inference", "--device_map=cuda", "--no_environment",
                         "--env=LOCAL_RANK=1", "--explain"])
        self.assertEqual(explained.returncode, 0, explained.stderr)
        self.assertEqual(explained.stdout.strip(), "cuda:1")
        self.assertIn('I-CUDA-RANK device_map "cuda" -> cuda:1 (LOCAL_RANK = 1)', explained.stderr)
        self.assertIn("V-TF-CUDA-RANK (Transformers 5.15.0 >= 5.0.0", explained.stderr)
        not_told = cli([f"--address={self.daemons['npu-2x-910b'].unix_target}", "resolve", "--workload=inference",
                        "--device_map=npu:0", "--no_environment", "--explain"])
        self.assertEqual(not_told.returncode, 0, not_told.stderr)
        self.assertIn("G-PLUGIN npu exists in torch only once the torch-npu plug-in is imported", not_told.stderr)
        # The job's packages: torch without any plug-in (untagged-site) and torch with torch_npu (npu-venv).
        envs = os.path.join(FIXTURES, "python_envs")
        training = ["resolve", "--workload=training", "--convention=accelerate", "--no_environment",
                    "--env=ACCELERATE_TORCH_DEVICE=npu"]
        for tree, site, want in (("untagged-site", "", None), ("npu-venv", "lib/python3.9/site-packages", "npu")):
            with self.subTest(tree=tree):
                by_cli = cli([address] + training + [f"--python_env={os.path.join(envs, tree)}"])
                with devplace.Client(daemon.unix_target) as client:
                    job = devplace.job_environment([os.path.join(envs, tree, site)])
                    try:
                        got = client.resolve("training", convention="accelerate", from_environment=False,
                                             job_environment=job, env={"ACCELERATE_TORCH_DEVICE": "npu"}).device
                    except devplace.ResolveError as e:
                        got = e.message
                if want is None:
                    self.assertNotEqual(by_cli.returncode, 0)
                    for words in ("env.ACCELERATE_TORCH_DEVICE=npu: the job's PyTorch cannot parse device type 'npu'",
                                  "have torch 2.5.1 but no torch-npu", "install torch-npu", "(G-PLUGIN)"):
                        self.assertIn(words, by_cli.stderr)
                        self.assertIn(words, got)
                else:
                    self.assertEqual(by_cli.returncode, 0, by_cli.stderr)
                    self.assertEqual((by_cli.stdout.strip(), got), (want, want))

    def test_environment_typos_warn_over_the_wire(self):
        """E-TYPO: a near miss in the job's environment reaches the daemon through both clients' capture
        and through `--env`; the exact name never warns."""
        daemon = self.daemons[H100]
        typo = "env CUDA_VISIBLE_DEVICE is not read by anything; did you mean CUDA_VISIBLE_DEVICES? (E-TYPO)"
        job = {"CUDA_VISIBLE_DEVICE": "1", "local_rank": "1"}
        with devplace.Client(daemon.unix_target) as client:
            with mock.patch.dict(os.environ, job):
                captured = client.resolve("inference", device_map="auto")
            exact = client.resolve("inference", device_map="auto", from_environment=False,
                                   env={"CUDA_VISIBLE_DEVICES": "1"})
            strict = client.resolve("inference", device_map="auto", from_environment=False, strict=True,
                                    env={"LOCAL_RANKS": "1"})
        # (the capture also reads this machine's /dev, so the device itself is not asserted here)
        self.assertIn(typo, captured.warnings)
        self.assertIn("env local_rank is not read by anything; did you mean LOCAL_RANK? (E-TYPO)", captured.warnings)
        self.assertFalse([w for w in exact.warnings if "E-TYPO" in w], exact.warnings)
        self.assertIn("env LOCAL_RANKS is not read by anything; did you mean LOCAL_RANK? (E-TYPO)", strict.warnings)
        address = f"--address={daemon.unix_target}"
        flags = ["resolve", "--workload=inference", "--device_map=auto"]
        by_flag = cli([address, "--json"] + flags + ["--no_environment", "--env=CUDA_VISIBLE_DEVICE=1"])
        self.assertEqual(by_flag.returncode, 0, by_flag.stderr)
        answer = json.loads(by_flag.stdout)
        self.assertEqual(answer["device"], "cuda:0")  # the misspelt mask narrows nothing
        self.assertIn(typo, answer["warnings"])
        by_capture = cli([address] + flags, env=clean_env(job))
        self.assertEqual(by_capture.returncode, 0, by_capture.stderr)
        self.assertIn(f"devplace: warning: {typo}", by_capture.stderr)
        exact_cli = cli([address] + flags, env=clean_env({"CUDA_VISIBLE_DEVICES": "1"}))
        self.assertNotIn("E-TYPO", exact_cli.stderr)


if __name__ == "__main__":
    unittest.main()
