"""The job's Python packages, read from package metadata: the Python peer of libdevplace's
client/python_environment.cc (ReadPythonEnvironment, ``devplace resolve --python_env``, and the
sys.path reading behind ``--python``). It owns :func:`job_environment`, which lists the
distributions of :data:`JOB_PYTHON_PACKAGES` found on a path (this interpreter's ``sys.path`` by
default) or in a named environment without importing any of them, for
``ResolveDeviceRequest.job_environment``, and :func:`normalize_name`, PEP 503's comparison of
distribution names. The files are found as importlib.metadata finds them and read under the
bounds of _read.py; nothing they hold raises. tests/client/reader_table.txt holds this reader and
the C++ one to the same results, hostile environments included; tests/python/test_job_environment.py
checks that it and the CLI's ``--python_env`` / ``--python`` agree on every fixture environment.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from typing import List, Set, Tuple, Union

from . import _read
from ._placement_env import JOB_PYTHON_PACKAGES
from .errors import InvalidArgumentError
from .v1 import devplace_pb2

__all__ = ["JOB_PYTHON_PACKAGES", "job_environment", "normalize_name"]

# The bounds of JobEnvironment (devplace.proto); the daemon refuses a request beyond them.
_MAX_NAME_BYTES = 128
_MAX_VERSION_BYTES = 128
_MAX_SOURCE_BYTES = 512
_MAX_PATH_ENTRIES = 256
# The bounds of one call (internal::PythonLimits()): time, a METADATA's headers, all files, the
# matching entries of a directory.
_LIMITS = (5.0, 64 * _read.KIB, 16 * _read.MIB, 1024)
_WANTED = frozenset(n.encode() for n in JOB_PYTHON_PACKAGES)


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them ("Torch_NPU" -> "torch-npu")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _normalize(name: bytes) -> bytes:
    return re.sub(rb"[-_.]+", b"-", name).lower()  # bytes.lower(): ASCII only, as the C++ reader


def _entry_distribution(name: bytes) -> bytes:
    """The distribution a *.dist-info / *.egg-info entry holds, as importlib.metadata's Lookup names it
    (written for speed: it sees every entry of a site directory)."""
    low = name.lower()
    if not (low.endswith(b".dist-info") or low.endswith(b".egg-info")):
        return b""
    base = low[:low.rfind(b".")].partition(b"-")[0]
    if b"_" in base or b"." in base:
        base = _normalize(base)
    return base


def _wanted_entry(name: bytes) -> bool:
    return _entry_distribution(name) in _WANTED


def _any_info_entry(name: bytes) -> bool:
    return _entry_distribution(name) != b""


def _digits(text: str) -> bool:
    return text != "" and all("0" <= c <= "9" for c in text)


def _small_number(text: bytes) -> bool:
    return 0 < len(text) <= 9 and all(0x30 <= c <= 0x39 for c in text)


def _release_form(version: str) -> bool:
    """Whether ``version`` is written as the daemon reads a Transformers or Accelerate release
    (X.Y or X.Y.Z up to 9999 each, then nothing, +local, or [.-]dev|rc|a|b|post<digits>[+local])."""
    end = 0
    while end < len(version) and ("0" <= version[end] <= "9" or (
            version[end] == "." and end + 1 < len(version) and "0" <= version[end + 1] <= "9")):
        end += 1
    parts = version[:end].split(".")
    if end == 0 or not 2 <= len(parts) <= 3 or not all(_digits(p) and int(p) <= 9999 for p in parts):
        return False
    s = version[end:]
    if not s:
        return True
    if s[0] == "+":
        return len(s) > 1
    if s[0] in ".-":
        s = s[1:]
    for tag in ("dev", "rc", "a", "b", "post"):
        if s.startswith(tag):
            return all("0" <= c <= "9" for c in s[len(tag):].partition("+")[0])
    return False


def _header_name(key: bytes) -> bool:
    return all(0x21 <= c <= 0x7E and c != 0x3A for c in key)


class _Reader:
    def __init__(self, out: devplace_pb2.JobEnvironment, limits: Tuple[float, int, int, int]) -> None:
        self.out = out
        self.file_bytes, self.max_entries = limits[1], limits[3]
        self.set = _read.ReadSet(limits[0], limits[2], out.problems)
        self.problem = self.set.problem
        self.seen: Set[bytes] = set()

    def site(self, site: bytes) -> None:
        shown = _read.escape_bytes(site)
        try:
            names, more = _read.list_names(site, self.max_entries, self.set.budget, _wanted_entry)
        except _read.Unreadable as e:
            if e.kind != "missing":
                self.set.failed(shown, e)
            return
        if more:
            self.problem(f"{shown}: more than {self.max_entries} metadata entries of the distributions devplace reads; "
                         f"only the first {self.max_entries} by name read")
        for name in names:
            self.entry(site + b"/" + name)

    def entry(self, entry: bytes) -> None:
        code, st = _read.stat_path(entry)
        if code:
            return self.problem(f"{_read.escape_bytes(entry)}: {_read.cannot_read(code)}")
        if not _read.is_dir(st):
            return self.metadata(entry)
        for name in (b"METADATA", b"PKG-INFO"):
            path = entry + b"/" + name
            if _read.stat_path(path)[0] == errno.ENOENT:
                continue
            return self.metadata(path)
        self.problem(f"{_read.escape_bytes(entry)}: holds no METADATA or PKG-INFO; not read")

    def metadata(self, path: bytes) -> None:
        shown = _read.escape_bytes(path)
        found = {}

        def on_line(line: bytes) -> bool:
            line = line.rstrip()
            if not line:
                return False
            if line[:1] in (b" ", b"\t"):
                return True
            key, colon, value = line.partition(b":")
            if not colon or not _header_name(key):
                return False
            found.setdefault(key.lower(), value.strip())
            return not (b"name" in found and b"version" in found)

        try:
            end = _read.read_lines(path, self.file_bytes, self.set.budget, on_line)
        except _read.Unreadable as e:
            return self.set.failed(shown, e)
        name = found.get(b"name", b"")
        if not name:
            where = f" in its first {_read.size_text(self.file_bytes)}" if end == "limit" else ""
            return self.problem(f"{shown}: no Name header{where}; not read")
        key = _normalize(name)
        if key not in _WANTED or key in self.seen:
            return  # another distribution, or one already found first
        self.seen.add(key)
        if len(name) > _MAX_NAME_BYTES:
            return self.problem(f"{shown}: a Name over {_MAX_NAME_BYTES} bytes; not sent")
        raw = found.get(b"version", b"")
        if b"version" not in found:
            where = f" in its first {_read.size_text(self.file_bytes)}" if end == "limit" else ""
            self.problem(f"{shown}: no Version header{where}; {key.decode()} sent without a version")
        version = ""
        why = ""
        if b"version" not in found:
            pass  # said above
        elif not _read.is_utf8(raw):
            why = "is not UTF-8 text"
        elif len(raw) > _MAX_VERSION_BYTES:
            why = f"is over {_MAX_VERSION_BYTES} bytes"
        else:
            version = raw.decode("utf-8")
            if key in (b"transformers", b"accelerate") and not _release_form(version):
                why = (f"'{version}' is not a release devplace reads (X.Y or X.Y.Z, optionally with a suffix such as "
                       ".dev0, rc1 or +local)")
        if why:
            self.problem(f"{shown}: its Version {why}; {key.decode()} sent without a version")
            version = ""
        self.out.packages.add(name=name.decode("ascii"), version=version)


def _read_path(path: List[bytes], source: str, limits: Tuple[float, int, int, int]) -> devplace_pb2.JobEnvironment:
    """The packages on the directories of ``path`` (internal::ReadPythonPath)."""
    env = devplace_pb2.JobEnvironment(source=_read.cut_utf8(_read.escape_text(source), _MAX_SOURCE_BYTES))
    reader = _Reader(env, limits)
    seen = _Directories()
    read = 0
    try:
        for entry in path:
            directory = entry or b"."  # "": the current directory, as for import
            if not seen.add(directory):
                continue  # not a directory (a zip file), or read already
            if read == _MAX_PATH_ENTRIES:
                reader.problem(f"more than {_MAX_PATH_ENTRIES} path directories; {_read.escape_bytes(directory)} and the "
                               "rest not read")
                break
            read += 1
            reader.site(directory)
    except _read.Stop:
        pass
    return env


class _Directories:
    """The same directory met twice (a lib64 link to lib, a base prefix that is the venv's own)."""

    def __init__(self) -> None:
        self.seen: Set[Tuple[int, int]] = set()

    def add(self, path: bytes) -> bool:
        _, st = _read.stat_path(path)
        if not _read.is_dir(st) or (st.st_dev, st.st_ino) in self.seen:
            return False
        self.seen.add((st.st_dev, st.st_ino))
        return True


def _python_minor(version: bytes) -> bytes:
    parts = version.split(b".")
    if len(parts) < 2 or not _small_number(parts[0]) or not _small_number(parts[1]) or int(parts[0]) != 3:
        return b""
    return b"3.%d" % int(parts[1])


def _prefix_sites(prefix: bytes, minor: bytes, budget: _read.Budget, seen: _Directories, sites: List[bytes]) -> None:
    """The site directories Python adds for ``prefix`` (PrefixSites)."""
    if minor:
        x = b"python" + minor
        candidates = [prefix + b"/lib/" + x + b"/site-packages", prefix + b"/lib64/" + x + b"/site-packages",
                      prefix + b"/local/lib/" + x + b"/dist-packages", prefix + b"/lib/python3/dist-packages",
                      prefix + b"/lib/" + x + b"/dist-packages"]
    else:
        try:
            libs, _ = _read.list_names(prefix + b"/lib", 64, budget, lambda n: n.startswith(b"python3."))
        except _read.Unreadable:
            libs = []
        candidates = [prefix + b"/lib/" + lib + b"/site-packages" for lib in libs]
        candidates.append(prefix + b"/lib/python3/dist-packages")
    sites.extend(c for c in candidates if seen.add(c))


def _conda_minor(prefix: bytes, budget: _read.Budget) -> bytes:
    try:
        names, _ = _read.list_names(prefix + b"/conda-meta", 1, budget,
                                    lambda n: n.startswith(b"python-3.") and n.endswith(b".json"))
    except _read.Unreadable:
        return b""
    if not names:
        return b""
    return _python_minor(names[0][len(b"python-"):].partition(b"-")[0])


def _base_prefix(home: bytes, minor: bytes) -> bytes:
    """The base prefix of a venv whose pyvenv.cfg names ``home`` (BasePrefix)."""
    directory = home
    while len(directory) > 1 and directory.endswith(b"/"):
        directory = directory[:-1]
    d = directory
    while True:
        if minor and _read.is_regular(_read.stat_path(d + b"/lib/python" + minor + b"/os.py")[1]):
            return d
        slash = d.rfind(b"/")
        if slash < 0 or d == b"/":
            break
        d = b"/" if slash == 0 else d[:slash]
    slash = directory.rfind(b"/")
    return b"/" if slash == 0 else directory[:slash]


def _environment(directory: bytes, limits: Tuple[float, int, int, int]) -> devplace_pb2.JobEnvironment:
    """A named environment's packages, as ReadPythonEnvironment (``--python_env``)."""
    while len(directory) > 1 and directory.endswith(b"/"):
        directory = directory[:-1]
    shown = _read.escape_bytes(directory)
    if not _read.is_dir(_read.stat_path(directory)[1]):
        raise InvalidArgumentError(f"{shown}: not a directory; want a venv or conda prefix (holding "
                                   "lib/python3.X/site-packages) or a site-packages directory")
    budget = _read.Budget(limits[0], limits[2])
    problems: List[str] = []
    sites: List[bytes] = []
    seen = _Directories()
    try:
        info, _ = _read.list_names(directory, 1, budget, _any_info_entry)
    except _read.Unreadable:
        info = []
    if info:
        seen.add(directory)
        sites.append(directory)  # a site-packages directory itself
    else:
        cfg = directory + b"/pyvenv.cfg"
        settings = {}
        if _read.stat_path(cfg)[0] != errno.ENOENT:
            def on_line(line: bytes) -> bool:
                key, eq, value = line.partition(b"=")
                if eq:
                    key = key.strip().lower()
                    value = value.strip()
                    if key == b"include-system-site-packages":
                        settings["system"] = value.lower()
                    if key == b"home":
                        settings["home"] = value
                    if key in (b"version", b"version_info"):
                        settings["minor"] = _python_minor(value)
                return True

            try:
                _read.read_lines(cfg, limits[1], budget, on_line)
            except _read.Unreadable as e:
                problems.append(f"{_read.escape_bytes(cfg)}: {e.why}")
        minor = settings.get("minor", b"") or _conda_minor(directory, budget)
        _prefix_sites(directory, minor, budget, seen, sites)
        if settings.get("system") == b"true":
            home = settings.get("home", b"")
            if not home.startswith(b"/"):
                problems.append(f"{_read.escape_bytes(cfg)}: include-system-site-packages = true but home "
                                f"'{_read.escape_bytes(home)}' is not an absolute path; the base environment's packages "
                                "not read")
            else:
                _prefix_sites(_base_prefix(home, minor), minor, budget, seen, sites)
    if not sites:
        raise InvalidArgumentError(
            f"{shown}: neither a site-packages directory (no *.dist-info or *.egg-info in it) nor a venv or conda prefix "
            "(no lib/python3.X/site-packages or lib/python3/dist-packages under it)")
    env = _read_path(sites, "package metadata under " + ", ".join(_read.escape_bytes(s) for s in sites), limits)
    more = _read.ReadSet(0.0, 0, env.problems)  # the list's bounds
    for p in problems:
        more.problem(p)
    return env


def job_environment(path: Union[str, List[str], None] = None) -> devplace_pb2.JobEnvironment:
    """The job's Python packages that decide an answer, read from their metadata.

    Never imports torch, a plug-in, transformers or accelerate: only their installed metadata
    (``*.dist-info`` / ``*.egg-info``, found as importlib.metadata finds it) is read, so this stays
    fast. Looks for the distributions of :data:`JOB_PYTHON_PACKAGES` (generated from libdevplace's
    ``JobPythonPackages()``), the first of each name winning as it does for ``import``:

    - ``path`` None (the default): on this interpreter's ``sys.path``;
    - a list: on those directories (a ``sys.path``; entries that are not directories are skipped);
    - a str: in that named environment, read as ``devplace resolve --python_env`` reads it: a
      site-packages directory, or a venv (its ``pyvenv.cfg``: with ``include-system-site-packages =
      true`` the base environment of its ``home`` too), conda or other prefix.

    Reading is bounded (docs/CLIENT.md, "What the clients read"): only entries named after a wanted
    distribution are opened, only regular files, only the headers in a METADATA's first 64 KiB,
    16 MiB in all within 5 s. What cannot be used is listed in ``problems`` (the daemon warns), and a
    package whose Version is not UTF-8, too long, or (transformers, accelerate) not a release is sent
    without one: nothing the files hold raises. The daemon turns the packages into the request's
    runtime backends and library versions (rules V-JOB-BUILD, V-JOB-VERSION).

    Raises:
        InvalidArgumentError: ``path`` is a str that is not a directory, or none of the above.
    """
    if isinstance(path, (str, bytes)):
        directory = os.fsencode(path)
        try:
            return _environment(directory, _LIMITS)
        except InvalidArgumentError:
            raise
        except Exception as e:  # never out of a reader: what it could not read is a problem
            return _failed(_read.escape_bytes(directory), e)
    entries = sys.path if path is None else list(path)
    where = (sys.executable or "this interpreter") if path is None else os.pathsep.join(str(p) for p in entries)
    source = f"importlib.metadata of {where}"
    try:
        return _read_path([os.fsencode(p) for p in entries if isinstance(p, (str, bytes))], source, _LIMITS)
    except Exception as e:
        return _failed(source, e)


def _failed(source: str, e: BaseException) -> devplace_pb2.JobEnvironment:
    env = devplace_pb2.JobEnvironment(source=_read.cut_utf8(_read.escape_text(source), _MAX_SOURCE_BYTES))
    env.problems.append(f"the reader failed: {type(e).__name__}")
    return env
