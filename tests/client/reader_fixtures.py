#!/usr/bin/env python3
"""The shared table of the clients' readers (tests/client/reader_table.txt): parses it and builds
each case's tree at test time (FIFOs, links to /dev/zero, sparse 1 GiB files, names that are not
UTF-8, symlink loops and 100,000 entries cannot be committed). Used by
tests/client/reader_table_test.cc (`reader_fixtures.py build TABLE DIR`, then libdevplace's readers
through tests/client/reader_dump) and tests/python/test_readers.py (imported; the Python client's
readers through tests/python/reader_dump.py).

Table syntax, one directive a line ('#' comments and blank lines skipped):
  case NAME READER [ARG]   a new case: READER is dra (ReadDeviceAllocation / device_allocation of
                           the tree, or of ARG under it), env (ReadPythonEnvironment /
                           job_environment(str) of the tree or ARG under it), or path (the sys.path
                           reader over ARG, a comma list of paths under the tree)
  limit KEY=VALUE ...      the reader's limits for this case: time (ms; default 60 s, so that a
                           loaded machine cannot change a result), total (bytes)
  make dir PATH | make file PATH TEXT | make fifo PATH | make link PATH TARGET
  make size PATH BYTES     (a sparse file) | make many PATTERN COUNT [TEXT] ({i} in PATTERN counts
                           from 0; a PATTERN ending in / makes directories)
  device CLAIM | TEMPLATE | REQUEST | DRIVER | POOL | NAME | k=v; k=v     (dra, in order)
  package NAME | VERSION   (env, path; in order)
  problem TEXT             (in order)
  source TEXT | source-bytes N
  error CODE TEXT          the call's error instead of a result
In PATH, TARGET, TEXT and expected lines: {tree} is the case's tree, {X*N} is the character X
(or escape) repeated N times, {(TEXT)*N} TEXT repeated N times (an expected line that becomes
several lines this way stands for them all),
and the escapes \\n \\t \\r \\xNN (a byte) and \\\\ (a backslash); any other backslash stays as it is
(a JSON escape such as \\ud800 is written as is).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from typing import Dict, List, Optional

_REPEAT = re.compile(r"\{\((.*?)\)\*(\d+)\}|\{(\\x[0-9a-fA-F]{2}|\\.|.)\*(\d+)\}")


def expand(text: str, tree: str = "") -> bytes:
    """The bytes a table text stands for."""
    text = text.replace("{tree}", tree)
    text = _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)) if m.group(2) else m.group(3) * int(m.group(4)), text)
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n in "ntr":
                out += {"n": b"\n", "t": b"\t", "r": b"\r"}[n]
                i += 2
                continue
            if n == "\\":
                out += b"\\"
                i += 2
                continue
            if n == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i + 2:i + 4]):
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
        out += c.encode("utf-8")
        i += 1
    return bytes(out)


class Case:
    def __init__(self, name: str, reader: str, arg: str, line: int) -> None:
        self.name, self.reader, self.arg, self.line = name, reader, arg, line
        self.limits: Dict[str, int] = {}
        self.make: List[List[str]] = []
        self.expected: List[str] = []

    def expected_lines(self, tree: str) -> List[str]:
        """The expected lines, trailing spaces dropped (compare them with a dump's lines likewise)."""
        lines = []
        for e in self.expected:
            lines.extend(line.rstrip(" ") for line in expand(e, tree).decode("utf-8").split("\n") if line)
        return lines


def read_table(path: str) -> List[Case]:
    cases: List[Case] = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            word, _, rest = line.strip().partition(" ")
            if word == "case":
                parts = rest.split(" ", 2)
                cases.append(Case(parts[0], parts[1], parts[2] if len(parts) > 2 else "", number))
            elif word == "limit":
                cases[-1].limits.update({k: int(v) for k, v in (kv.split("=") for kv in rest.split())})
            elif word == "make":
                kind, _, args = rest.partition(" ")
                cases[-1].make.append([kind] + (args.split(" ", 1) if kind in ("file", "link") else args.split(" ", 2)))
            else:
                cases[-1].expected.append(line.strip())
    return cases


def build(case: Case, tree: str) -> None:
    """Makes the case's tree under ``tree`` (which must not exist)."""
    root = os.fsencode(tree)
    os.makedirs(root)
    for step in case.make:
        kind, args = step[0], step[1:]
        path = os.path.join(root, expand(args[0], tree))
        if kind == "dir":
            os.makedirs(path, exist_ok=True)
            continue
        if kind != "many":
            os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == "file":
            with open(path, "wb") as f:
                f.write(expand(args[1] if len(args) > 1 else "", tree))
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "link":
            os.symlink(expand(args[1], tree), path)
        elif kind == "size":
            with open(path, "wb") as f:
                f.truncate(int(args[1]))
        elif kind == "many":
            count = int(args[1])
            text = expand(args[2], tree) if len(args) > 2 else None
            for i in range(count):
                p = path.replace(b"{i}", str(i).encode())
                os.makedirs(p if p.endswith(b"/") else os.path.dirname(p), exist_ok=True)
                if not p.endswith(b"/"):
                    with open(p, "wb") as f:
                        f.write(text or b"")
        else:
            raise ValueError(f"line {case.line}: unknown make step {kind}")


def reader_args(case: Case, tree: str) -> List[bytes]:
    """What reader_dump (C++ or Python) is given: READER, then the directory or the path entries."""
    if case.reader == "path":
        return [b"path"] + [os.path.join(os.fsencode(tree), expand(p, tree)) if p else b"" for p in case.arg.split(",")]
    target = os.path.join(os.fsencode(tree), expand(case.arg, tree)) if case.arg else os.fsencode(tree)
    return [case.reader.encode(), target]


def dump_args(case: Case, tree: str) -> List[bytes]:
    """reader_dump's arguments for the case: its limits, then reader_args."""
    # A case's own time budget, else a long one: a loaded machine must not change a result (the
    # tests bound each case's time themselves).
    limits = [b"--time_ms=%d" % case.limits.get("time", 60000)]
    if "total" in case.limits:
        limits.append(b"--total=%d" % case.limits["total"])
    return limits + reader_args(case, tree)


def prepare(table: str, out: str) -> List[Case]:
    """Builds every case's tree as OUT/NAME and writes OUT/NAME.args (reader_dump's arguments,
    NUL-separated) and OUT/NAME.expected (the expected lines), and OUT/cases (the names, in order),
    for tests that do not parse the table themselves."""
    cases = read_table(table)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for case in cases:
        tree = os.path.join(out, case.name)
        build(case, tree)
        with open(tree + ".args", "wb") as f:
            f.write(b"\0".join(dump_args(case, tree)))
        with open(tree + ".expected", "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in case.expected_lines(tree)))
    with open(os.path.join(out, "cases"), "w", encoding="utf-8") as f:
        f.write("".join(c.name + "\n" for c in cases))
    return cases


def compare(case_expected: List[str], dumped: List[str]) -> Optional[str]:
    """None when a dump's lines are the expected ones; else what differs. The source line counts only
    when the case states one (source TEXT, or source-bytes N: its length in bytes)."""
    got = [line.rstrip(" ") for line in dumped]
    want = list(case_expected)
    sizes = [w for w in want if w.startswith("source-bytes ")]
    if sizes:
        want.remove(sizes[0])
        source = next((g for g in got if g.startswith("source ")), "")
        if len(source[len("source "):].encode("utf-8")) != int(sizes[0].split()[1]):
            return f"source is {len(source.encode()) - 7} bytes, want {sizes[0].split()[1]}"
    if not any(w.startswith("source ") for w in want):
        got = [g for g in got if not g.startswith("source ")]
    return None if got == want else "got:\n  " + "\n  ".join(got) + "\nwant:\n  " + "\n  ".join(want)


def main(argv: List[str]) -> int:
    if len(argv) != 4 or argv[1] != "build":
        print("usage: reader_fixtures.py build TABLE DIR", file=sys.stderr)
        return 2
    prepare(argv[2], argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
