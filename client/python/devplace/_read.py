"""The one rule for every reader of outside input in the Python client, the peer of libdevplace's
client/common/bounded_read.h (same rules, same wording): regular files only (a FIFO, a device or a
link to one is refused before any read, so nothing blocks), a size cap per file and a byte and
time budget per read set (the files one call reads), reads in chunks that stop at the cap, and text
made safe to send: names escaped, problem texts cut at UTF-8 character boundaries. Its functions
raise only :class:`Unreadable`, whose ``why`` is the text a problem entry carries; the readers
built on it (_device_metadata.py, _python_environment.py) turn anything else into a problem too.
"""

from __future__ import annotations

import errno
import heapq
import os
import stat
import time
from typing import Callable, Iterator, List, Optional, Tuple

KIB = 1024
MIB = 1024 * KIB
_CHUNK = 64 * KIB


class Unreadable(Exception):
    """A read that failed: ``why`` as problems print it; ``kind`` is "missing" (a directory that
    does not exist), "time" or "bytes" (the budget is spent: the reading stops), or "other"."""

    def __init__(self, why: str, kind: str = "other") -> None:
        super().__init__(why)
        self.why = why
        self.kind = kind


def size_text(n: int) -> str:
    """'1 MiB', '64 KiB', '100 bytes' (SizeText)."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} bytes"


def duration_text(seconds: float) -> str:
    """'2 s', '250 ms' (DurationText)."""
    ms = int(round(seconds * 1000))
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms} ms"


class ReadSet:
    """One reader's call: its budget and its problems (ReadSet): at most 64 of at most 1024 bytes, cut
    at a character boundary; a read that finds the budget spent raises :class:`Stop`."""

    MAX_PROBLEMS = 64
    MAX_PROBLEM_BYTES = 1024

    def __init__(self, seconds: float, total_bytes: int, problems) -> None:
        self.budget = Budget(seconds, total_bytes)
        self.problems = problems

    def problem(self, what: str) -> None:
        if len(self.problems) < self.MAX_PROBLEMS:
            self.problems.append(cut_utf8(what, self.MAX_PROBLEM_BYTES))

    def failed(self, shown: str, e: "Unreadable") -> None:
        self.problem(f"{shown}: {e.why}")
        if e.kind in ("time", "bytes"):
            raise Stop()


class Stop(Exception):
    """The budget is spent: the reader's call ends with what it has."""


class Budget:
    """The time and bytes one read set may spend (ReadBudget)."""

    def __init__(self, seconds: float, total_bytes: int) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.total = total_bytes
        self.left = total_bytes

    def time_left(self) -> bool:
        return time.monotonic() < self.deadline

    def spend(self, n: int) -> None:
        self.left = max(0, self.left - n)

    def out_of_time(self) -> Unreadable:
        return Unreadable(f"not read: the reader's {duration_text(self.seconds)} were spent", "time")

    def out_of_bytes(self) -> Unreadable:
        return Unreadable(f"not read: the files read before it used up {size_text(self.total)}", "bytes")

    def check_time(self) -> None:
        if not self.time_left():
            raise self.out_of_time()


def strerror(code: Optional[int]) -> str:
    return os.strerror(code) if code else "unknown error"


def cannot_read(code: Optional[int]) -> str:
    return f"cannot read it ({strerror(code)})"


def kind_text(mode: int) -> str:
    """What a non-regular file is (KindText)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def stat_path(path: "str | bytes") -> Tuple[int, Optional[os.stat_result]]:
    """(errno, stat) of ``path``, following links (StatPath); errno 0 when found."""
    try:
        return 0, os.stat(path)
    except OSError as e:
        return e.errno or errno.EIO, None
    except ValueError:  # an embedded NUL
        return errno.EINVAL, None


def is_dir(st: Optional[os.stat_result]) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)


def is_regular(st: Optional[os.stat_result]) -> bool:
    return st is not None and stat.S_ISREG(st.st_mode)


def _open_regular(path: "str | bytes") -> Tuple[int, os.stat_result]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise Unreadable(cannot_read(e.errno)) from None
    except ValueError:
        raise Unreadable(cannot_read(errno.EINVAL)) from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise Unreadable(cannot_read(e.errno)) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(f"not a regular file ({kind_text(st.st_mode)}); not read")
    return fd, st


def _read_some(fd: int, n: int) -> bytes:
    try:
        return os.read(fd, n)
    except OSError as e:
        raise Unreadable(cannot_read(e.errno)) from None


def read_regular_file(path: "str | bytes", max_bytes: int, budget: Budget) -> bytes:
    """The whole of the regular file ``path``, at most ``max_bytes`` (ReadRegularFile)."""
    budget.check_time()
    fd, st = _open_regular(path)
    try:
        too_large = Unreadable(f"larger than {size_text(max_bytes)}; not read")
        if st.st_size > max_bytes:
            raise too_large
        if st.st_size > budget.left:
            raise budget.out_of_bytes()
        chunks: List[bytes] = []
        size = 0
        while True:
            budget.check_time()
            chunk = _read_some(fd, _CHUNK)
            if not chunk:
                break
            if size + len(chunk) > max_bytes:
                raise too_large
            if size + len(chunk) > budget.left:
                raise budget.out_of_bytes()
            chunks.append(chunk)
            size += len(chunk)
        budget.spend(size)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_lines(path: "str | bytes", max_bytes: int, budget: Budget, on_line: Callable[[bytes], bool]) -> str:
    """Calls ``on_line`` with each line (bytes, without b"\\n") until it returns False ("stopped"), the
    file ends ("end") or ``max_bytes`` were read ("limit"), as ReadLines."""
    budget.check_time()
    fd, _ = _open_regular(path)
    try:
        line = b""
        total = 0
        while True:
            budget.check_time()
            if total == max_bytes:
                return "limit"
            if budget.left == 0:
                raise budget.out_of_bytes()
            want = min(_CHUNK, max_bytes - total, budget.left)
            chunk = _read_some(fd, want)
            if not chunk:
                break
            total += len(chunk)
            budget.spend(len(chunk))
            start = 0
            while True:
                newline = chunk.find(b"\n", start)
                if newline < 0:
                    break
                line += chunk[start:newline]
                if not on_line(line):
                    return "stopped"
                line = b""
                start = newline + 1
            line += chunk[start:]
        if line and not on_line(line):
            return "stopped"
        return "end"
    finally:
        os.close(fd)


def list_names(directory: bytes, max_names: int, budget: Budget, keep: Callable[[bytes], bool]) -> Tuple[List[bytes], bool]:
    """The names in ``directory`` that ``keep`` accepts: the first ``max_names`` in byte order, and
    whether ``keep`` accepted others beyond them (ListNames). Only the kept names are held."""
    budget.check_time()
    try:
        entries = os.scandir(directory)
    except OSError as e:
        raise Unreadable(f"cannot list it ({strerror(e.errno)})", "missing" if e.errno == errno.ENOENT else "other") \
            from None
    except ValueError:
        raise Unreadable(f"cannot list it ({strerror(errno.EINVAL)})") from None
    accepted = 0

    def names() -> Iterator[bytes]:
        nonlocal accepted
        seen = 0
        while True:
            try:
                entry = next(entries)
            except StopIteration:
                return
            except OSError as e:
                raise Unreadable(f"cannot list it ({strerror(e.errno)})") from None
            seen += 1
            if seen % 1024 == 0:
                budget.check_time()
            if keep(entry.name):
                accepted += 1
                yield entry.name

    try:
        kept = heapq.nsmallest(max_names, names())
    finally:
        entries.close()
    return kept, accepted > len(kept)


def escape_bytes(b: bytes) -> str:
    """``b`` (a file name, a path) as valid UTF-8 text: valid UTF-8 kept, each byte of an invalid
    sequence and each C0 control or DEL written \\xNN (EscapeBytes: the decoder's surrogate escapes
    are exactly the bytes of the invalid sequences)."""
    out = []
    for ch in b.decode("utf-8", "surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append("\\x%02x" % (code - 0xDC00))
        elif code < 0x20 or code == 0x7F:
            out.append("\\x%02x" % code)
        else:
            out.append(ch)
    return "".join(out)


def escape_text(text: str) -> str:
    """A str that may hold surrogate escapes (os.listdir's, os.environ's) through :func:`escape_bytes`."""
    return escape_bytes(os.fsencode(text)) if isinstance(text, str) else escape_bytes(text)


def is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


def cut_utf8(text: str, max_bytes: int) -> str:
    """Valid text cut to at most ``max_bytes`` of UTF-8 at a character boundary (CutUtf8)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")
