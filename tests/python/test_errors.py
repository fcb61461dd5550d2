"""Errors raise with the right gRPC code and the daemon's message; arguments the request cannot
carry fail before any call; the socket-trust rules and UNAVAILABLE notes match the CLI's."""

import os
import shlex
import shutil
import signal
import socket
import unittest
from unittest import mock

import grpc

import devplace
from devplace import _connect_diagnosis
from devplace_testing import CLI, PROBE, PYTHON, Daemon, TempDir, clean_env, cli, fixture, run


class DaemonErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(fixture("nvidia-2x-h100"), ["--refresh_interval=0s", "--refresh_min_interval=1h"])
        cls.daemon.wait_serving()
        cls.client = devplace.Client(cls.daemon.unix_target)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.close()

    def test_invalid_argument(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve("training", from_environment=False, env={"LOCAL_RANK": "abc"})
        e = raised.exception
        self.assertIsInstance(e, devplace.ResolveError)
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("env.LOCAL_RANK", e.message)
        self.assertTrue(str(e).startswith("INVALID_ARGUMENT: "))

    def test_failed_precondition_lists_what_is_visible(self):
        with self.assertRaises(devplace.FailedPreconditionError) as raised:
            self.client.resolve("inference", "cuda:5", from_environment=False)
        self.assertEqual(raised.exception.code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("cuda:0", raised.exception.message)

    def test_strict_turns_a_hazard_into_failed_precondition(self):
        answer = self.client.resolve("training", convention="accelerate", from_environment=False, local_rank=3,
                                     world_size=4)
        self.assertEqual(answer.device, "cuda:1")
        self.assertTrue(any("local rank(s) 1" in w for w in answer.warnings), answer.warnings)
        with self.assertRaises(devplace.FailedPreconditionError):
            self.client.resolve("training", convention="accelerate", strict=True, from_environment=False,
                                local_rank=3, world_size=4)

    def test_unknown_enum_number_is_the_daemons_invalid_argument(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve(99, from_environment=False)
        self.assertIn("workload", raised.exception.message)

    def test_refresh_rate_limit_and_permission(self):
        self.client.refresh()
        with self.assertRaises(devplace.ResourceExhaustedError) as raised:
            self.client.refresh()  # within --refresh_min_interval
        self.assertEqual(raised.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("ms", raised.exception.message)
        with devplace.Client(self.daemon.tcp_target) as tcp, self.assertRaises(devplace.PermissionDeniedError):
            tcp.refresh()

    def test_bad_arguments_fail_before_any_call(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve("eval")
        self.assertIn("workload='eval': want 'training' or 'inference'", raised.exception.message)
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve("inference", convention="trainer")
        self.assertIn("convention='trainer'", raised.exception.message)
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve("inference", {"": 0})
        self.assertIn("device_map=", raised.exception.message)
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            self.client.resolve("training", local_rank=2**31)
        self.assertIn("local_rank=2147483648: want an integer", raised.exception.message)
        with self.assertRaises(TypeError) as raised:
            self.client.resolve("training", rank=1)
        self.assertIn("rank", str(raised.exception))
        self.assertIn("job_device_nodes", str(raised.exception))

    def test_a_timeout_that_is_not_seconds_is_refused_naming_it(self):
        # Client, resolve_device and pick: a bool, a string, NaN or infinity raises before anything is
        # sent or set (pick leaves os.environ as it was); None, 0 and less mean no deadline, as documented.
        before = dict(os.environ)
        for bad in (True, "5", "5s", float("nan"), float("inf"), [5]):
            for call in (lambda: devplace.Client(self.daemon.unix_target, timeout=bad),
                         lambda: devplace.resolve_device("inference", address=self.daemon.unix_target, timeout=bad),
                         lambda: devplace.pick(address=self.daemon.unix_target, timeout=bad)):
                with self.assertRaises(devplace.InvalidArgumentError, msg=repr(bad)) as raised:
                    call()
                self.assertEqual(raised.exception.message,
                                 f"timeout: {bad!r}: want seconds as a finite number (e.g. 5 or 0.5), or None or 0 "
                                 "(or less) for no deadline")
            with self.assertRaises(devplace.InvalidArgumentError) as raised:
                devplace.Client(self.daemon.unix_target, watch_timeout=bad)
            self.assertTrue(raised.exception.message.startswith(f"watch_timeout: {bad!r}: want seconds"))
        self.assertEqual(dict(os.environ), before)
        for none in (None, 0, -1, -0.5):
            with devplace.Client(self.daemon.unix_target, timeout=none, watch_timeout=none) as client:
                self.assertEqual(client.resolve("training", from_environment=False).device, "cuda:0")
        self.assertEqual(devplace.resolve_device("training", address=self.daemon.unix_target, timeout=2,
                                                 from_environment=False), "cuda:0")


class FrozenDaemon(unittest.TestCase):
    """A daemon that accepts connections but never answers (stopped with SIGSTOP) gets each client's
    one line naming the target, the time waited and what to check, not a bare "Deadline Exceeded"."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(fixture("nvidia-2x-h100"))
        cls.daemon.wait_serving()
        cls.daemon.process.send_signal(signal.SIGSTOP)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.process.send_signal(signal.SIGCONT)
        cls.daemon.close()

    def assert_named(self, message: str, waited: str, python: bool, root: bool = os.geteuid() == 0,
                     target: str = "") -> None:
        target = target or self.daemon.unix_target
        self.assertIn(f"devplaced at {target} did not answer within {waited}", message)
        if root:  # root may read the journal of the package's unit
            self.assertIn("`systemctl status devplaced` and `journalctl -u devplaced` where it runs as the "
                          "package's unit", message)
        else:  # an ordinary user usually may not: the operator is who checks
            self.assertIn("ask the host's operator to check it", message)
            self.assertNotIn("journalctl", message)
        if python:  # Python's own terms, not the CLI's flags
            self.assertIn("(address=, DEVPLACE_ADDRESS), or allow more time (timeout=, in seconds", message)
            self.assertNotIn("--timeout", message)
            self.assertNotIn("--address", message)
        else:
            self.assertIn("devplace --address", message)
            self.assertIn("devplace --timeout=D", message)
        self.assertNotIn("\n", message)

    def test_cli(self):
        for command in (["inventory"], ["pick", "--ttl=1m", "--no_environment"]):
            with self.subTest(command=command):
                r = cli([f"--address={self.daemon.unix_target}", "--timeout=1s"] + command)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn("DEADLINE_EXCEEDED", r.stderr)
                self.assert_named(r.stderr.strip(), "1s", python=False)

    def test_cli_as_an_ordinary_user(self):
        """An ordinary user (nobody, by setpriv; test_cli is that case where the suite runs unprivileged)
        over loopback TCP is told to ask the host's operator, never to read a journal it cannot."""
        if os.geteuid() != 0:
            self.skipTest("setpriv needs root; test_cli checks the ordinary user's sentence")
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"  # util-linux, Essential in Debian
        r = run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", CLI,
                 f"--address={self.daemon.tcp_target}", "--timeout=1s", "inventory"], timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assert_named(r.stderr.strip(), "1s", python=False, root=False, target=self.daemon.tcp_target)

    def test_the_sentence_by_user(self):
        """Both of Python's sentences, whoever runs the suite: root's and an ordinary user's."""
        self.assert_named(_connect_diagnosis.no_answer(self.daemon.unix_target, 2, root=True), "2s",
                          python=True, root=True)
        self.assert_named(_connect_diagnosis.no_answer(self.daemon.unix_target, 2, root=False), "2s",
                          python=True, root=False)

    def test_python(self):
        with devplace.Client(self.daemon.unix_target, timeout=1) as client:
            with self.assertRaises(devplace.DeadlineExceededError) as raised:
                client.inventory()
            self.assert_named(raised.exception.message, "1s", python=True)
            request = devplace.make_pick_request(ttl=60, wait=0.5, job=devplace.for_job({}))
            with self.assertRaises(devplace.DeadlineExceededError) as raised:
                client.pick_request(request)
            self.assert_named(raised.exception.message, "1.5s", python=True)


class UnreachableAndEarly(unittest.TestCase):
    def test_unavailable_names_the_target(self):
        with devplace.Client("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(devplace.UnavailableError) as raised:
                client.health()
        self.assertEqual(raised.exception.code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("[devplace target 127.0.0.1:1 (from address)", raised.exception.message)

    def test_deadline_exceeded(self):
        silent = socket.socket()  # accepts connections, never speaks HTTP/2
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        try:
            with devplace.Client(f"127.0.0.1:{silent.getsockname()[1]}", timeout=0.5) as client:
                with self.assertRaises(devplace.DeadlineExceededError) as raised:
                    client.inventory()
            self.assertEqual(raised.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        finally:
            silent.close()

    def test_no_inventory_yet_is_the_daemons_unavailable(self):
        with TempDir() as dir:
            slow = dir.write("slow-probe", f"#!/bin/sh\nsleep 2\nexec {shlex.quote(PROBE)} \"$@\"\n", 0o755)
            with Daemon(fixture("cpu-only"), [f"--probe_command={slow}"], dir=dir.path) as daemon:
                with devplace.Client(daemon.tcp_target) as client:
                    with self.assertRaises(devplace.UnavailableError) as raised:
                        client.resolve("inference", from_environment=False)
                    self.assertIn("no inventory yet", raised.exception.message)
                    # The daemon answered: no note about reaching it.
                    self.assertNotIn("[devplace target", raised.exception.message)
                    daemon.wait_serving()
                    self.assertEqual(client.resolve("inference", from_environment=False).device, "cpu")

    def test_no_daemon_names_the_likely_cause_and_the_command_that_starts_it(self):
        # Root is told the command that starts the daemon; any other user, who cannot run it, is not
        # (the next test).
        hint = ("devplaced is probably not running: start it with `sudo systemctl start devplaced`"
                if os.geteuid() == 0 else "devplaced is not answering there")
        with TempDir() as dir:
            path = dir.file("devplace.sock")
            with devplace.Client("unix:" + path) as client:
                with self.assertRaises(devplace.UnavailableError) as raised:
                    client.inventory()
            self.assertTrue(raised.exception.message.startswith(f"no socket at {path}: {hint}"),
                            raised.exception.message)
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()  # nothing listens there now
        with devplace.Client(f"127.0.0.1:{port}") as client:
            with self.assertRaises(devplace.UnavailableError) as raised:
                client.health()
        self.assertIn(f"nothing listens on 127.0.0.1:{port} (connection refused): {hint}", raised.exception.message)
        self.assertIn("(gRPC: ", raised.exception.message)
        self.assertIn(f"[devplace target 127.0.0.1:{port} (from address)", raised.exception.message)

    def test_an_ordinary_user_with_the_daemon_down_is_told_to_ask_the_operator_not_to_start_it(self):
        # nobody (Debian's setpriv) meets a daemon that is down, through Python pick(wait=...), a
        # Client call and the CLI's run --wait and inventory: no socket (stopped), then a socket
        # left behind (a daemon killed, as during a restart). A waiting pick asks again until its wait
        # (2 s) ends, then each names the socket, says the daemon
        # is not answering and to ask the host's operator, and never tells the user to start it.
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to run as nobody")
        package = os.path.abspath(devplace.__file__)
        if run(as_nobody + [PYTHON, "-c", "import devplace"]).returncode or \
                run(as_nobody + ["test", "-r", package, "-a", "-x", CLI]).returncode:
            self.skipTest("nobody cannot import devplace or run the CLI here (the checkout's or the venv's path)")
        script = ("import sys, devplace\ntry:\n    devplace.pick(wait=2, address=sys.argv[1])\n"
                  "except devplace.UnavailableError as e:\n    print(e.message)\ntry:\n"
                  "    devplace.Client(sys.argv[1]).inventory()\nexcept devplace.UnavailableError as e:\n"
                  "    print(e.message)\n")
        advice = ("devplaced is not answering there (it is stopped, or restarting as a package upgrade does): try "
                  "again in a moment, or ask the host's operator to check it")

        def check(target, cause):
            python = run(as_nobody + [PYTHON, "-c", script, target])
            self.assertEqual(python.returncode, 0, python.stderr)
            messages = python.stdout.splitlines()
            self.assertEqual(len(messages), 2, python.stdout)
            for message in messages:
                self.assertTrue(message.startswith(f"{cause}: {advice}"), message)
            for args in (["run", "--wait=2s", "--", "true"], ["inventory"]):
                command = run(as_nobody + [CLI, f"--address={target}"] + args)
                self.assertEqual(command.returncode, 1, command.stderr)
                self.assertIn(f"UNAVAILABLE: {cause}: {advice}", command.stderr)
                messages.append(command.stderr)
            for message in messages:
                self.assertNotIn("systemctl", message)
                self.assertNotIn("start it", message)
                self.assertNotIn("run `devplaced`", message)

        with Daemon(fixture("cpu-only"), ["--lease_state_file=none"]) as daemon:
            os.chmod(daemon.dir, 0o755)
            daemon.wait_serving()
            daemon.kill()
            check(daemon.unix_target, f"{daemon.socket_path} is a socket nobody accepts on (left behind by a "
                                      "devplaced that stopped)")
            os.unlink(daemon.socket_path)
            check(daemon.unix_target, f"no socket at {daemon.socket_path}")

    def test_a_socket_this_user_may_not_open_names_its_mode_group_and_the_fix(self):
        # A real devplaced whose socket is 0660 root:root, dialled by nobody (Debian's setpriv) through
        # both clients: the cause first (the socket's mode, owner and group, the user), then the fixes,
        # not gRPC's bare "Permission denied".
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to connect as nobody")
        package = os.path.abspath(devplace.__file__)  # the build tree's, or a venv's with the wheel
        if run(as_nobody + [PYTHON, "-c", "import devplace"]).returncode or \
                run(as_nobody + ["test", "-r", package, "-a", "-x", CLI]).returncode:
            self.skipTest("nobody cannot import devplace or run the CLI here (the checkout's or the venv's path)")
        with Daemon(fixture("nvidia-2x-h100"), ["--socket_mode=0660", "--lease_state_file=none"]) as daemon:
            os.chmod(daemon.dir, 0o755)
            expected = (f"permission denied: the socket {daemon.socket_path} (mode 0660, owner uid 0, group root) does "
                        "not let this user (uid 65534) connect; the host's operator runs devplaced with "
                        "--socket_group=GROUP (a group for devplace's users; the socket's group is root now) and adds "
                        "the user to GROUP (effective at the next login) or runs devplaced with --socket_mode=0666, "
                        "its default; "
                        "meanwhile --address=127.0.0.1:7465 (DEVPLACE_ADDRESS) reaches the daemon over loopback TCP")
            script = ("import devplace\ntry:\n    devplace.Client(%r).inventory()\nexcept devplace.UnavailableError as e:\n"
                      "    print(e.message)\n") % daemon.unix_target
            python = run(as_nobody + [PYTHON, "-c", script])
            self.assertEqual(python.returncode, 0, python.stderr)
            self.assertTrue(python.stdout.startswith(expected), python.stdout)
            self.assertIn("(gRPC: ", python.stdout)  # gRPC's own words stay, after the cause
            command = run(as_nobody + [CLI, f"--address={daemon.unix_target}", "inventory"])
            self.assertEqual(command.returncode, 1, command.stderr)
            self.assertTrue(command.stderr.startswith(f"devplace: inventory: UNAVAILABLE: {expected}"), command.stderr)
            # A directory above the socket that nobody may search: refused before any call, also cause first.
            os.chmod(daemon.dir, 0o700)
            expected = (f"permission denied: a directory above {daemon.socket_path} does not let this user (uid 65534) "
                        "reach the socket; the host's operator lets the user search that directory (its mode or "
                        "group); meanwhile --address=127.0.0.1:7465 (DEVPLACE_ADDRESS) reaches the daemon")
            script = script.replace("UnavailableError", "FailedPreconditionError")
            python = run(as_nobody + [PYTHON, "-c", script])
            self.assertEqual(python.returncode, 0, python.stderr)
            self.assertIn(f"(from address): {expected}", python.stdout)
            command = run(as_nobody + [CLI, f"--address={daemon.unix_target}", "inventory"])
            self.assertEqual(command.returncode, 1, command.stderr)
            self.assertIn(f"FAILED_PRECONDITION: refusing {daemon.unix_target} (from --address", command.stderr)
            self.assertIn(f"): {expected}", command.stderr)

    def test_cpu_fallback_is_opt_in_and_only_for_no_answer(self):
        with TempDir() as dir:
            nowhere = "unix:" + dir.file("none.sock")
            with mock.patch.dict(os.environ, {"DEVPLACE_FALLBACK": ""}):
                with self.assertRaises(devplace.UnavailableError):  # off by default
                    devplace.resolve_device("inference", "auto", address=nowhere)
            with self.assertWarns(RuntimeWarning) as warned:
                answer = devplace.Client(nowhere).resolve("inference", "auto", fallback="cpu")
            self.assertEqual((answer.device, answer.devices, answer.backend), ("cpu", ["cpu"], "ROW_CPU"))
            self.assertEqual(len(answer.warnings), 1)
            self.assertTrue(answer.warnings[0].startswith("devplace fallback: answered cpu without the daemon"))
            self.assertIn("UNAVAILABLE: no socket at", answer.warnings[0])
            self.assertEqual(str(warned.warning), answer.warnings[0])
            # From the environment, as a pod sets it; the one-liner too.
            with mock.patch.dict(os.environ, {"DEVPLACE_FALLBACK": "cpu"}):
                with self.assertWarns(RuntimeWarning):
                    self.assertEqual(devplace.resolve_device("training", address=nowhere), "cpu")
                with self.assertRaises(devplace.UnavailableError):  # the environment is not read
                    devplace.resolve_device("training", address=nowhere, from_environment=False)
            with self.assertRaises(devplace.InvalidArgumentError) as raised:
                devplace.resolve_device("training", address=nowhere, fallback="gpu")
            self.assertIn("accepted: cpu", raised.exception.message)
            # With a daemon, its answers and refusals stand.
            with Daemon(fixture("nvidia-2x-h100"), dir=dir.path) as daemon:
                daemon.wait_serving()
                with devplace.Client(daemon.unix_target) as client:
                    self.assertEqual(client.resolve("inference", "auto", from_environment=False,
                                                    fallback="cpu").device, "cuda:0")
                    with self.assertRaises(devplace.FailedPreconditionError):
                        client.resolve("inference", "cuda:7", from_environment=False, fallback="cpu")
        # The CLI, over libdevplace, gives the same answer.
        result = cli(["--address=" + nowhere, "resolve", "--workload=inference", "--no_environment",
                      "--fallback=cpu"], env=clean_env())
        self.assertEqual((result.returncode, result.stdout), (0, "cpu\n"), result.stderr)
        self.assertIn("devplace: warning: devplace fallback: answered cpu without the daemon", result.stderr)

    def test_relative_device_nodes_are_refused(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            devplace.make_request("training", job_device_nodes=["nvidia0"])
        self.assertIn("'nvidia0' is not an absolute path", raised.exception.message)


class SocketTrust(unittest.TestCase):
    def setUp(self):
        self.dir = TempDir()
        self.addCleanup(self.dir.close)
        self.open_dir = self.dir.file("open")
        os.makedirs(self.open_dir)
        os.chmod(self.open_dir, 0o777)  # anyone could replace a socket here
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(os.path.join(self.open_dir, "devplace.sock"))
        self.addCleanup(self.sock.close)
        self.path = os.path.join(self.open_dir, "devplace.sock")

    def test_check_unix_socket(self):
        with self.assertRaises(devplace.FailedPreconditionError) as raised:
            devplace.check_unix_socket(self.path)
        self.assertIn("writable by group or others without the sticky bit", raised.exception.message)
        with self.assertRaises(devplace.NotFoundError):
            devplace.check_unix_socket(self.dir.file("missing.sock"))
        with self.assertRaises(devplace.FailedPreconditionError) as raised:
            devplace.check_unix_socket(self.dir.write("file", ""))
        self.assertIn("is not a socket", raised.exception.message)
        os.chmod(self.open_dir, 0o1777)  # sticky, like /tmp: trusted
        devplace.check_unix_socket(self.path)

    def test_explicit_unsafe_socket_is_refused_like_the_cli(self):
        with self.assertRaises(devplace.FailedPreconditionError) as raised:
            devplace.Client("unix:" + self.path)
        self.assertIn(f"refusing unix:{self.path} (from address): socket directory", raised.exception.message)
        devplace.Client("unix:" + self.path, trust_any_socket=True).close()
        with mock.patch.dict(os.environ, {"DEVPLACE_ADDRESS": "unix:" + self.path}):
            with self.assertRaises(devplace.FailedPreconditionError) as raised:
                devplace.Client()
            self.assertIn("(from DEVPLACE_ADDRESS)", raised.exception.message)
        result = cli(["health"], env=clean_env({"DEVPLACE_ADDRESS": "unix:" + self.path}))
        self.assertEqual(result.returncode, 1)
        self.assertIn("FAILED_PRECONDITION", result.stderr)
        self.assertIn("writable by group or others without the sticky bit", result.stderr)

    def test_unix_target_without_path(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            devplace.Client("unix:")
        self.assertIn("a unix: target needs a socket path", raised.exception.message)

    def test_default_target_passes_over_unsafe_sockets_like_the_cli(self):
        env = clean_env({"XDG_RUNTIME_DIR": self.open_dir})
        notes = []
        with mock.patch.dict(os.environ, {"XDG_RUNTIME_DIR": self.open_dir}):
            os.environ.pop("DEVPLACE_ADDRESS", None)
            target = devplace.default_target(notes)
            python_error = None
            try:
                with devplace.Client(timeout=3) as client:
                    client.health()
            except devplace.UnavailableError as e:
                python_error = e.message
        if target != "127.0.0.1:7465" or python_error is None:
            # Another devplaced on this machine (a system one at /run/devplace, or another test's) is found
            # before the XDG candidate is even looked at.
            self.skipTest(f"a daemon answers at the default target {target} on this machine")
        self.assertIn(f"unix:{self.path} (socket directory {self.open_dir} is writable by group or others", "; ".join(notes))
        result = cli(["--timeout=3s", "health"], env=env)
        self.assertEqual(result.returncode, 1, result.stderr)
        # The same target, origin and passed-over sockets as libdevplace's UNAVAILABLE note; how to
        # choose in each one's terms (Python's address=, the CLI's --address).
        note = python_error[python_error.index("[devplace target"):]
        self.assertIn("(default; DEVPLACE_ADDRESS is not set)", note)
        self.assertTrue(note.endswith("; set DEVPLACE_ADDRESS or address= to choose the daemon]"), note)
        self.assertIn(note.replace(" address= to choose", " --address to choose"), result.stderr)


class TlsArguments(unittest.TestCase):
    def test_unusable_files_name_the_option_or_variable(self):
        with self.assertRaises(devplace.InvalidArgumentError) as raised:
            devplace.Client("127.0.0.1:7466", tls=devplace.TlsOptions(ca="/nonexistent/ca.pem"))
        self.assertEqual(raised.exception.message, "tls_ca=/nonexistent/ca.pem: cannot read: No such file or directory")
        with TempDir() as dir:
            not_pem = dir.write("x.pem", "hello\n")
            with self.assertRaises(devplace.InvalidArgumentError) as raised:
                devplace.Client("127.0.0.1:7466", tls=devplace.TlsOptions(ca=not_pem))
            self.assertEqual(raised.exception.message, f"tls_ca={not_pem}: holds no PEM certificate")
            with mock.patch.dict(os.environ, {"DEVPLACE_TLS_CERT": not_pem}):
                with self.assertRaises(devplace.InvalidArgumentError) as raised:
                    devplace.Client("127.0.0.1:7466")
                self.assertIn("DEVPLACE_TLS_CERT is set without tls_key", raised.exception.message)
            # unix: targets stay plaintext: TLS settings are not even read.
            devplace.Client("unix:" + dir.file("d.sock"), tls=devplace.TlsOptions(ca=not_pem)).close()


if __name__ == "__main__":
    unittest.main()
