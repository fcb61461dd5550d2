"""Errors of the devplace client: one class per gRPC status code, all under :class:`Error`.

Every failed call raises an :class:`Error` carrying the gRPC code (``.code``, a
:class:`grpc.StatusCode`) and the daemon's message (``.message``), unchanged, as libdevplace's
``absl::Status`` does. ``ResolveError`` is the same class under the name the one-liner's users
catch. The codes, as the daemon uses them:

- :class:`InvalidArgumentError` (also a :class:`ValueError`): malformed request; the message names
  the field and the accepted forms. Bad arguments caught on this side (an unknown workload, an
  unusable TLS file, a ``unix:`` address without a path) raise it too, before any call.
- :class:`FailedPreconditionError`: a valid request this host or the job's visibility cannot
  satisfy (or a hazard under ``strict=True``); also an explicit unix socket that fails the
  socket-trust check.
- :class:`UnavailableError`: the daemon cannot be reached (the message names the target, where it
  came from and the default sockets passed over), or it has no inventory yet.
- :class:`PermissionDeniedError`, :class:`ResourceExhaustedError`: ``refresh()`` not allowed / too
  soon; :class:`DeadlineExceededError`: the call's ``timeout`` passed.
- :class:`CancelledError`, :class:`AbortedError`: a watch cancelled by its caller, or ended by the
  daemon (it shuts down: reconnect).

The warnings of an answer are not errors: :func:`devplace.resolve_device` issues each as a Python
warning of category :class:`DevplaceWarning` (and a record of the ``devplace`` logger), and the
opt-in cpu fallback issues its one as :class:`FallbackWarning`, so that ``warnings.filterwarnings``
can silence them or turn them into exceptions (docs/CLIENT.md "Python jobs").
"""

from __future__ import annotations

from typing import Dict, Type

import grpc

__all__ = [
    "Error",
    "ResolveError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "AbortedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "UnauthenticatedError",
    "DevplaceWarning",
    "FallbackWarning",
    "error_for",
]


class Error(Exception):
    """A devplace call failed. ``code`` is the :class:`grpc.StatusCode`, ``message`` the text."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: "grpc.StatusCode | None" = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


#: The name the one-liner documents: every devplace error is a ResolveError.
ResolveError = Error


class CancelledError(Error):
    code = grpc.StatusCode.CANCELLED


class UnknownError(Error):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgumentError(Error, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(Error):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(Error):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(Error):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(Error):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(Error):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(Error):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(Error):
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(Error):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(Error):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(Error):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(Error):
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(Error):
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(Error):
    code = grpc.StatusCode.UNAUTHENTICATED


class DevplaceWarning(UserWarning):
    """A warning of the daemon's answer (a hazard or a hint, naming the cause and the fix): the answer
    stands, but may not be what the job meant. :func:`devplace.resolve_device` issues each warning of
    the answer as one; ``Resolution.warnings`` holds the same texts."""


class FallbackWarning(DevplaceWarning, RuntimeWarning):
    """The answer came from the opt-in cpu fallback (``fallback="cpu"``, DEVPLACE_FALLBACK=cpu), not from
    the daemon: the text starts "devplace fallback:" and quotes the error. Also a RuntimeWarning."""


_BY_CODE: Dict[grpc.StatusCode, Type[Error]] = {
    cls.code: cls
    for cls in (CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
                AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
                AbortedError, OutOfRangeError, UnimplementedError, InternalError, UnavailableError,
                DataLossError, UnauthenticatedError)
}


def error_for(code: grpc.StatusCode, message: str) -> Error:
    """The :class:`Error` subclass instance for ``code`` (a plain :class:`Error` for codes without one)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else Error(message, code)
