"""The job describes itself: synthetic Python environments (tests/fixtures/python_envs, package
metadata only) -> the request's job_environment -> the runtime backends and library versions the
real devplaced applies, said in the answer (given / detected / default) and in the explanation.
The Python client (devplace.job_environment) and the CLI (--python_env, --python) agree on every tree."""

import json
import os
import shutil
import sys
import unittest

from google.protobuf import json_format

import devplace
from devplace.v1 import devplace_pb2
from devplace_testing import CLI, FIXTURES, PYTHON, Daemon, TempDir, clean_env, fixture, run, without_source

ENVS = os.path.join(FIXTURES, "python_envs")
# tree -> (its site-packages inside the tree, runtime_backends, transformers, accelerate, their sources)
EXPECTED = {
    "cuda-venv": ("lib/python3.11/site-packages", ["cuda", "cpu"], "4.46.3", "0.25.0", "detected", "detected", "detected"),
    "rocm-site": ("", ["rocm", "cpu"], "4.46.3", "1.14.0", "detected", "default", "detected"),
    "xpu-conda": ("lib/python3.10/site-packages", ["xpu", "cpu"], "4.57.0", "1.10.0", "detected", "detected", "detected"),
    "cpu-site": ("", ["cpu"], "5.0.0", "1.2.0", "detected", "detected", "detected"),
    "npu-venv": ("lib/python3.9/site-packages", ["npu", "cpu"], "4.41.2", "1.0.0", "detected", "detected", "detected"),
    "gaudi-site": ("", ["hpu", "cpu"], "4.49.0", "1.5.0", "detected", "detected", "detected"),
    "untagged-site": ("", [], "5.15.0", "1.14.0", "default", "default", "default"),
}


def cli_resolve(address, *flags):
    return run([CLI, "--json", f"--address={address}", "resolve", "--workload=inference", "--device_map=auto",
                "--no_environment"] + list(flags))


class JobEnvironment(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(fixture("nvidia-2x-h100"))
        cls.daemon.__enter__()
        cls.daemon.wait_serving()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.__exit__(None, None, None)

    def python_resolve(self, site):
        job = devplace.job_environment([site])
        with devplace.Client(self.daemon.unix_target) as client:
            return job, client.resolve("inference", "auto", from_environment=False, job_environment=job)

    def test_each_tree_gives_its_backends_and_versions_and_the_cli_agrees(self):
        for tree, (site_rel, backends, tf, acc, tf_from, acc_from, rt_from) in EXPECTED.items():
            with self.subTest(tree=tree):
                site = os.path.join(ENVS, tree, site_rel) if site_rel else os.path.join(ENVS, tree)
                job, answer = self.python_resolve(site)
                self.assertEqual(answer.runtime_backends, backends)
                self.assertEqual((answer.transformers_version, answer.accelerate_version), (tf, acc))
                self.assertEqual(answer.versions_from,
                                 {"transformers": tf_from, "accelerate": acc_from, "runtime_backends": rt_from})
                line = [e for e in answer.explanation if e.startswith("V-JOB ")]
                self.assertEqual(len(line), 1, answer.explanation)
                self.assertIn(f"the job's packages (importlib.metadata of {site})", line[0])
                # The CLI reads the same tree without Python: the whole answer is the same.
                result = cli_resolve(self.daemon.unix_target, f"--python_env={os.path.join(ENVS, tree)}")
                self.assertEqual(result.returncode, 0, result.stderr)
                cli_answer = json.loads(result.stdout)
                py_answer = json_format.MessageToDict(answer.response, including_default_value_fields=True)
                self.assertEqual(without_source(cli_answer, f"package metadata under {site}"),
                                 without_source(py_answer, f"importlib.metadata of {site}"))

    def test_devices_follow_the_torch_build(self):
        # nvidia-2x-h100: a CUDA build places on the GPUs; a ROCm or NPU build cannot use them.
        for tree, device in (("cuda-venv", "cuda:0"), ("untagged-site", "cuda:0"), ("rocm-site", "cpu"),
                             ("npu-venv", "cpu")):
            with self.subTest(tree=tree):
                site = os.path.join(ENVS, tree, EXPECTED[tree][0])
                _, answer = self.python_resolve(site)
                self.assertEqual(answer.device, device)

    def test_absent_libraries_are_said(self):
        _, answer = self.python_resolve(os.path.join(ENVS, "untagged-site"))
        site = os.path.join(ENVS, "untagged-site")
        self.assertIn(f"transformers is not installed in importlib.metadata of {site}: from_pretrained is "
                      "Transformers' API, so these cannot be the job's own rules; Transformers 5.15.0's were applied "
                      "(V-JOB)", answer.warnings)
        self.assertIn(f"accelerate is not installed in importlib.metadata of {site}: from_pretrained with a "
                      "device_map needs it (the job fails with ImportError), so these cannot be the job's own rules; "
                      "Accelerate 1.14.0's were applied (V-JOB)", answer.warnings)
        line = [e for e in answer.explanation if e.startswith("V-JOB ")][0]
        self.assertIn("torch 2.5.1, transformers not installed, accelerate not installed", line)
        self.assertIn("runtime_backends not told (torch 2.5.1 (no +cuXXX/+rocmX/+xpu/+cpu tag", line)

    def test_a_field_given_wins_over_the_detected_one(self):
        job = devplace.job_environment([os.path.join(ENVS, "cuda-venv", EXPECTED["cuda-venv"][0])])
        with devplace.Client(self.daemon.unix_target) as client:
            answer = client.resolve("inference", "auto", from_environment=False, job_environment=job,
                                    accelerate_version="1.14.0", runtime_backends=["rocm"])
        self.assertEqual((answer.transformers_version, answer.accelerate_version), ("4.46.3", "1.14.0"))
        self.assertEqual(answer.versions_from, {"transformers": "detected", "accelerate": "given",
                                                "runtime_backends": "given"})
        self.assertEqual((answer.runtime_backends, answer.device), (["rocm"], "cpu"))

    def test_a_detected_version_outside_the_range_is_invalid_argument(self):
        site = os.path.join(ENVS, "old-accelerate-site")
        with self.assertRaises(devplace.InvalidArgumentError) as caught:
            self.python_resolve(site)
        self.assertTrue(caught.exception.message.startswith(
            f"accelerate_version (empty; job_environment has accelerate 0.20.3 in importlib.metadata of {site}: set "
            "accelerate_version to override): '0.20.3' is older than devplace supports; accepted: Accelerate 0.25.0 "
            "or newer (rules up to 1.15.x"), caught.exception.message)
        result = cli_resolve(self.daemon.unix_target, f"--python_env={site}")
        self.assertEqual(result.returncode, 2, result.stderr)  # INVALID_ARGUMENT: a bad value
        self.assertIn("job_environment has accelerate 0.20.3 in package metadata under", result.stderr)

    def test_python_flag_asks_the_interpreter_and_the_client_detects_its_own(self):
        """A venv holding the cuda-venv metadata: --python=its python, --python_env=its prefix and the
        client running in it (default detection: torch is installed there) send the same packages."""
        with TempDir() as dir:
            venv = dir.file("venv")
            made = run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", venv])
            self.assertEqual(made.returncode, 0, made.stderr)
            site = os.path.join(venv, "lib", "python3.%d" % __import__("sys").version_info[1], "site-packages")
            src = os.path.join(ENVS, "cuda-venv", EXPECTED["cuda-venv"][0])
            for d in os.listdir(src):
                os.makedirs(os.path.join(site, d))
                with open(os.path.join(src, d, "METADATA")) as f, open(os.path.join(site, d, "METADATA"), "w") as g:
                    g.write(f.read())
            python = os.path.join(venv, "bin", "python")
            asked = cli_resolve(self.daemon.unix_target, f"--python={python}")
            read = cli_resolve(self.daemon.unix_target, f"--python_env={venv}")
            self.assertEqual((asked.returncode, read.returncode), (0, 0), asked.stderr + read.stderr)
            # --python_env reads the venv's pyvenv.cfg: its site-packages, then (system site packages)
            # the base interpreter's site directories, as its python's sys.path has them.
            read_source = devplace.job_environment(venv).source
            self.assertTrue(read_source.startswith(f"package metadata under {site}, "), read_source)
            self.assertEqual(without_source(json.loads(asked.stdout), f"importlib.metadata of {python}"),
                             without_source(json.loads(read.stdout), read_source))
            code = ("import devplace; r = devplace.make_request('inference', 'auto'); "
                    "print(r.job_environment.source); print(sorted((p.name, p.version) for p in r.job_environment.packages))")
            inside = run([python, "-c", code], env=clean_env(), cwd="/")
            self.assertEqual(inside.returncode, 0, inside.stderr)
            self.assertEqual(inside.stdout.splitlines(), [
                f"importlib.metadata of {python}",
                "[('accelerate', '0.25.0'), ('torch', '2.5.1+cu124'), ('transformers', '4.46.3')]"])

    def test_a_venv_with_system_site_packages_is_read_as_its_python_reads_it(self):
        """A venv made with --system-site-packages from a base interpreter whose own site-packages hold
        torch (a copy of Debian's python3 in a prefix of its own, the standard library linked in): its
        python's sys.path (--python), its pyvenv.cfg (--python_env and devplace.job_environment(prefix))
        and the client running inside it all find transformers in the venv and torch in the base."""
        real = os.path.realpath(PYTHON)
        minor = "python3.%d" % sys.version_info[1]
        with TempDir() as dir:
            base, venv = dir.file("base"), dir.file("venv")
            os.makedirs(os.path.join(base, "bin"))
            shutil.copy(real, os.path.join(base, "bin", "python3"))
            stdlib = os.path.join(base, "lib", minor)
            os.makedirs(stdlib)
            for name in os.listdir(os.path.join("/usr/lib", minor)):
                os.symlink(os.path.join("/usr/lib", minor, name), os.path.join(stdlib, name))
            os.makedirs(os.path.join(base, "lib", "python3"))  # Debian's dist-packages: grpcio for the client
            os.symlink("/usr/lib/python3/dist-packages", os.path.join(base, "lib", "python3", "dist-packages"))
            dir.write(f"base/lib/{minor}/site-packages/torch-2.5.1+cu124.dist-info/METADATA",
                      "Name: torch\nVersion: 2.5.1+cu124\n")
            made = run([os.path.join(base, "bin", "python3"), "-m", "venv", "--without-pip", "--system-site-packages",
                        venv])
            self.assertEqual(made.returncode, 0, made.stderr)
            dir.write(f"venv/lib/{minor}/site-packages/transformers-4.46.3.dist-info/METADATA",
                      "Name: transformers\nVersion: 4.46.3\n")
            python = os.path.join(venv, "bin", "python")
            want = [("torch", "2.5.1+cu124"), ("transformers", "4.46.3")]
            named = devplace.job_environment(venv)
            self.assertEqual(sorted((p.name, p.version) for p in named.packages), want)
            self.assertEqual(list(named.problems), [])
            self.assertEqual(named.source.split(", ")[:2], [f"package metadata under {venv}/lib/{minor}/site-packages",
                                                            f"{base}/lib/{minor}/site-packages"])
            asked = cli_resolve(self.daemon.unix_target, f"--python={python}")
            read = cli_resolve(self.daemon.unix_target, f"--python_env={venv}")
            self.assertEqual((asked.returncode, read.returncode), (0, 0), asked.stderr + read.stderr)
            self.assertEqual(without_source(json.loads(asked.stdout), f"importlib.metadata of {python}"),
                             without_source(json.loads(read.stdout), named.source))
            _, answer = self.python_resolve_job(named)
            self.assertEqual(without_source(json_format.MessageToDict(answer.response, including_default_value_fields=True),
                                            named.source),
                             without_source(json.loads(read.stdout), named.source))
            self.assertIn("torch 2.5.1+cu124, transformers 4.46.3",
                          [e for e in answer.explanation if e.startswith("V-JOB ")][0])
            code = ("import devplace; r = devplace.make_request('inference', 'auto'); "
                    "print(sorted((p.name, p.version) for p in r.job_environment.packages))")
            inside = run([python, "-c", code], env=clean_env(), cwd="/")
            self.assertEqual(inside.returncode, 0, inside.stderr)
            self.assertEqual(inside.stdout.strip(), repr(want))

    def python_resolve_job(self, job):
        with devplace.Client(self.daemon.unix_target) as client:
            return job, client.resolve("inference", "auto", from_environment=False, job_environment=job)

    def test_the_client_describes_its_interpreter_only_when_torch_is_installed(self):
        # A process without torch is not a job's runtime (an init container, a scheduler): it
        # sends no job environment. Debian's python3 of these tests usually has no torch; where
        # python3-torch is installed, the same rule must send this interpreter's packages.
        request = devplace.make_request("inference")
        here = devplace.job_environment()
        self.assertIsInstance(here, devplace_pb2.JobEnvironment)
        has_torch = any(p.name.lower() == "torch" for p in here.packages)
        self.assertEqual(request.HasField("job_environment"), has_torch)
        if has_torch:
            self.assertEqual(request.job_environment, here)

    def test_bad_flags_are_usage_errors(self):
        for flags, message in (
                (["--python_env=/nonexistent"], "--python_env=/nonexistent: not a directory"),
                ([f"--python_env={FIXTURES}"], f"--python_env={FIXTURES}: neither a site-packages directory"),
                (["--python=/nonexistent/python"], "--python=/nonexistent/python: cannot run it"),
                (["--python=/bin/false"], "--python=/bin/false -I failed to list its packages"),
                ([f"--python_env={ENVS}", "--python=/usr/bin/python3"], "--python_env and --python both given")):
            with self.subTest(flags=flags):
                result = cli_resolve(self.daemon.unix_target, *flags)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(message, result.stderr)


if __name__ == "__main__":
    unittest.main()
