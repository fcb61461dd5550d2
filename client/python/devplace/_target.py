"""Where the daemon is, and whether to trust what answers there: the Python client's one place for
the default target and the trust rules.

Mirrors ``devplace::DefaultTarget()`` (client/grpc_connection.cc) and ``devplace::CheckUnixSocket()``
and ``devplace::CheckLocalListener()`` (client/trust.cc): same candidates, same order, same
refusals and messages; both clients are tested against one table (tests/client/trust_table.txt).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import stat
import sys
from typing import List, Optional, Tuple, Union

from . import _read
from ._connect_diagnosis import permission_fix
from .errors import FailedPreconditionError, InvalidArgumentError, NotFoundError

_Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

SYSTEM_SOCKET = "/run/devplace/devplace.sock"
DEFAULT_TCP_TARGET = "127.0.0.1:7465"


def check_unix_socket(path: str) -> None:
    """Whether the unix socket ``path`` may be trusted as the daemon.

    Trusted: the socket is owned by root or this process's effective uid, and its directory is owned
    by root or that uid and not writable by group or others unless it has the sticky bit (so that no
    other user can squat the path and answer in the daemon's place).

    Raises:
        NotFoundError: ``path`` does not exist.
        FailedPreconditionError: it is not a socket, or it or its directory fails the rules above
            (the message says which).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such socket") from None
    except PermissionError:  # the cause first: gRPC would only say "Permission denied"
        raise FailedPreconditionError(
            f"permission denied: a directory above {path} does not let this user (uid {os.geteuid()}) reach the "
            "socket; " + permission_fix("the host's operator lets the user search that directory (its mode or group)")
        ) from None
    except OSError as e:
        raise FailedPreconditionError(f"{path}: {os.strerror(e.errno or errno.EIO)}") from None
    me = os.geteuid()
    if not stat.S_ISSOCK(st.st_mode):
        raise FailedPreconditionError(f"{path} is not a socket")
    if st.st_uid not in (0, me):
        raise FailedPreconditionError(
            f"socket {path} is owned by uid {st.st_uid}, not root or you (uid {me}): refused as possibly squatted")
    directory = os.path.dirname(path)
    try:
        d = os.stat(directory or ".")
    except OSError as e:
        raise FailedPreconditionError(f"{directory}: {os.strerror(e.errno or errno.EIO)}") from None
    if d.st_uid not in (0, me):
        raise FailedPreconditionError(
            f"socket directory {directory} is owned by uid {d.st_uid}, not root or you (uid {me}): "
            "refused as possibly squatted")
    if d.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not d.st_mode & stat.S_ISVTX:
        raise FailedPreconditionError(
            f"socket directory {directory} is writable by group or others without the sticky bit: refused, "
            "another user could have replaced the socket")


def _loopback_endpoint(address: str) -> Tuple[_Address, int]:
    host, sep, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text, 10) if sep and port_text.isdigit() else 0
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip, port = None, 0
    if ip is None or not 0 < port <= 0xFFFF or not ip.is_loopback:
        raise InvalidArgumentError(
            f"address '{address}': want a loopback host:port, e.g. 127.0.0.1:7465 or [::1]:7465")
    return ip, port


# Reading /proc/net/tcp{,6}: at most this much of each, within this time (libdevplace's trust.cc).
_MAX_TABLE_BYTES = 64 * _read.MIB
_TABLE_SECONDS = 2.0


def _proc_endpoint(text: str, v6: bool) -> Tuple[_Address, int]:
    """``0100007F:1D29`` from /proc/net/tcp{,6}: each 32-bit word is printed in host byte order."""
    hex_addr, _, hex_port = text.partition(":")
    words = [int(hex_addr[i:i + 8], 16) for i in range(0, len(hex_addr), 8)]
    raw = b"".join(w.to_bytes(4, sys.byteorder) for w in words)
    return (ipaddress.IPv6Address(raw) if v6 else ipaddress.IPv4Address(raw)), int(hex_port, 16)


def _receives(bound: _Address, target: _Address) -> bool:
    """Whether a listener bound to ``bound`` receives connections to ``target`` (same port)."""
    if bound.version == target.version:
        return bound == target or bound.is_unspecified
    if bound.version == 4:
        return False  # an IPv4 socket never receives an IPv6 connection
    mapped = bound.ipv4_mapped
    return bound.is_unspecified or (mapped is not None and (mapped == target or mapped.is_unspecified))


def check_local_listener(address: str) -> None:
    """Whether the TCP listener on this host at ``address`` may be trusted as the daemon.

    ``address`` is a numeric loopback ``127.0.0.1:7465`` or ``[::1]:7465``. Trusted: every listening
    socket that would receive the connection (/proc/net/tcp and tcp6: the same address, its
    wildcard, an IPv6 wildcard or v4-mapped address for IPv4) is owned by root or this process's
    effective uid, so an unprivileged user who binds the port while no daemon holds it cannot
    answer in its place. :class:`Client` applies it to the default ``127.0.0.1:7465`` only; an
    address named explicitly is the caller's choice.

    Raises:
        InvalidArgumentError: ``address`` is not a numeric loopback host:port.
        NotFoundError: nothing listens there.
        FailedPreconditionError: a listener there is owned by another uid (the message names it).
    """
    target, port = _loopback_endpoint(address)
    me = os.geteuid()
    found = False
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        if v6 and _read.stat_path(table)[0]:
            continue  # no IPv6 on this host
        # Streamed a line at a time (a busy host lists hundreds of thousands of sockets), bounded.
        state = {"header": True, "found": False, "refused": None}

        def on_line(raw: bytes) -> bool:
            if state["header"]:
                state["header"] = False
                return True
            # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
            f = raw.decode("ascii", "replace").split()
            if len(f) < 8 or f[3] != "0A":  # 0A: TCP_LISTEN
                return True
            try:
                bound, bound_port = _proc_endpoint(f[1], v6)
                uid = int(f[7]) if f[7].isdigit() and f[7].isascii() else None
            except (ValueError, OverflowError):
                return True
            if bound_port != port or not _receives(bound, target) or uid is None:
                return True
            state["found"] = True
            if uid not in (0, me):
                state["refused"] = (
                    f"the listener on {address} is owned by uid {uid}, not root or you (uid {me}): refused as "
                    "possibly an impersonator (name the address explicitly to trust it)")
                return False
            return True

        try:
            end = _read.read_lines(table, _MAX_TABLE_BYTES, _read.Budget(_TABLE_SECONDS, _MAX_TABLE_BYTES), on_line)
        except _read.Unreadable:
            end = None
        if state["refused"]:
            raise FailedPreconditionError(state["refused"])
        if end is None or end == "limit":
            raise FailedPreconditionError(f"cannot read {table} to see who owns the listener on {address}: refused")
        found = found or state["found"]
    if not found:
        raise NotFoundError(f"{address}: no listening socket")


def _usable_socket(path: str) -> Optional[str]:
    """None when the daemon may be reached and trusted at ``path``; else why not."""
    try:
        check_unix_socket(path)
    except (NotFoundError, FailedPreconditionError) as e:
        return e.message
    if not os.access(path, os.R_OK | os.W_OK):
        return f"no permission to connect ({os.strerror(errno.EACCES)})"
    return None


def default_target(notes: Optional[List[str]] = None) -> str:
    """The daemon's address as a gRPC target, by the daemon's own defaults.

    ``$DEVPLACE_ADDRESS`` when set and non-empty; else the first of
    ``unix:/run/devplace/devplace.sock``, ``unix:$XDG_RUNTIME_DIR/devplace.sock`` and
    ``unix:/tmp/devplace-<euid>/devplace.sock`` that this process may open and that
    :func:`check_unix_socket` accepts; else ``127.0.0.1:7465`` (the daemon's loopback listener, for
    jobs outside the socket's group; :class:`Client` then checks its owner with
    :func:`check_local_listener`). ``notes``, when given, receives one line per candidate passed
    over and why.
    """
    address = os.environ.get("DEVPLACE_ADDRESS", "")
    if address:
        return address
    candidates = [SYSTEM_SOCKET]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime:
        candidates.append(f"{runtime}/devplace.sock")
    candidates.append(f"/tmp/devplace-{os.geteuid()}/devplace.sock")
    for path in candidates:
        why = _usable_socket(path)
        if why is None:
            return f"unix:{path}"
        if notes is not None:
            notes.append(f"unix:{path} ({why})")
    return DEFAULT_TCP_TARGET
