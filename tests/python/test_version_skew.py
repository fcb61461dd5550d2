"""Rule V-SKEW through both clients and the real devplaced: a job whose environment has Accelerate
1.16.0 and Transformers 6.0.0 (newer than the daemon's rules; tests/fixtures/python_envs/newer-libs-venv)
gets the newest rules' answer with a warning naming both releases, from the Python client
(Resolution.newer_than_rules, job_versions) and the CLI (--python_env, --python, --json, --explain)
alike; neither client refuses it before sending, also when it detects its own interpreter's packages;
only `strict` turns it into FAILED_PRECONDITION."""

import json
import os
import sys
import unittest

import devplace
from google.protobuf import json_format
from devplace_testing import CLI, FIXTURES, Daemon, TempDir, clean_env, fixture, run, without_source

TREE = os.path.join(FIXTURES, "python_envs", "newer-libs-venv")
SITE = os.path.join(TREE, "lib", "python3.12", "site-packages")
TF_WARNING = "Transformers 6.0.0 (detected in {}) is newer than the newest release devplace knows, so " \
             "Transformers 5.15.0's rules were applied"
ACC_WARNING = "Accelerate 1.16.0 (detected in {}) is newer than the newest release devplace knows, so " \
              "Accelerate 1.14.0's rules were applied"


def cli_resolve(address, *flags):
    return run([CLI, f"--address={address}", "resolve", "--workload=training", "--no_environment"] + list(flags))


class VersionSkew(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(fixture("nvidia-2x-h100"), ["--nvml_library="])
        cls.daemon.__enter__()
        cls.daemon.wait_serving()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.__exit__(None, None, None)

    def test_python_client_answers_with_the_newest_rules_and_says_so(self):
        job = devplace.job_environment([SITE])
        source = f"importlib.metadata of {SITE}"
        with devplace.Client(self.daemon.unix_target) as client:
            answer = client.resolve("training", from_environment=False, job_environment=job)
        self.assertEqual(answer.device, "cuda:0")
        self.assertEqual((answer.transformers_version, answer.accelerate_version), ("5.15.0", "1.14.0"))
        self.assertEqual(answer.job_versions, {"transformers": "6.0.0", "accelerate": "1.16.0"})
        self.assertEqual(answer.newer_than_rules, ["transformers", "accelerate"])
        self.assertEqual(answer.versions_from, {"transformers": "detected", "accelerate": "detected",
                                                "runtime_backends": "detected"})
        for words in (TF_WARNING.format(source), ACC_WARNING.format(source)):
            self.assertTrue(any(words in w and w.endswith("(V-SKEW)") for w in answer.warnings), answer.warnings)
        self.assertIn("V emulating Transformers 5.15.0 (the newest rules devplace has: the job's 6.0.0, detected in "
                      f"{source}, is newer, V-SKEW)", answer.explanation[0])
        # A job that named a known release gets neither the flag nor a warning.
        with devplace.Client(self.daemon.unix_target) as client:
            known = client.resolve("training", from_environment=False, transformers_version="5.15.0",
                                   accelerate_version="1.14.0")
        self.assertEqual((known.newer_than_rules, known.job_versions),
                         ([], {"transformers": "5.15.0", "accelerate": "1.14.0"}))
        self.assertFalse(any("V-SKEW" in w for w in known.warnings), known.warnings)

    def test_strict_refuses_it_in_both_clients(self):
        with devplace.Client(self.daemon.unix_target) as client:
            with self.assertRaises(devplace.FailedPreconditionError) as raised:
                client.resolve("training", from_environment=False, strict=True,
                               job_environment=devplace.job_environment([SITE]))
        self.assertIn("strict: Transformers 6.0.0 (detected in", raised.exception.message)
        self.assertIn("(answer without strict: cuda:0)", raised.exception.message)
        by_cli = cli_resolve(self.daemon.unix_target, f"--python_env={TREE}", "--strict")
        self.assertEqual(by_cli.returncode, 1, by_cli.stderr)
        self.assertIn("FAILED_PRECONDITION: strict: Transformers 6.0.0 (detected in", by_cli.stderr)

    def test_the_cli_reads_the_same_environment_and_agrees(self):
        plain = cli_resolve(self.daemon.unix_target, f"--python_env={TREE}")
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(plain.stdout, "cuda:0\n")
        source = f"package metadata under {SITE}"
        for words in (TF_WARNING.format(source), ACC_WARNING.format(source)):
            self.assertIn(f"devplace: warning: {words}", plain.stderr)
        explained = cli_resolve(self.daemon.unix_target, f"--python_env={TREE}", "--explain")
        self.assertEqual(explained.returncode, 0, explained.stderr)
        self.assertIn("newer:      the job's Transformers 6.0.0 (rules applied: 5.15.0), the job's Accelerate 1.16.0 "
                      "(rules applied: 1.14.0): newer than devplace's rules know, see warnings (V-SKEW)",
                      explained.stderr)
        as_json = run([CLI, "--json", f"--address={self.daemon.unix_target}", "resolve", "--workload=training",
                       "--no_environment", f"--python_env={TREE}"])
        self.assertEqual(as_json.returncode, 0, as_json.stderr)
        cli_answer = json.loads(as_json.stdout)
        for key, value in (("transformersJobVersion", "6.0.0"), ("accelerateJobVersion", "1.16.0"),
                           ("transformersNewerThanRules", True), ("accelerateNewerThanRules", True),
                           ("transformersVersion", "5.15.0"), ("accelerateVersion", "1.14.0")):
            self.assertEqual(cli_answer.get(key), value, key)
        with devplace.Client(self.daemon.unix_target) as client:
            answer = client.resolve("training", from_environment=False, job_environment=devplace.job_environment([SITE]))
        py_answer = json_format.MessageToDict(answer.response, including_default_value_fields=True)
        self.assertEqual(without_source(cli_answer, source), without_source(py_answer, f"importlib.metadata of {SITE}"))

    def test_a_job_running_in_such_an_environment_is_not_refused_by_either_client(self):
        """The job's own interpreter: the Python client's default detection inside the venv, and the
        CLI asking that interpreter (--python)."""
        with TempDir() as dir:
            venv = dir.file("venv")
            made = run(["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", venv])
            self.assertEqual(made.returncode, 0, made.stderr)
            site = os.path.join(venv, "lib", "python3.%d" % sys.version_info[1], "site-packages")
            for d in os.listdir(SITE):
                os.makedirs(os.path.join(site, d))
                with open(os.path.join(SITE, d, "METADATA")) as f, open(os.path.join(site, d, "METADATA"), "w") as g:
                    g.write(f.read())
            python = os.path.join(venv, "bin", "python")
            # The default capture (the job's packages from this interpreter, its placement variables),
            # with the device nodes left unknown: this machine's /dev has none of the fixture's GPUs.
            code = ("import devplace, sys\n"
                    f"c = devplace.Client({self.daemon.unix_target!r})\n"
                    "r = c.resolve('training', job_device_nodes=None)\n"
                    "c.close()\n"
                    "print(r.device, r.newer_than_rules, sorted(r.job_versions.items()))\n"
                    "print(sum('(V-SKEW)' in w for w in r.warnings))\n"
                    f"print(devplace.resolve_device('training', address={self.daemon.unix_target!r}, "
                    "job_device_nodes=None))\n")
            inside = run([python, "-c", code], env=clean_env(), cwd="/")
            self.assertEqual(inside.returncode, 0, inside.stderr)
            self.assertEqual(inside.stdout.splitlines(), [
                "cuda:0 ['transformers', 'accelerate'] [('accelerate', '1.16.0'), ('transformers', '6.0.0')]",
                "2", "cuda:0"])
            asked = cli_resolve(self.daemon.unix_target, f"--python={python}")
            self.assertEqual(asked.returncode, 0, asked.stderr)
            self.assertEqual(asked.stdout, "cuda:0\n")
            self.assertIn(f"Accelerate 1.16.0 (detected in importlib.metadata of {python}) is newer", asked.stderr)


if __name__ == "__main__":
    unittest.main()
