"""Helpers for the Python client's tests: the real devplaced on a fixture host, the devplace CLI,
temporary directories and a /dev view for a child process (a private mount namespace).

Paths come from the environment CTest sets (tests/python/CMakeLists.txt): DEVPLACE_DAEMON_BINARY,
DEVPLACE_CLI_BINARY, DEVPLACE_PROBE_BINARY, DEVPLACE_CAPTURE_DUMP, DEVPLACE_FIXTURES_DIR,
DEVPLACE_SOURCE_DIR, DEVPLACE_BINARY_DIR, DEVPLACE_CMAKE; PYTHONPATH holds the built package.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence

import devplace

DAEMON = os.environ.get("DEVPLACE_DAEMON_BINARY", "")
CLI = os.environ.get("DEVPLACE_CLI_BINARY", "")
PROBE = os.environ.get("DEVPLACE_PROBE_BINARY", "")
CAPTURE_DUMP = os.environ.get("DEVPLACE_CAPTURE_DUMP", "")
FAKE_NVML = os.environ.get("DEVPLACE_FAKE_NVML", "")
FIXTURES = os.environ.get("DEVPLACE_FIXTURES_DIR", "")
SOURCE_DIR = os.environ.get("DEVPLACE_SOURCE_DIR", "")
BINARY_DIR = os.environ.get("DEVPLACE_BINARY_DIR", "")
# Debian's, the supported interpreter (not whatever is first on PATH); inside a venv (test_wheel.py runs
# these tests from one, the wheel installed in it), that venv's.
PYTHON = sys.executable if sys.prefix != sys.base_prefix else "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))


def fixture(name: str) -> str:
    return os.path.join(FIXTURES, "hosts", name)


def h100_with_nvml(extra_flags: Sequence[str] = (), dir: Optional[str] = None) -> "Daemon":
    """devplaced on the nvidia-2x-h100 fixture with the fake NVML of tests/fakes (names, UUIDs, free
    memory: so max_memory budgets are filled); in ``dir`` (its socket and lease file) when given."""
    return Daemon(fixture("nvidia-2x-h100"), [f"--nvml_library={FAKE_NVML}"] + list(extra_flags), dir=dir,
                  env={"FAKE_NVML_CONFIG": os.path.join(FIXTURES, "nvml", "h100.txt")})


class TempDir:
    """A fresh /tmp/devplace-pytest-XXXX directory (short, for unix socket paths), removed on close."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="devplace-pytest-", dir="/tmp")

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def write(self, name: str, content: str, mode: int = 0o644) -> str:
        path = self.file(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content)
        os.chmod(path, mode)
        return path

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "TempDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """A child environment with no placement, DEVPLACE_* or XDG_RUNTIME_DIR variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in devplace.PLACEMENT_ENVIRONMENT_VARIABLES and not k.startswith("DEVPLACE_TLS_")
           and k not in ("DEVPLACE_ADDRESS", "XDG_RUNTIME_DIR")}
    env.update(extra or {})
    return env


class Daemon:
    """devplaced on ``host_root`` listening on ``unix:<dir>/d.sock`` and ``127.0.0.1:0``; a context manager.

    ``unix_target`` / ``tcp_target`` are its addresses; ``wait_serving()`` waits for the first
    probe; ``stop()`` sends SIGTERM and returns the exit status.
    """

    def __init__(self, host_root: str, extra_flags: Sequence[str] = (), dir: Optional[str] = None,
                 extra_listen: str = "", env: Optional[Dict[str, str]] = None) -> None:
        self._own_dir = TempDir() if dir is None else None
        self.dir = dir if dir is not None else self._own_dir.path
        self.socket_path = os.path.join(self.dir, "d.sock")
        self.unix_target = "unix:" + self.socket_path
        listen = f"{self.unix_target},127.0.0.1:0" + (f",{extra_listen}" if extra_listen else "")
        args = [DAEMON, f"--listen={listen}", f"--host_root={host_root}",
                "--metrics_listen="] + list(extra_flags)
        if not any(f.startswith("--torch_probe_command") for f in extra_flags):
            args.append("--torch_probe_command=none")
        self._log: List[str] = []
        self._cv = threading.Condition()
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=clean_env(env))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.wait_log("address=127.0.0.1:", 20) or not self.wait_log("address=unix:", 5):
            self.kill()
            raise RuntimeError("devplaced did not start listening; log:\n" + self.log())
        port = re.search(r"address=127\.0\.0\.1:([0-9]+)", self.log())
        assert port is not None
        self.tcp_target = f"127.0.0.1:{port.group(1)}"

    def logged_port(self, prefix: str, timeout: float = 10) -> str:
        """The port of the listener logged as ``address=<prefix><port>`` (e.g. prefix "tls:127.0.0.1:")."""
        self.wait_log("address=" + prefix, timeout)
        port = re.search("address=" + re.escape(prefix) + "([0-9]+)", self.log())
        if port is None:
            raise RuntimeError(f"no listener {prefix} in the log:\n" + self.log())
        return port.group(1)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._cv:
                self._log.append(line)
                self._cv.notify_all()

    def log(self) -> str:
        with self._cv:
            return "".join(self._log)

    def wait_log(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cv:
            while needle not in "".join(self._log):
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    return needle in "".join(self._log)
                self._cv.wait(min(left, 0.2))
            return True

    def wait_serving(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        with devplace.Client(self.unix_target, timeout=2) as client:
            while time.monotonic() < deadline:
                try:
                    if client.health():
                        return
                except devplace.Error:
                    pass
                time.sleep(0.02)
        raise RuntimeError("devplaced never became SERVING; log:\n" + self.log())

    def stop(self, timeout: float = 10) -> Optional[int]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.kill()
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self._own_dir is not None:
            self._own_dir.close()

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run(args: Sequence[str], env: Optional[Dict[str, str]] = None, timeout: float = 60,
        cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, env=env if env is not None else clean_env(),
                          timeout=timeout, cwd=cwd)


def cli(args: Sequence[str], env: Optional[Dict[str, str]] = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """Runs the devplace CLI (the C++ client) with ``args``."""
    return run([CLI] + list(args), env=env, timeout=timeout)


def cli_answer(result: subprocess.CompletedProcess) -> Dict[str, object]:
    """A `devplace --json resolve` run as {"response": dict} or {"error": "CODE: message"}."""
    if result.returncode == 0:
        return {"response": json.loads(result.stdout)}
    prefix = "devplace: resolve: "
    err = result.stderr.strip()
    # INVALID_ARGUMENT (a bad value) exits 2 like a usage error, the other codes 1.
    code = 2 if err.startswith(prefix + "INVALID_ARGUMENT: ") else 1
    assert result.returncode == code and err.startswith(prefix), (result.returncode, result.stderr)
    return {"error": err[len(prefix):]}


def without_source(answer: object, *sources: str) -> str:
    """An answer (a dict) as JSON text with each way of naming the job's environment replaced by
    <source>: the clients name the same packages differently ("importlib.metadata of ...",
    "package metadata under ...")."""
    text = json.dumps(answer, sort_keys=True)
    for s in sources:
        text = text.replace(json.dumps(s)[1:-1], "<source>")
    return text


_UNSHARE_OK: Optional[bool] = None


def can_unshare() -> bool:
    """Whether this process may make a private mount namespace (root, unshare(1), mount allowed)."""
    global _UNSHARE_OK
    if _UNSHARE_OK is None:
        with TempDir() as d:
            os.makedirs(d.file("dev"))
            probe = run(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                         f"mount --rbind {shlex.quote(d.file('dev'))} /dev"], timeout=20) \
                if shutil.which("unshare") else None
            _UNSHARE_OK = probe is not None and probe.returncode == 0
    return _UNSHARE_OK


def with_dev_view(command: str, nodes: Sequence[str], workdir: str) -> List[str]:
    """argv running the shell ``command`` in a private mount namespace whose /dev holds only
    ``nodes`` (empty files, e.g. "nvidia1", "dri/renderD128") plus null, zero, random and urandom
    (the host's). ``workdir`` holds the fake tree."""
    fake = os.path.join(workdir, "fakedev")
    setup = [f"rm -rf {shlex.quote(fake)}", f"mkdir -p {shlex.quote(fake)}"]
    for node in nodes:
        path = os.path.join(fake, node)
        setup.append(f"mkdir -p {shlex.quote(os.path.dirname(path))} && : > {shlex.quote(path)}")
    for real in ("null", "zero", "random", "urandom"):
        path = os.path.join(fake, real)
        setup.append(f": > {shlex.quote(path)} && mount --bind /dev/{real} {shlex.quote(path)}")
    setup.append(f"mount --rbind {shlex.quote(fake)} /dev")
    script = "set -e\n" + "\n".join(setup) + "\nset +e\n" + command + "\n"
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script]


def python_answer_script() -> str:
    return os.path.join(HERE, "resolve_json.py")
