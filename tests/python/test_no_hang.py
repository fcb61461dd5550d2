"""The Python client never hangs a job: a process whose calls failed (daemon down, a TLS mismatch
either way, a daemon that accepts and never answers) exits, whether it closed its Client, left it
open or dropped it, and so does one that left a Watch open or whose resolve_device() raised. Each
case is a real job: a child /usr/bin/python3 running the snippet against a real devplaced (or a
listener that never answers), which must print its last line and exit 0. Without the client
closing its channels at exit, Debian's grpcio 1.51 waits forever in the channel's __del__ during
interpreter shutdown: EXIT_LIMIT only tells that from a slow machine."""

import gc
import os
import socket
import subprocess
import textwrap
import threading
import time
import unittest

import devplace
from devplace_testing import PYTHON, TempDir, clean_env
from test_tls import make_ca, mutual_tls_daemon

# Seconds a failing job may take from start to exit: a guard against the forever above (a job takes
# 1-6 s on an idle machine, and passed 10 s with the machine loaded eight times over).
EXIT_LIMIT = 60.0

# What every job runs first: `attempt(f)` calls f and prints what happened on one line.
PRELUDE = """\
import gc, sys, threading
import devplace
def attempt(call):
    try:
        call()
    except devplace.Error as e:
        print("raised", type(e).__name__, flush=True)
    else:
        print("answered", flush=True)
"""


class SilentListener:
    """A TCP listener on 127.0.0.1 that accepts every connection, reads what comes and never sends a
    byte: a daemon that hangs."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.target = "127.0.0.1:%d" % self.socket.getsockname()[1]
        self._open = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return  # closed
            self._open.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass  # HTTP/2's preface, settings, pings: all unanswered
        except OSError:
            pass

    def close(self) -> None:
        self.socket.close()
        for conn in self._open:
            conn.close()


class JobsExit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = TempDir()
        cls.ca = make_ca(cls.dir, "ca")
        cls.daemon, cls.tls_target = mutual_tls_daemon(cls.dir, cls.ca)
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        cls.refused_target = "127.0.0.1:%d" % free.getsockname()[1]
        free.close()  # nothing listens there now
        cls.silent = SilentListener()

    @classmethod
    def tearDownClass(cls):
        cls.silent.close()
        cls.daemon.close()
        cls.dir.close()

    def job(self, body: str) -> str:
        """Runs PRELUDE + ``body`` in a child Python; its stdout once it printed its last line and
        exited 0 within EXIT_LIMIT (the test fails with what it printed otherwise)."""
        script = PRELUDE + textwrap.dedent(body) + "\nprint('end of script', flush=True)\n"
        started = time.monotonic()
        try:
            result = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, env=clean_env(),
                                    timeout=EXIT_LIMIT)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            self.fail(f"the job did not exit within {EXIT_LIMIT:.0f} s (killed); it printed:\n{out}\n"
                      f"script:\n{script}")
        elapsed = time.monotonic() - started
        self.assertEqual(result.returncode, 0, result.stderr)
        self.last_stderr = result.stderr
        self.assertTrue(result.stdout.endswith("end of script\n"), result.stdout + result.stderr)
        print(f"  [{self.id().rpartition('.')[2]}: exited in {elapsed:.2f} s]")
        return result.stdout

    def failing_targets(self):
        """(case, Client arguments as source text, the error its calls raise)."""
        none_sock = self.dir.file("none.sock")
        ca = self.ca[0]
        return (
            ("daemon down: no socket", f"'unix:{none_sock}'", "UnavailableError"),
            ("daemon down: connection refused", f"'{self.refused_target}'", "UnavailableError"),
            ("TLS client at a plaintext listener", f"'{self.daemon.tcp_target}', tls=devplace.TlsOptions(ca={ca!r})",
             "UnavailableError"),
            ("plaintext client at a TLS listener", f"'{self.tls_target}'", "UnavailableError"),
            ("a daemon that never answers", f"'{self.silent.target}', timeout=1", "DeadlineExceededError"),
        )

    def test_failed_calls_on_an_unclosed_client(self):
        for case, args, error in self.failing_targets():
            with self.subTest(case):
                out = self.job(f"""
                    client = devplace.Client({args})
                    attempt(client.health)
                    attempt(lambda: client.resolve("inference", from_environment=False))
                    """)
                self.assertEqual(out.splitlines()[:2], [f"raised {error}"] * 2)

    def test_unclosed_clients_do_not_slow_the_next_ones(self):
        # gRPC shares connections process-wide by default: a Client left open against a daemon
        # that is down kept a connection in reconnect backoff, and every later Client's call waited
        # on it (1, 2, 3, 4 s, then DEADLINE_EXCEEDED without the reason). Each Client has its own,
        # so each call is refused at once for what it is (UNAVAILABLE), however many came before:
        # the backoff shared would turn the later ones into DEADLINE_EXCEEDED. (Their times are
        # printed, not judged: a loaded machine slows every call alike.)
        none_sock = self.dir.file("none.sock")
        out = self.job(f"""
            import time
            held = []
            for i in range(8):
                held.append(devplace.Client('unix:{none_sock}'))
                started = time.monotonic()
                attempt(held[-1].health)
                print("took %.1f s" % (time.monotonic() - started))
            """)
        lines = out.splitlines()
        self.assertEqual([l for l in lines if l.startswith("raised")], ["raised UnavailableError"] * 8, out)
        took = [float(l.split()[1]) for l in lines if l.startswith("took")]
        self.assertEqual(len(took), 8, out)

    def test_failed_calls_on_a_closed_client(self):
        for case, args, error in self.failing_targets():
            with self.subTest(case):
                out = self.job(f"""
                    with devplace.Client({args}) as client:
                        attempt(client.inventory)
                    attempt(client.inventory)  # closed: refused on this side
                    attempt(client.watch)
                    """)
                # The first call's error, then the closed client's refusals.
                self.assertEqual(out.splitlines()[:3], [f"raised {error}"] + ["raised FailedPreconditionError"] * 2)

    def test_failed_calls_on_a_dropped_client(self):
        for case, args, error in self.failing_targets():
            with self.subTest(case):
                out = self.job(f"""
                    def ask():
                        attempt(devplace.Client({args}).health)  # the Client is garbage at once
                    ask()
                    gc.collect()
                    """)
                self.assertEqual(out.splitlines()[0], f"raised {error}")

    def test_failing_resolve_device(self):
        cases = [(case, args, error) for case, args, error in self.failing_targets()]
        # The one-liner's default deadline (5 s) bounds a call to a daemon that never answers.
        cases[-1] = (cases[-1][0], f"'{self.silent.target}'", cases[-1][2])
        for case, args, error in cases:
            with self.subTest(case):
                address, _, rest = args.partition(", ")
                extra = f", {rest}" if rest else ""
                out = self.job(f"""
                    attempt(lambda: devplace.resolve_device("inference", address={address}{extra}))
                    """)
                self.assertEqual(out.splitlines()[0], f"raised {error}")

    def test_a_watch_left_open(self):
        target = self.daemon.unix_target
        cases = (
            ("unclosed client", f"""
                client = devplace.Client('{target}')
                watch = client.watch()
                print("revision", next(watch).revision, flush=True)
                """),
            ("its client dropped", f"""
                watch = devplace.Client('{target}').watch()
                print("revision", next(watch).revision, flush=True)
                gc.collect()
                """),
            ("blocked in next() in a daemon thread", f"""
                client = devplace.Client('{target}')
                watch = client.watch()
                print("revision", next(watch).revision, flush=True)
                threading.Thread(target=lambda: list(watch), daemon=True).start()
                """),
            ("its client closed", f"""
                with devplace.Client('{target}') as client:
                    watch = client.watch()
                    print("revision", next(watch).revision, flush=True)
                attempt(lambda: list(watch))
                """),
        )
        for case, body in cases:
            with self.subTest(case):
                out = self.job(body)
                self.assertEqual(out.splitlines()[0], "revision 1")
                # A watch whose Client was closed (at exit too) ends quietly: no thread's traceback.
                self.assertNotIn("Traceback", self.last_stderr)

    def test_a_dropped_client_closes_its_connection(self):
        """In this process: the TCP connection to the daemon is gone soon after the last reference to
        the Client (and to a Watch, which holds its Client) is dropped."""
        port = int(self.daemon.tcp_target.rpartition(":")[2])
        client = devplace.Client(self.daemon.tcp_target)
        self.assertTrue(client.health())
        self.assertEqual(connections_to(port), 1)
        watch = client.watch()
        self.assertEqual(next(watch).revision, 1)
        del client
        gc.collect()
        time.sleep(0.5)
        self.assertEqual(connections_to(port), 1)  # the watch still uses its client
        del watch
        gc.collect()
        deadline = time.monotonic() + 5
        while connections_to(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(connections_to(port), 0, "the connection stayed open after the Client was collected")


def connections_to(port: int) -> int:
    """How many established TCP connections this process has to 127.0.0.1:``port`` (/proc/net/tcp
    and tcp6, whose IPv4-mapped entries gRPC's sockets may be, matched to this process's sockets)."""
    sockets = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            sockets.add(link[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()  # sl local_address rem_address st ... inode (10th)
                remote_port = int(fields[2].rpartition(":")[2], 16)
                if remote_port == port and fields[3] == "01" and fields[9] in sockets:  # 01: ESTABLISHED
                    count += 1
    return count


if __name__ == "__main__":
    unittest.main()
