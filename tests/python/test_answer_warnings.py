"""resolve_device() shows what the answer says: each warning of the daemon's answer becomes a Python
warning of category devplace.DevplaceWarning, attributed to the job's line, and nothing else, so it
shows once whatever the job's logging set-up (logging.captureWarnings(True) moves it into the job's
log) and Python's warnings filters decide what happens to it. The case is the
one that matters most: a container that cannot see its GPUs (the real devplaced on the nvidia-2x-h100
fixture host, the job sending no /dev accelerator node) silently got "cpu" before."""

import shlex
import textwrap
import unittest
import warnings

import devplace
from devplace_testing import PYTHON, Daemon, TempDir, can_unshare, clean_env, fixture, run, with_dev_view

NOT_VISIBLE = "NVIDIA GPU present but not visible to the job"
DAEMON = None  # devplaced on nvidia-2x-h100, for every test of this file


def setUpModule():
    global DAEMON
    DAEMON = Daemon(fixture("nvidia-2x-h100"))
    DAEMON.wait_serving()


def tearDownModule():
    DAEMON.close()


class InProcess(unittest.TestCase):
    def test_a_job_that_sees_no_gpu_node_gets_cpu_and_each_warning(self):
        with devplace.Client(DAEMON.unix_target) as client:
            answer = client.resolve("inference", job_device_nodes=[])
        self.assertEqual(answer.device, "cpu")
        self.assertTrue(any(w.startswith(NOT_VISIBLE) for w in answer.warnings), answer.warnings)
        with warnings.catch_warnings(record=True) as caught, self.assertNoLogs("devplace", "DEBUG"):
            warnings.simplefilter("always")
            device = devplace.resolve_device("inference", address=DAEMON.unix_target, job_device_nodes=[])
        self.assertEqual(device, "cpu")
        self.assertEqual([str(w.message) for w in caught], answer.warnings)
        for w in caught:
            self.assertIs(w.category, devplace.DevplaceWarning)
            self.assertEqual(w.filename, __file__)  # the job's line, not devplace's

    def test_an_answer_without_warnings_issues_none(self):
        with warnings.catch_warnings(record=True) as caught, self.assertNoLogs("devplace"):
            warnings.simplefilter("always")
            device = devplace.resolve_device("inference", "cuda:1", address=DAEMON.unix_target,
                                             from_environment=False)
        self.assertEqual((device, caught), ("cuda:1", []))

    def test_error_filter_raises_the_warning(self):
        # Only this one: the job's other warnings (no transformers here: V-JOB) stay warnings.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.filterwarnings("error", message=NOT_VISIBLE, category=devplace.DevplaceWarning)
            with self.assertRaises(devplace.DevplaceWarning) as raised:
                devplace.resolve_device("inference", address=DAEMON.unix_target, job_device_nodes=[])
        self.assertTrue(str(raised.exception).startswith(NOT_VISIBLE), str(raised.exception))
        self.assertTrue(all(NOT_VISIBLE not in str(w.message) for w in caught), caught)

    def test_the_fallbacks_warning_is_issued_once(self):
        with TempDir() as dir:
            nowhere = "unix:" + dir.file("none.sock")
            with warnings.catch_warnings(record=True) as caught, self.assertNoLogs("devplace", "DEBUG"):
                warnings.simplefilter("always")
                self.assertEqual(devplace.resolve_device("inference", address=nowhere, fallback="cpu"), "cpu")
        self.assertEqual(len(caught), 1)
        self.assertIs(caught[0].category, devplace.FallbackWarning)
        self.assertTrue(issubclass(caught[0].category, RuntimeWarning))
        self.assertEqual(caught[0].filename, __file__)
        self.assertTrue(str(caught[0].message).startswith("devplace fallback: answered cpu without the daemon"))


class InAJobsLog(unittest.TestCase):
    """A real job (a child Python running a script file) in a container-like /dev without GPU nodes
    where a private mount namespace may be made (else it sends job_device_nodes=[]): what its stderr
    shows with Python's defaults and with the filters docs/CLIENT.md gives."""

    def job(self, before):
        """(stdout, stderr, "<job.py>:<line>: ") of job.py: ``before``, then
        `print(devplace.resolve_device("inference"))` on its last line (the warnings' line)."""
        nodes = "" if can_unshare() else "job_device_nodes=[]"
        with TempDir() as dir:
            script = dir.write("job.py", "import logging, warnings\nimport devplace\n" + textwrap.dedent(before) +
                               f"print(devplace.resolve_device('inference', {nodes}))\n")
            line = script_lines(script)
            command = f"{shlex.quote(PYTHON)} {shlex.quote(script)}"
            argv = with_dev_view(command, [], dir.path) if can_unshare() else ["/bin/sh", "-c", command]
            result = run(argv, env=clean_env({"DEVPLACE_ADDRESS": DAEMON.unix_target}))
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout, result.stderr, f"{script}:{line}: "

    def test_python_defaults_show_it_once_on_stderr(self):
        out, err, where = self.job("")
        self.assertEqual(out, "cpu\n")
        self.assertIn(f"{where}DevplaceWarning: {NOT_VISIBLE}", err)
        self.assertEqual(err.count(NOT_VISIBLE), 1, err)  # not again through logging's last-resort handler

    def test_silenced(self):
        out, err, _ = self.job('warnings.filterwarnings("ignore", category=devplace.DevplaceWarning)\n')
        self.assertEqual((out, err), ("cpu\n", ""))

    def test_once_with_the_jobs_own_logging_handler(self):
        # A job that configures logging (its own handler on the root logger) still sees each once.
        out, err, where = self.job('logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")\n')
        self.assertEqual(out, "cpu\n")
        self.assertIn(f"{where}DevplaceWarning: {NOT_VISIBLE}", err)
        self.assertEqual(err.count(NOT_VISIBLE), 1, err)

    def test_in_the_jobs_log_with_capture_warnings(self):
        out, err, where = self.job('logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")\n'
                                   'logging.captureWarnings(True)\n')
        self.assertEqual(out, "cpu\n")
        self.assertIn(f"WARNING py.warnings: {where}DevplaceWarning: {NOT_VISIBLE}", err)
        self.assertEqual(err.count(NOT_VISIBLE), 1, err)


def script_lines(path):
    with open(path) as f:
        return len(f.read().splitlines())


if __name__ == "__main__":
    unittest.main()
