"""Runs the shell blocks of the user docs that are marked runnable, against the real devplaced on a
fixture host, so the docs cannot drift from the binaries.

Usage: run_doc_blocks.py run FILE.md          every runnable block of FILE, in order
       run_doc_blocks.py check FILE.md...     every sh block carries a marker; no internal issue numbers;
                                              relative links lead to a file (and heading) that exists
       run_doc_blocks.py issues DIR           no internal issue numbers in the code, scripts and tests
                                              either (every text file under DIR but build trees and
                                              fixture data)

The marker is the fenced block's info string (docs/DEVELOPING.md "Docs that run"):

    ```sh runnable                    run it; the daemon is on tests/fixtures/hosts/nvidia-2x-h100
    ```sh runnable host=cpu-only      run it with the daemon on another fixture host
    ```sh manual                      not run: it needs what a test cannot give (a remote node, root's
                                      system paths, a long build); say so next to it

A command line of a runnable block whose comment is `# => TEXT` must print exactly TEXT (stdout).
A runnable block runs as it is written, after the README's run command: in a copy of the source
tree (top-level entries linked) where build/release and build/dev are this build tree, with
build/release/client on PATH (the quick start's export) and bash's -e -u -o pipefail, so any
failing command fails the block. The daemon the run command starts listens on
unix:/run/devplace/devplace.sock and 127.0.0.1:7465 with metrics on 127.0.0.1:9465; a test cannot
take those, so its daemon listens on a temporary socket and free ports, and those three addresses
(and port 7466, the docs' second daemon's TLS listener) are replaced in the block's text before it runs (DEVPLACE_ADDRESS names the socket, as the client
finds the default one). A daemon is started per fixture host and kept for the file's later blocks.

Paths come from the environment CTest sets (tests/docs/CMakeLists.txt), as for tests/python.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import devplace_testing  # noqa: E402  (the real devplaced on a fixture host, as the Python tests start it)

SHELL_LANGUAGES = ("sh", "bash", "shell", "console")
MARKERS = ("runnable", "manual")
DEFAULT_HOST = "nvidia-2x-h100"
BLOCK_TIMEOUT_S = 180
# The word issue followed by a space and a number, in any case or plural: internal tracker numbers
# mean nothing to a user or a newcomer. Another project's issue is written with '#' and the project
# ("Accelerate issue #3020", "grpc/grpc#20418").
INTERNAL_ISSUE = re.compile(r"\b[Ii]ssues? [0-9]+")
# Not read by `issues DIR`: build trees, installed tools, and fixture data copied from real hosts.
SKIPPED_DIRS = {".git", ".tools", "build", "node_modules", "__pycache__", "fixtures"}


@dataclass
class Block:
    path: str
    line: int  # of the opening fence, 1-based
    language: str
    options: Dict[str, str] = field(default_factory=dict)
    text: str = ""


def blocks(path: str) -> List[Block]:
    """The fenced code blocks of a Markdown file, with their info strings split into language and options.

    Fences as CommonMark has them: at most 3 spaces of indentation, 3 or more backticks, an info string
    without backticks; a block ends at a fence of at least as many backticks and nothing else."""
    found: List[Block] = []
    current = None
    opening = ""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            fence = re.match(r"^ {0,3}(`{3,})([^`]*)$", line.rstrip("\n"))
            if current is None and fence:
                opening = fence.group(1)
                words = fence.group(2).split()
                options = {}
                for word in words[1:]:
                    key, _, value = word.partition("=")
                    options[key] = value
                current = Block(path, number, words[0] if words else "", options)
            elif (current is not None and fence and fence.group(1).startswith(opening)
                  and not fence.group(2).strip()):
                found.append(current)
                current = None
            elif current is not None:
                current.text += line
    if current is not None:
        raise SystemExit(f"{path}:{current.line}: code block never closed")
    return found


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: str) -> List[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation but '-' dropped,
    spaces as '-' (outside code blocks)."""
    found = []
    fenced = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^ {0,3}```", line):
                fenced = not fenced
            heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*$", line)
            if heading:
                found.append(re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-"))
    return found


def link_errors(path: str) -> List[str]:
    """Relative links of a page that lead nowhere: a missing file, or an anchor no heading has."""
    errors = []
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        line = text.count("\n", 0, match.start()) + 1
        if not os.path.exists(resolved):
            errors.append(f"{path}:{line}: link to {target}: no such file")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            errors.append(f"{path}:{line}: link to {target}: no heading with that anchor")
    return errors


def check(paths: List[str]) -> int:
    errors = []
    for path in paths:
        errors += link_errors(path)
        for block in blocks(path):
            if block.language in SHELL_LANGUAGES and not any(m in block.options for m in MARKERS):
                errors.append(f"{path}:{block.line}: ```{block.language} block without a marker: add `runnable` "
                              "(run by ctest docs.run.*) or `manual` (not run; say why next to it)")
            for key in block.options:
                if key not in MARKERS + ("host",):
                    errors.append(f"{path}:{block.line}: unknown block option {key!r}: want runnable, manual, host=NAME")
            host = block.options.get("host")
            if host is not None and not os.path.isdir(devplace_testing.fixture(host)):
                errors.append(f"{path}:{block.line}: host={host}: no such fixture host in tests/fixtures/hosts")
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for match in INTERNAL_ISSUE.finditer(line):
                    errors.append(f"{path}:{number}: internal issue number {match.group(0)!r}: say what it is about")
    for error in errors:
        print(error)
    print(f"checked {len(paths)} files: {len(errors)} problems")
    return 1 if errors else 0


class Sandbox:
    """The source tree as the docs see it after the run command: top-level entries linked, build/release
    and build/dev being this build tree."""

    def __init__(self, temp: str) -> None:
        self.root = os.path.join(temp, "repo")
        os.makedirs(os.path.join(self.root, "build"))
        source = devplace_testing.SOURCE_DIR
        for name in os.listdir(source):
            if name not in ("build", ".git"):
                os.symlink(os.path.join(source, name), os.path.join(self.root, name))
        for preset in ("release", "dev"):
            os.symlink(devplace_testing.BINARY_DIR, os.path.join(self.root, "build", preset))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substituted(text: str, daemon: devplace_testing.Daemon, metrics: str, tls_port: int) -> str:
    """The block with the run command's addresses replaced by the test daemon's, and the TLS port the
    docs use for a second daemon (7466) by a free one."""
    return (text.replace("/run/devplace/devplace.sock", daemon.socket_path)
            .replace("127.0.0.1:7465", daemon.tcp_target)
            .replace("127.0.0.1:9465", metrics)
            .replace(":7466", f":{tls_port}"))


# A command line whose comment is "# => TEXT" must print exactly TEXT on stdout.
EXPECTED_OUTPUT = re.compile(r"^(?P<command>[^#\\]*[^#\s\\])\s+# => (?P<want>.+?)\s*$")


def with_expectations(script: str) -> str:
    """The script with each `command   # => TEXT` line checked: it still runs the command as written,
    prints its output, and fails the block when the output is not TEXT."""
    lines = []
    continued = False  # the line before ended in a backslash: this one is part of its command
    for line in script.splitlines():
        match = None if continued else EXPECTED_OUTPUT.match(line)
        continued = line.endswith("\\")
        if match is None:
            lines.append(line)
            continue
        want = shlex.quote(match.group("want"))
        lines.append(f"__out=$({match.group('command')}); printf '%s\\n' \"$__out\"; "
                     f"[ \"$__out\" = {want} ] || {{ echo \"docs: printed '$__out'; the docs say:\" {want} >&2; exit 1; }}")
    return "\n".join(lines) + "\n"


def run(path: str) -> int:
    runnable = [b for b in blocks(path) if "runnable" in b.options]
    if not runnable:
        print(f"{path}: no runnable blocks")
        return 0
    failures = 0
    with tempfile.TemporaryDirectory(prefix="devplace-docs-", dir="/tmp") as temp:
        sandbox = Sandbox(temp)
        tls_port = free_port()
        daemons: Dict[str, devplace_testing.Daemon] = {}
        try:
            for block in runnable:
                host = block.options.get("host") or DEFAULT_HOST
                if host not in daemons:
                    daemon = devplace_testing.Daemon(devplace_testing.fixture(host),
                                                     ["--metrics_listen=127.0.0.1:0"])
                    daemon.wait_serving()
                    daemons[host] = daemon
                daemon = daemons[host]
                metrics = "127.0.0.1:" + metrics_port(daemon)
                script = with_expectations(substituted(block.text, daemon, metrics, tls_port))
                env = devplace_testing.clean_env({
                    "DEVPLACE_ADDRESS": daemon.unix_target,
                    "PATH": os.path.join(sandbox.root, "build", "release", "client") + ":" + os.environ["PATH"],
                    "PWD": sandbox.root,
                })
                env.pop("PYTHONPATH", None)  # the docs set it where they need it
                result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=sandbox.root, env=env,
                                        capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
                where = f"{path}:{block.line} (host {host})"
                if result.returncode != 0:
                    failures += 1
                    print(f"FAIL {where}: exit {result.returncode}\n--- block as run:\n{script}--- stdout:\n"
                          f"{result.stdout}--- stderr:\n{result.stderr}---")
                else:
                    print(f"ok   {where}: {len(script.splitlines())} lines, {len(result.stdout)} bytes of output\n"
                          f"--- stdout (first 3000 bytes):\n{result.stdout[:3000]}--- stderr:\n{result.stderr[:3000]}---")
        finally:
            for daemon in daemons.values():
                daemon.close()
    print(f"{path}: {len(runnable)} runnable blocks, {failures} failed")
    return 1 if failures else 0


def metrics_port(daemon: devplace_testing.Daemon) -> str:
    daemon.wait_log("event=metrics_listening", 10)
    port = re.search(r"url=http://127\.0\.0\.1:([0-9]+)/metrics", daemon.log())
    if port is None:
        raise RuntimeError("devplaced logged no metrics address:\n" + daemon.log())
    return port.group(1)


def issue_numbers(root: str) -> int:
    errors = []
    read = 0
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.startswith("build"))
        for name in sorted(files):
            path = os.path.join(directory, name)
            if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > (1 << 20):
                continue
            try:
                with open(path, encoding="utf-8") as f:
                    lines = f.readlines()
            except (UnicodeDecodeError, OSError):
                continue  # not text
            read += 1
            for number, line in enumerate(lines, 1):
                for match in INTERNAL_ISSUE.finditer(line):
                    errors.append(f"{os.path.relpath(path, root)}:{number}: internal issue number {match.group(0)!r}: "
                                  "say what it is about")
    for error in errors:
        print(error)
    print(f"checked {read} text files under {root}: {len(errors)} internal issue numbers")
    return 1 if errors else 0


def main(argv: List[str]) -> int:
    if len(argv) >= 3 and argv[1] == "check":
        return check(argv[2:])
    if len(argv) == 3 and argv[1] == "issues":
        return issue_numbers(argv[2])
    if len(argv) == 3 and argv[1] == "run":
        return run(argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
