"""The gRPC side of the Python client: the Python peer of libdevplace's client/grpc_connection.cc.
It owns :class:`TlsOptions` and the channel they make (plaintext for ``unix:`` targets, TLS from the
options and ``DEVPLACE_TLS_*`` for ``host:port``), and :class:`GrpcConnection`, the calls over that
channel (unary deadlines, the watch stream, grpc.health.v1) and their errors: an UNAVAILABLE from a
daemon that could not be reached is explained by _connect_diagnosis.py and ends with the target's
note (where it came from, what was passed over), as libdevplace's FromGrpc does. The default target
and the trust rules for it are _target.py's.

Every channel is closed by ``close()``, when its connection is garbage-collected, or at interpreter
exit, whatever happened to its calls: grpcio's own clean-up at interpreter shutdown (the channel's
``__del__``, grpcio 1.51) waits for gRPC's polling threads, which no longer run then, and a job that
never closed its client would hang instead of exiting. ``atexit`` handlers run while those threads
still do.
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

import grpc
from google.protobuf import wrappers_pb2

from ._connect_diagnosis import diagnose_unreachable, no_answer
from .errors import Error, FailedPreconditionError, InvalidArgumentError, error_for
from .v1 import devplace_pb2_grpc

__all__ = ["TlsOptions", "GrpcConnection", "target_note"]


@dataclasses.dataclass(frozen=True)
class TlsOptions:
    """TLS to a daemon's ``tls:host:port`` listener (docs/OPERATOR.md "Remote access (TLS)").

    Each field left ``None`` or empty is filled from its environment variable when that is set and
    non-empty (``DEVPLACE_TLS_CA``, ``DEVPLACE_TLS_CERT``, ``DEVPLACE_TLS_KEY``,
    ``DEVPLACE_TLS_SERVER_NAME``): a field given here wins. TLS is used for ``host:port`` targets when
    ``ca`` or ``cert`` is set (after that fill); ``unix:`` targets are always plaintext.

    Attributes:
        ca: path of a PEM bundle of the CAs that sign the daemon's certificate (None: gRPC's roots).
        cert: path of the PEM client certificate chain, for mutual TLS (with ``key``).
        key: path of its unencrypted PEM private key (with ``cert``).
        server_name: the name the daemon's certificate carries, when it is not the target's host.
    """

    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None


_TLS_FIELDS = (("ca", "tls_ca", "DEVPLACE_TLS_CA"), ("cert", "tls_cert", "DEVPLACE_TLS_CERT"),
               ("key", "tls_key", "DEVPLACE_TLS_KEY"), ("server_name", "tls_server_name", "DEVPLACE_TLS_SERVER_NAME"))


def _read_pem(source: str, path: str, what: str) -> bytes:
    prefix = f"{source}={path}: "
    if os.path.isdir(path):
        raise InvalidArgumentError(prefix + "is a directory, not a PEM file")
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as e:
        raise InvalidArgumentError(f"{prefix}cannot read: {e.strerror}") from None
    if what == "PRIVATE KEY":
        found = b"-----BEGIN " in pem and b"PRIVATE KEY-----" in pem
    else:
        found = f"-----BEGIN {what}-----".encode() in pem
    if not found:
        raise InvalidArgumentError(f"{prefix}holds no PEM {what.lower()}")
    return pem


# Each Client's channel keeps its own connections (gRPC's default shares them process-wide): a
# connection some other Client left retrying a daemon that is down would otherwise make this
# Client's calls wait out gRPC's reconnect backoff (up to the deadline) instead of failing at once
# with the reason.
# A daemon that restarts (a package upgrade) is back within seconds and a waiting pick asks again
# then (Client.pick_request): the channel tries to reconnect at most every 2 s, not gRPC's 2 min.
_CHANNEL_OPTIONS: List[Tuple[str, Any]] = [("grpc.use_local_subchannel_pool", 1),
                                           ("grpc.initial_reconnect_backoff_ms", 100),
                                           ("grpc.max_reconnect_backoff_ms", 2000)]


def _channel(target: str, tls: Optional[TlsOptions]) -> Tuple[grpc.Channel, Optional[Dict[str, str]]]:
    """The channel to ``target``: plaintext, or TLS as TlsOptions says (environment included); and
    the TLS settings used (None for plaintext), for :func:`diagnose_unreachable`."""
    if target.startswith("unix:") or target.startswith("unix-abstract:"):
        return grpc.insecure_channel(target, options=_CHANNEL_OPTIONS), None
    given = tls or TlsOptions()
    values: Dict[str, str] = {}
    source: Dict[str, str] = {}
    for field, option, variable in _TLS_FIELDS:
        value = getattr(given, field) or ""
        source[field] = option
        if not value and os.environ.get(variable, ""):
            value = os.environ[variable]
            source[field] = variable
        values[field] = value
    if not (values["ca"] or values["cert"] or values["key"]):
        return grpc.insecure_channel(target, options=_CHANNEL_OPTIONS), None
    if bool(values["cert"]) != bool(values["key"]):
        missing, present = ("tls_cert", "key") if not values["cert"] else ("tls_key", "cert")
        raise InvalidArgumentError(f"{source[present]} is set without {missing}: a client certificate needs its "
                                   "private key and the other way round")
    root = _read_pem(source["ca"], values["ca"], "CERTIFICATE") if values["ca"] else None
    chain = key = None
    if values["cert"]:
        chain = _read_pem(source["cert"], values["cert"], "CERTIFICATE")
        key = _read_pem(source["key"], values["key"], "PRIVATE KEY")
    credentials = grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=chain)
    options: List[Tuple[str, Any]] = list(_CHANNEL_OPTIONS)
    if values["server_name"]:
        options.append(("grpc.ssl_target_name_override", values["server_name"]))
    return grpc.secure_channel(target, credentials, options=options), values


def target_note(target: str, origin: str, notes: List[str]) -> str:
    """What ends an unreachable daemon's message: the target, where it came from (``origin``), the
    candidates passed over (``notes``) and how to choose, in Python's terms (libdevplace's TargetNote)."""
    note = f" [devplace target {target} ({origin})"
    if notes:
        note += "; passed over: " + "; ".join(notes)
    return note + "; set DEVPLACE_ADDRESS or address= to choose the daemon]"


# The connections not closed yet: closed by _close_at_exit. Registered after grpc was imported, so it
# runs before any exit handler grpc registers (atexit runs them last in, first out).
_OPEN: "weakref.WeakSet[GrpcConnection]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for connection in list(_OPEN):
        connection.close()


def deadline_seconds(name: str, value: Any) -> Optional[float]:
    """A deadline argument (``timeout``, ``watch_timeout``) in seconds: a finite int or float, None or
    <= 0 meaning none (returned as None). Anything else (a bool, a string, NaN, infinity) raises
    InvalidArgumentError naming the argument and what it accepts: gRPC would otherwise fail later,
    far from the argument, or (NaN) wait for ever."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgumentError(f"{name}: {value!r}: want seconds as a finite number (e.g. 5 or 0.5), "
                                   "or None or 0 (or less) for no deadline")
    return float(value) if value > 0 else None


class GrpcConnection:
    """The channel to ``target`` and the calls over it (libdevplace's GrpcConnection).

    ``timeout`` is each unary call's deadline and ``watch_timeout`` a whole watch's, in seconds (None
    or <= 0: none); ``note`` ends the message of an UNAVAILABLE from a daemon that was not reached
    (:func:`target_note`). Raises InvalidArgumentError for TLS files that cannot be used. The
    channel is closed by :meth:`close`, when the connection is garbage-collected, or at interpreter
    exit; a call after that raises FailedPreconditionError.
    """

    def __init__(self, target: str, tls: Optional[TlsOptions], timeout: Optional[float],
                 watch_timeout: Optional[float], note: str) -> None:
        self.target = target
        self.channel, self.tls = _channel(target, tls)
        self.stub = devplace_pb2_grpc.DevicePlacementStub(self.channel)
        self._health = self.channel.unary_unary(
            # grpc.health.v1 (Debian has no grpcio-health-checking): HealthCheckRequest{string service = 1}
            # and HealthCheckResponse{ServingStatus status = 1} have the wire form of StringValue / Int32Value.
            "/grpc.health.v1.Health/Check",
            request_serializer=wrappers_pb2.StringValue.SerializeToString,
            response_deserializer=wrappers_pb2.Int32Value.FromString)
        self.timeout = timeout if timeout is not None and timeout > 0 else None
        self.watch_timeout = watch_timeout if watch_timeout is not None and watch_timeout > 0 else None
        self.note = note
        # Closes the channel when this connection is collected (it holds the channel, not the connection).
        # Not at exit: weakref's own exit handler, which may run before _close_at_exit, disables every
        # finalizer; _close_at_exit calls close() instead.
        self._closer = weakref.finalize(self, self.channel.close)
        self._closer.atexit = False
        _OPEN.add(self)

    def close(self) -> None:
        """Closes the channel (idempotent): running calls end with CANCELLED, later calls are refused."""
        self._closer.detach()
        self.channel.close()

    @property
    def closed(self) -> bool:
        return not self._closer.alive

    def unary(self, method: Any, request: Any) -> Any:
        """``method`` (a stub's callable) with the unary deadline; gRPC errors raised as :class:`Error`."""
        started = time.monotonic()
        try:
            return self._start(method, request, self.timeout)
        except grpc.RpcError as e:
            raise self.error(e, self.waited(started, self.timeout)) from None

    def watch(self, request: Any) -> Any:
        """The WatchInventory stream (a gRPC call: an iterator with ``cancel()``), under ``watch_timeout``."""
        return self._start(self.stub.WatchInventory, request, self.watch_timeout)

    def _start(self, method: Any, request: Any, timeout: Optional[float]) -> Any:
        """``method(request, timeout=timeout)``; FailedPreconditionError once the channel is closed (where
        grpc raises ValueError("Cannot invoke RPC on closed channel!"))."""
        try:
            return method(request, timeout=timeout)
        except ValueError:
            if not self.closed:
                raise
        raise FailedPreconditionError(f"this devplace.Client of {self.target} is closed (close() was called or its "
                                      "with block ended): make a new Client for further calls")

    def health(self, service: str) -> bool:
        """grpc.health.v1 Check: whether ``service`` ("" = the whole server) is SERVING."""
        response = self.unary(self._health, wrappers_pb2.StringValue(value=service))
        return response.value == 1  # HealthCheckResponse.SERVING

    def ready(self) -> bool:
        """Whether the channel is connected (so an UNAVAILABLE came from the daemon itself)."""
        seen = threading.Event()
        state: List[grpc.ChannelConnectivity] = []

        def on_state(s: grpc.ChannelConnectivity) -> None:
            if not seen.is_set():
                state.append(s)
                seen.set()

        self.channel.subscribe(on_state, try_to_connect=False)
        try:
            seen.wait(1.0)
        finally:
            self.channel.unsubscribe(on_state)
        return bool(state) and state[0] == grpc.ChannelConnectivity.READY

    @staticmethod
    def waited(started: float, timeout: Optional[float]) -> Optional[float]:
        """``timeout`` when a call begun at ``started`` (time.monotonic()) ran past it, else None: for
        :meth:`error`, which then knows the DEADLINE_EXCEEDED was the call's own deadline."""
        return timeout if timeout is not None and time.monotonic() - started >= timeout else None

    def error(self, e: grpc.RpcError, waited: Optional[float] = None) -> Error:
        """The :class:`Error` for a failed call (libdevplace's FromGrpc): an UNAVAILABLE while the channel
        is not connected starts with the cause :func:`diagnose_unreachable` finds and ends with the note;
        a DEADLINE_EXCEEDED after ``waited`` seconds (the call's deadline passed, :meth:`waited`) starts
        with :func:`no_answer` (the target, the time waited, what to check) and ends with the note."""
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        message = (e.details() if hasattr(e, "details") else None) or ""
        if code == grpc.StatusCode.UNAVAILABLE and not self.ready():
            cause = diagnose_unreachable(self.target, self.tls, self.timeout)
            if cause:
                message = f"{cause} (gRPC: {message})"
            message += self.note
        elif code == grpc.StatusCode.DEADLINE_EXCEEDED and waited is not None:
            message = f"{no_answer(self.target, waited)} (gRPC: {message}){self.note}"
        return error_for(code, message)
