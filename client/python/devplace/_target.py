"""Where the daemon is: the same default target and socket-trust rules as libdevplace.

Mirrors ``devplace::DefaultTarget()`` and ``devplace::CheckUnixSocket()``
(client/grpc_connection.cc): same candidates, same order, same refusals and messages.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import List, Optional

from .errors import FailedPreconditionError, NotFoundError

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
    jobs outside the socket's group). ``notes``, when given, receives one line per candidate passed
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
