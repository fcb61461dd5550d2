"""The Python client's readers of the job's files (device_allocation, job_environment) against the
table libdevplace's are held to (tests/client/reader_table.txt), hostile files included: each case
runs in its own reader_dump.py process within a time and memory bound, its lines must be the
table's, and what it read is sent to the real daemon, which must answer: no file can make a resolve
fail that would succeed without it. The trees come from the ctest fixture client.reader_cases
(DEVPLACE_READER_CASES), or are built here when run alone."""

import os
import subprocess
import sys
import tempfile
import time
import unittest

import devplace
from devplace import _device_metadata, _python_environment
from devplace_testing import CLI, Daemon, SOURCE_DIR, fixture

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "client"))
import reader_fixtures  # noqa: E402

TABLE = os.path.join(SOURCE_DIR, "tests", "client", "reader_table.txt")
DUMP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reader_dump.py")
MAX_SECONDS = 20
MAX_RSS_KIB = 256 * 1024


def run_dump(args, cwd):
    """reader_dump.py for one case: exit status, stdout, stderr, wall time and peak RSS (KiB)."""
    start = time.monotonic()
    child = subprocess.Popen([sys.executable, DUMP] + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = child.stdout.read()  # its stderr is a line at most, so it cannot fill its pipe meanwhile
    err = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, out.decode("utf-8"), err.decode("utf-8", "replace"), time.monotonic() - start, usage.ru_maxrss


def read_in_process(case, tree):
    """What the case's reader gives in this process (the table's limits applied), or None for an error."""
    args = reader_fixtures.reader_args(case, tree)
    module = _device_metadata if case.reader == "dra" else _python_environment
    saved = module._LIMITS
    module._LIMITS = (case.limits.get("time", 60000) / 1000, saved[1],
                      case.limits.get("total", saved[2]), saved[3])
    try:
        if case.reader == "dra":
            return devplace.device_allocation(os.fsdecode(args[1]))
        if case.reader == "env":
            return devplace.job_environment(os.fsdecode(args[1]))
        return devplace.job_environment([os.fsdecode(a) for a in args[1:]])
    except devplace.Error:
        return None
    finally:
        module._LIMITS = saved


class ReaderTable(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = os.environ.get("DEVPLACE_READER_CASES")
        cls.own = None
        if not cls.dir:
            cls.own = tempfile.TemporaryDirectory(prefix="devplace-readers-")
            cls.dir = cls.own.name
            reader_fixtures.prepare(TABLE, cls.dir)
        cls.cases = reader_fixtures.read_table(TABLE)

    @classmethod
    def tearDownClass(cls):
        if cls.own:
            cls.own.cleanup()

    def test_the_python_client_reads_every_case_as_the_table_says(self):
        figures = []
        for case in self.cases:
            with self.subTest(case=case.name):
                tree = os.path.join(self.dir, case.name)
                args = [os.fsdecode(a) for a in reader_fixtures.dump_args(case, tree)]
                code, out, err, seconds, rss = run_dump(args, tree)
                self.assertEqual(code, 0, err)
                difference = reader_fixtures.compare(case.expected_lines(tree), out.splitlines())
                self.assertIsNone(difference, difference)
                self.assertLess(seconds, MAX_SECONDS)
                self.assertLess(rss, MAX_RSS_KIB)
                figures.append(f"{case.name:40} {seconds:7.3f} s {rss:7d} KiB")
        print("\n" + "\n".join(figures), file=sys.stderr)

    def test_the_daemon_answers_whatever_the_files_hold(self):
        """Every case's reading, sent by the Python client and by the CLI, gets an answer, each problem
        as a warning: no file makes a resolve fail that would succeed without it."""
        with Daemon(fixture("nvidia-2x-h100")) as daemon:
            daemon.wait_serving()
            with devplace.Client(daemon.unix_target) as client:
                for case in self.cases:
                    tree = os.path.join(self.dir, case.name)
                    read = read_in_process(case, tree)
                    if read is None:
                        continue  # the call's own error (not a directory, missing): nothing is sent
                    with self.subTest(case=case.name):
                        field = "device_allocation" if case.reader == "dra" else "job_environment"
                        answer = client.resolve("inference", "auto", from_environment=False, **{field: read})
                        self.assertTrue(answer.device)
                        for problem in read.problems:
                            self.assertTrue(any(problem in w for w in answer.warnings), (problem, answer.warnings))
                        if case.reader == "path" or case.limits:
                            continue
                        flag = "--dra_metadata_dir" if case.reader == "dra" else "--python_env"
                        target = os.fsdecode(reader_fixtures.reader_args(case, tree)[1])
                        result = subprocess.run([CLI, f"--address={daemon.unix_target}", "resolve", "--workload=inference",
                                                 "--device_map=auto", "--no_environment", f"{flag}={target}"],
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
                        self.assertEqual(result.returncode, 0, result.stderr)
                        self.assertEqual(result.stdout.decode().strip(), answer.device)

if __name__ == "__main__":
    unittest.main()
