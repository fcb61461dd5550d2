"""``devplace.Client``, ``devplace.resolve_device`` and ``devplace.pick``: the Python peer of
libdevplace's ``devplace::Client`` (client/client.cc), the top of the package's line of modules
(tests/python/test_layering.py). It owns which daemon a client talks to (an address, else
``DEVPLACE_ADDRESS``, else the default sockets and ``127.0.0.1:7465`` of _target.py, whose trust
rules it applies to a daemon nobody named), the calls (resolve, inventory, backends, refresh, watch,
health, pick, leases) over a :class:`GrpcConnection` (_grpc_connection.py), the opt-in cpu fallback,
:class:`Watch` (``Client::Watch`` with its ``WatchCanceller``: an iterator that any thread may
cancel), and the one-liners :func:`resolve_device` and :func:`pick`, which issue the answer's
warnings (:func:`_issue`: one Python warning each). Requests come from _resolve_options.py and
_pick.py, answers are _resolution.py's :class:`Resolution` and _pick.py's :class:`Pick`; those
modules know nothing of this one.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

import grpc

from ._grpc_connection import GrpcConnection, TlsOptions, deadline_seconds, target_note
from ._pick import Pick, _torch_already_initialised, _ttl, job_holder, make_pick_request
from ._resolution import Resolution
from ._resolve_options import make_request
from ._target import check_local_listener, check_unix_socket, default_target
from .errors import (AbortedError, DeadlineExceededError, DevplaceWarning, Error, FailedPreconditionError,
                     FallbackWarning, InvalidArgumentError, NotFoundError, UnavailableError)
from .v1 import devplace_pb2

__all__ = ["Client", "Lease", "Watch", "pick", "resolve_device"]

def _refuse_untrusted(check: Callable[[str], None], what: str, target: str, origin: str) -> None:
    """Runs a trust check (_target.py) on ``what``; a missing socket or listener is left for the call to report."""
    try:
        check(what)
    except NotFoundError:
        pass
    except FailedPreconditionError as e:
        raise FailedPreconditionError(f"refusing {target} ({origin}): {e.message}") from None


class Client:
    """A connection to devplaced; a context manager (``with devplace.Client() as c: ...``).

    Args:
        address: ``unix:/path/to.sock`` or ``host:port``. None: ``$DEVPLACE_ADDRESS``, else the
            daemon's default sockets, else ``127.0.0.1:7465`` (:func:`devplace.default_target`).
        timeout: deadline of each unary call in seconds (resolve, inventory, backends, refresh,
            health), a finite int or float; None or <= 0: none (then a daemon that accepts and never
            answers holds the call, and the job, for ever).
        tls: TLS settings for a ``tls:`` listener (:class:`TlsOptions`; DEVPLACE_TLS_* fill what
            is not given).
        trust_any_socket: skip the socket-trust check for an explicit ``unix:`` address.
        watch_timeout: deadline of a whole ``watch()`` in seconds, as ``timeout``; None or <= 0: none.

    Does not contact the daemon: the channel connects on the first call, and calls fail fast with
    :class:`UnavailableError` when the daemon is not there (the message names the target, where it
    came from, and the default sockets passed over). Safe to use from several threads. The channel
    is closed by :meth:`close` (or leaving the ``with`` block), when the Client is garbage-collected
    (a :class:`Watch` keeps its Client), and at interpreter exit, so a job that never closed its
    Client still exits; each unary call has the ``timeout`` deadline (5 s unless told otherwise).

    Raises:
        InvalidArgumentError: a ``timeout`` or ``watch_timeout`` that is not a finite number or None
            (a bool, a string, NaN, infinity), naming it; a ``unix:`` address without a path; TLS files that cannot be used
            (the message starts with the option, ``tls_ca=PATH: ``, or the variable,
            ``DEVPLACE_TLS_CA=PATH: ``, it came from).
        FailedPreconditionError: an explicit unix socket (argument or DEVPLACE_ADDRESS) that fails
            :func:`devplace.check_unix_socket`.; the default ``127.0.0.1:7465`` (no address, no
            DEVPLACE_ADDRESS, no daemon socket) when a listener there fails
            :func:`devplace.check_local_listener` (owned by another user).
    """

    def __init__(self, address: Optional[str] = None, timeout: Optional[float] = 5.0,
                 tls: Optional[TlsOptions] = None, *, trust_any_socket: bool = False,
                 watch_timeout: Optional[float] = None) -> None:
        timeout = deadline_seconds("timeout", timeout)
        watch_timeout = deadline_seconds("watch_timeout", watch_timeout)
        notes: List[str] = []
        from_env = not address and bool(os.environ.get("DEVPLACE_ADDRESS", ""))
        target = address if address else default_target(notes)
        origin = ("from address" if address else
                  "from DEVPLACE_ADDRESS" if from_env else "default; DEVPLACE_ADDRESS is not set")
        if target.startswith("unix:"):
            path = target[len("unix:"):]
            if path.startswith("//"):
                path = path[2:]  # unix:///abs/path
            if not path:
                raise InvalidArgumentError(f"address '{target}': a unix: target needs a socket path, "
                                           "e.g. unix:/run/devplace/devplace.sock")
            if not trust_any_socket:
                _refuse_untrusted(check_unix_socket, path, target, origin)
        elif not address and not from_env:
            # The implicit TCP fallback: nobody chose it, so refuse a listener another user could have bound.
            _refuse_untrusted(check_local_listener, target, target, origin)
        self.target = target
        self._connection = GrpcConnection(target, tls, timeout, watch_timeout, target_note(target, origin, notes))

    # ---- lifecycle ----
    def close(self) -> None:
        """Closes the channel (idempotent); running watches end (:class:`CancelledError`), and later calls
        raise :class:`FailedPreconditionError`."""
        self._connection.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- calls ----
    def resolve(self, workload: Union[str, int], device_map: Union[str, int, None] = None, *,
                convention: Union[str, int, None] = None, use_cpu: bool = False, strict: bool = False,
                model_size_bytes: Optional[int] = None, from_environment: bool = True,
                fallback: Optional[str] = None, **overrides: Any) -> Resolution:
        """Asks the daemon which device this job should use (ResolveDevice).

        Args:
            workload: "training" or "inference" (case-insensitive), or a ``devplace_pb2.Workload``.
            device_map: what the job passes to ``from_pretrained(device_map=...)`` (or
                ``pipeline(device=...)`` with ``convention="pipeline"``): a device string
                ("cuda:1"), an int (1, -1), "auto" / "balanced" / "balanced_low_0" /
                "sequential", or None. Must be None for training.
            convention: "training_arguments", "accelerate", "from_pretrained", "pipeline", or None
                for the workload's default (TrainingArguments for training, from_pretrained for
                inference).
            use_cpu: ``TrainingArguments(use_cpu=True)`` / ``Accelerator(cpu=True)``.
            strict: turn hazards into :class:`FailedPreconditionError` instead of warnings.
            model_size_bytes: model size in bytes (accepted; ``max_memory`` budgets are each device's
                free memory, which from_pretrained's get_balanced_memory shares out by the model's layers).
            from_environment: send this process's placement variables, accelerator /dev nodes and
                DRA devices (as libdevplace's ``FromEnvironment()``); False sends only the arguments.
            fallback: what to answer when the daemon gives no answer (UnavailableError: not running,
                unreachable, no inventory yet; DeadlineExceededError): "none" raises (the default),
                "cpu" returns a ``cpu`` Resolution whose first warning starts "devplace fallback:"
                and quotes the error, and issues it as a :class:`FallbackWarning` (a
                ``RuntimeWarning`` too) and a ``devplace`` log record. None: env
                DEVPLACE_FALLBACK when ``from_environment``, else "none". Other errors always raise.
            **overrides: request fields that win over the environment: ``env={...}`` (a None
                value removes a variable), ``local_rank=1``, ``world_size=2``,
                ``runtime_backends=["cuda"]``, ``job_device_nodes=["/dev/nvidia1"]`` ([] = the job
                sees no accelerator, None = unknown), ``transformers_version="4.46.3"``,
                ``accelerate_version="0.34.2"`` (the releases whose rules to apply, docs/SEMANTICS.md
                section 10: Transformers 4.30.0 or newer, Accelerate 0.25.0 or newer; a release newer
                than the daemon's rules gets its newest rules and a warning, see
                ``Resolution.newer_than_rules``; None or "" = the newest devplace knows),
                ``job_environment=devplace.job_environment([...])``,
                ``device_allocation=devplace.device_allocation(DIR)`` (the job's Kubernetes DRA
                devices; None sends none).

        Returns:
            The :class:`Resolution`; ``str()`` of it is the device string. Its ``warnings`` are the
            caller's to show (:func:`resolve_device` issues them as Python warnings).

        Raises:
            InvalidArgumentError: a malformed request or environment, or a version older than
                supported (the daemon's message names the field and the range).
            FailedPreconditionError: this host or the job's visibility cannot satisfy the request;
                with ``strict``, also any hazard, a library newer than the daemon's rules included.
            UnavailableError: the daemon is not reachable, or has no inventory yet.
            DeadlineExceededError: ``timeout`` passed.
            TypeError: an unknown override.
        """
        if fallback is None:
            fallback = os.environ.get("DEVPLACE_FALLBACK", "") if from_environment else ""
        if fallback not in ("", "none", "cpu"):
            raise InvalidArgumentError(f"fallback (DEVPLACE_FALLBACK) {fallback[:64]!r}: accepted: cpu (answer cpu "
                                       "with a warning when the daemon gives no answer) or none (the default)")
        request = make_request(workload, device_map, convention=convention, use_cpu=use_cpu, strict=strict,
                               model_size_bytes=model_size_bytes, from_environment=from_environment, **overrides)
        try:
            return self.resolve_request(request)
        except (UnavailableError, DeadlineExceededError) as e:
            if fallback != "cpu":
                raise
            answer = _cpu_fallback(e)
            _issue(answer, FallbackWarning)
            return answer

    def resolve_request(self, request: devplace_pb2.ResolveDeviceRequest) -> Resolution:
        """ResolveDevice with a request built by the caller (e.g. :func:`devplace.for_job` for a scheduler)."""
        return Resolution.from_response(self._unary("ResolveDevice", request))

    def inventory(self) -> devplace_pb2.Inventory:
        """The daemon's current inventory snapshot (``devplace_pb2.Inventory``). UnavailableError before
        the first probe."""
        return self._unary("GetInventory", devplace_pb2.GetInventoryRequest())

    def backends(self) -> List[devplace_pb2.BackendInfo]:
        """The hardware table: the 11 rows as ``devplace_pb2.BackendInfo``, in table order."""
        return list(self._unary("ListBackends", devplace_pb2.ListBackendsRequest()).backends)

    def refresh(self) -> devplace_pb2.Inventory:
        """Re-probes the host now (RefreshInventory); the resulting inventory.

        Raises:
            PermissionDeniedError: not root / the daemon's user / its socket group over the unix
                socket, nor an mTLS client.
            ResourceExhaustedError: within ``--refresh_min_interval`` of the last one (the message
                gives the wait in ms).
        """
        return self._unary("RefreshInventory", devplace_pb2.RefreshInventoryRequest())

    def watch(self, known_revision: int = 0) -> Watch:
        """Streams inventories: the current snapshot first, then every new revision (WatchInventory).

        ``known_revision`` is forwarded as is, with no ``known_epoch``: the current snapshot always
        comes first (revisions restart with the daemon). Returns a :class:`Watch` iterator, ended by
        its ``cancel()`` from any thread or by leaving its ``with`` block.
        """
        request = devplace_pb2.WatchInventoryRequest(known_revision=known_revision)
        return Watch(self, self._connection.watch(request))

    def health(self, service: str = "") -> bool:
        """grpc.health.v1 Check: True when the daemon reports SERVING for ``service`` ("" = the whole
        server), False for any other status. Errors as for any call."""
        return self._connection.health(service)

    # ---- shared hosts (devplace.pick below; the request and answer: _pick.py) ----
    def pick_request(self, request: devplace_pb2.PickDevicesRequest) -> Pick:
        """PickDevices with a request from :func:`devplace.make_pick_request`; the environment is not
        applied (``Pick.apply()`` does that; :func:`devplace.pick` does both).

        A pick with a wait whose call fails UNAVAILABLE (the daemon is restarting: its socket is gone
        or refused, or it is shutting down) is asked again until the wait ends, after 0.1 s, then
        twice as long each time up to 2 s, with the time left as its wait and the waiter id the
        daemon sent it (PickDevicesRequest.waiter_id), so that a restarted daemon gives it back its
        place in the queue. When the wait ends first, the last UnavailableError is raised."""
        wait_ends = time.monotonic() + request.wait_ms / 1000.0
        backoff = 0.1
        asked = devplace_pb2.PickDevicesRequest()
        asked.CopyFrom(request)
        while True:
            timeout = self._connection.timeout  # the daemon may wait wait_ms for devices: so may the call
            if timeout is not None:
                timeout += asked.wait_ms / 1000.0
            started = time.monotonic()
            try:
                return Pick.from_response(self._connection.stub.PickDevices(asked, timeout=timeout))
            except grpc.RpcError as e:
                # A waiting pick whose daemon went away (a restart): asked again within the wait, with
                # the time left and the waiter id the daemon gave it, which gets its place back.
                left = wait_ends - time.monotonic() - backoff
                if request.wait_ms == 0 or e.code() != grpc.StatusCode.UNAVAILABLE or left <= 0:
                    raise self._connection.error(e, self._connection.waited(started, timeout)) from None
                asked.waiter_id = _waiter_id(e) or asked.waiter_id
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
            asked.wait_ms = max(1, int(left * 1000))

    def release_lease(self, lease_id: str) -> devplace_pb2.LeaseInfo:
        """Ends a lease now (LeaseRelease); NotFoundError when it already ended."""
        return self._unary("LeaseRelease", devplace_pb2.LeaseReleaseRequest(lease_id=lease_id)).lease

    def keep_lease_alive(self, lease_id: str, ttl: float = 300.0) -> devplace_pb2.LeaseInfo:
        """Extends a TTL lease to ``ttl`` seconds from now (LeaseKeepAlive)."""
        request = devplace_pb2.LeaseKeepAliveRequest(lease_id=lease_id, ttl_ms=int(ttl * 1000))
        return self._unary("LeaseKeepAlive", request).lease

    # ---- internals ----
    def _unary(self, rpc: str, request: Any) -> Any:
        return self._connection.unary(getattr(self._connection.stub, rpc), request)

    def _error(self, e: grpc.RpcError) -> Error:
        """The :class:`Error` for a failed call (a watch's too): see GrpcConnection.error."""
        return self._connection.error(e)


def _waiter_id(e: grpc.RpcError) -> str:
    """The waiter id a failed PickDevices call was sent (initial metadata "devplace-waiter-id"), or ""."""
    try:
        metadata = e.initial_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # pylint: disable=broad-except  # a call that never reached the daemon
        return ""
    for key, value in metadata:
        if key == "devplace-waiter-id" and isinstance(value, str) and len(value) <= 64:
            return value
    return ""


class Watch(Iterator[devplace_pb2.Inventory]):
    """An iterator over inventories (``devplace_pb2.Inventory``) from ``Client.watch()``; its errors are
    worded by the client's connection (_grpc_connection.py).

    Yields the current snapshot first, then each new revision. Ends (``StopIteration``) after
    :meth:`cancel`, which any thread may call while another is blocked in ``next()``; a ``with``
    block cancels on exit. Raises :class:`AbortedError` when the daemon ends the stream (it shuts
    down: reconnect to keep watching), :class:`UnavailableError` when the connection breaks,
    :class:`DeadlineExceededError` when the client's ``watch_timeout`` passes.
    """

    def __init__(self, client: "Client", call: Any) -> None:
        self._client = client
        self._call = call
        self._cancelled = threading.Event()
        self._done = False

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> devplace_pb2.Inventory:
        if self._done:
            raise StopIteration
        try:
            return next(self._call)
        except StopIteration:
            self._done = True
            if self._cancelled.is_set():
                raise
            raise AbortedError("the daemon ended the watch (it is shutting down); reconnect to keep watching") \
                from None
        except grpc.RpcError as e:
            self._done = True
            # Cancelled, or its Client closed (by the job, or at interpreter exit while a thread
            # still iterates): the iteration ends quietly.
            if self._cancelled.is_set() or self._client._connection.closed:
                raise StopIteration from None
            raise self._client._error(e) from None

    def cancel(self) -> None:
        """Ends the watch: a blocked or later ``next()`` stops the iteration. Idempotent, thread-safe."""
        self._cancelled.set()
        self._call.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


_FALLBACK_STEP = "FALLBACK no answer from the daemon; fallback=cpu answers cpu without it"


def _cpu_fallback(error: Error) -> Resolution:
    """The answer of ``fallback="cpu"`` (libdevplace's Client::Resolve gives the same)."""
    warning = ("devplace fallback: answered cpu without the daemon (fallback=cpu); accelerators, if any, "
               f"are unused: {error}")
    response = devplace_pb2.ResolveDeviceResponse(
        device="cpu", backend=devplace_pb2.ROW_CPU, package="torch", devices=["cpu"],
        explanation=[_FALLBACK_STEP], warnings=[warning])
    return Resolution.from_response(response)


def _issue(answer: Any, category: type) -> None:
    """Each warning of ``answer`` (a Resolution or a Pick) as a Python warning of ``category`` attributed to the job's line that
    called devplace, and nothing else: one channel, so that each shows once whatever the job's logging
    set-up (a record of devplace's own beside it printed every warning twice under
    ``logging.basicConfig()``). The job routes them with Python's own switches: the warnings filters,
    and ``logging.captureWarnings(True)`` for its log (records of the ``py.warnings`` logger)."""
    level = _callers_level()
    for text in answer.warnings:
        warnings.warn(text, category, stacklevel=level)


def _callers_level() -> int:
    """warnings.warn's ``stacklevel``, called from this function's caller, for the innermost frame
    outside the devplace package (the job's call of resolve_device() or Client.resolve())."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").split(".")[0] == "devplace":
        frame = frame.f_back
        level += 1
    return level


def resolve_device(workload: Union[str, int], device_map: Union[str, int, None] = None, *,
                   address: Optional[str] = None, timeout: Optional[float] = 5.0,
                   tls: Optional[TlsOptions] = None, **kwargs: Any) -> str:
    """The one-liner for a pod's first line: the device string this process should use.

    ``device = resolve_device("inference", device_map="auto")`` gives the same answer as
    ``devplace resolve --workload=inference --device_map=auto`` run in the same environment;
    ``resolve_device("training", transformers_version="4.46.3")`` applies that release's rules, as
    ``--transformers_version=4.46.3`` does (``accelerate_version`` likewise).
    ``address``, ``timeout`` and ``tls`` are :class:`Client`'s; everything else is
    :meth:`Client.resolve`'s. Raises what those raise (every error is a ``devplace.ResolveError``).
    ``fallback="cpu"`` (or env DEVPLACE_FALLBACK=cpu) answers ``"cpu"`` with a :class:`FallbackWarning`
    (a ``RuntimeWarning``) when the daemon gives no answer, so a pod's first line does not stop the pod.

    Each warning of the answer (a container that cannot see its GPUs gets ``"cpu"`` and the reason) is
    issued once, as a :class:`DevplaceWarning` pointing at the caller's line, whatever the job's logging
    set-up; ``warnings.filterwarnings`` with ``category=devplace.DevplaceWarning`` silences it
    ("ignore") or raises it ("error"), and ``logging.captureWarnings(True)`` sends it to the job's log
    (a record of the ``py.warnings`` logger) instead of stderr.
    """
    with Client(address, timeout, tls) as client:
        answer = client.resolve(workload, device_map, **kwargs)
    if answer.explanation[:1] != [_FALLBACK_STEP]:  # the fallback's warning was issued by resolve()
        _issue(answer, DevplaceWarning)
    return answer.device


# TTL leases this process keeps alive (pick(ttl=...)): lease id -> the ttl in seconds each renewal asks for.
# Lease.renew() sets a new ttl, Lease.release() removes the id, which ends its thread without a warning.
_kept_alive: Dict[str, float] = {}
_kept_alive_lock = threading.Lock()


def _keep_alive(address: Optional[str], timeout: Optional[float], tls: Optional[TlsOptions], lease_id: str,
                ttl_ms: int) -> None:
    """Renews a TTL lease every third of its time to live for as long as this process runs, or until
    :meth:`Lease.release` ends it."""
    with _kept_alive_lock:
        _kept_alive[lease_id] = ttl_ms / 1000.0

    def ttl_now() -> Optional[float]:
        with _kept_alive_lock:
            return _kept_alive.get(lease_id)

    def run() -> None:
        stop = threading.Event()
        while True:
            ttl = ttl_now()
            if ttl is None or stop.wait(max(ttl / 3.0, 0.5)):
                return
            ttl = ttl_now()
            if ttl is None:
                return  # released by this process meanwhile
            try:
                with Client(address, timeout=timeout, tls=tls) as client:
                    client.keep_lease_alive(lease_id, ttl)
            except Exception as e:  # noqa: BLE001 - report and stop: the lease has ended
                if ttl_now() is None:
                    return
                warnings.warn(f"devplace: lease {lease_id} could not be kept alive ({e}); its devices may be "
                              "picked by another job", RuntimeWarning, stacklevel=1)
                return

    threading.Thread(target=run, name=f"devplace-lease-{lease_id[:8]}", daemon=True).start()


class Lease:
    """A lease of PickDevices named by its id (``Pick.lease_id``, or the id ``devplace inventory``
    shows its owner), to renew or release it from Python as ``devplace renew`` and ``devplace
    release`` do::

        picked = devplace.pick(ttl=600)
        devplace.Lease(picked.lease_id).renew(ttl=7200)   # two hours from now (LeaseKeepAlive)
        devplace.Lease(picked.lease_id).release()         # ends it now (LeaseRelease)

    ``address``, ``timeout`` and ``tls`` are :class:`Client`'s (the daemon that holds the lease).
    Only the user who picked (or root) may renew or release a lease. A lease that ``pick(ttl=...)``
    keeps alive in this process is then renewed with the new ``ttl``, and after :meth:`release` no
    longer (without a warning).

    Raises (from each call):
        InvalidArgumentError: an empty ``lease_id``, or ``ttl`` outside 1 to 86400 seconds.
        NotFoundError: no such lease (it ended, or the id is wrong).
        PermissionDeniedError: another user's lease.
        FailedPreconditionError: renewing a lease held for a process or a process group (it lasts as
            long as its holder and has no time to live).
        UnavailableError: no daemon at the address.
    """

    def __init__(self, lease_id: str, address: Optional[str] = None, timeout: Optional[float] = 5.0,
                 tls: Optional[TlsOptions] = None) -> None:
        if not isinstance(lease_id, str) or not lease_id:
            raise InvalidArgumentError(f"lease_id: {lease_id!r}: want the lease's id (Pick.lease_id, or the id "
                                       "devplace inventory shows on your own lease)")
        self.lease_id = lease_id
        self._address, self._timeout, self._tls = address, timeout, tls

    def renew(self, ttl: float = 300.0) -> devplace_pb2.LeaseInfo:
        """Gives the lease a time to live of ``ttl`` seconds (1 to 86400) from now; its new LeaseInfo."""
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 1 <= ttl <= 86400:
            raise InvalidArgumentError(f"ttl: {ttl!r}: want seconds from 1 to 86400 (a day)")
        with Client(self._address, timeout=self._timeout, tls=self._tls) as client:
            info = client.keep_lease_alive(self.lease_id, float(ttl))
        with _kept_alive_lock:
            if self.lease_id in _kept_alive:
                _kept_alive[self.lease_id] = float(ttl)
        return info

    def release(self) -> devplace_pb2.LeaseInfo:
        """Ends the lease now; its devices go to the next pick. The LeaseInfo it had."""
        with _kept_alive_lock:
            kept = _kept_alive.pop(self.lease_id, None)
        try:
            with Client(self._address, timeout=self._timeout, tls=self._tls) as client:
                return client.release_lease(self.lease_id)
        except Error:
            if kept is not None:  # not released: keep it alive as before
                with _kept_alive_lock:
                    _kept_alive.setdefault(self.lease_id, kept)
            raise


def pick(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False,
         row: Union[str, int, None] = None, holder: Union[str, int, None] = None, ttl: Optional[float] = None,
         wait: Optional[float] = None, job: Optional[devplace_pb2.ResolveDeviceRequest] = None,
         address: Optional[str] = None, timeout: Optional[float] = 5.0, tls: Optional[TlsOptions] = None) -> Pick:
    """Leases the ``count`` least used devices of this job's row and sets ``os.environ`` so that the
    job sees exactly them; call it before importing torch (before anything initialises CUDA, ROCm, ...)::

        import devplace
        devplace.pick(count=1)        # os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-...", leased to this job
        import torch                  # sees exactly the picked GPU, as cuda:0

    ``min_free`` (bytes, or a size such as "20G") skips devices with less free memory;
    ``allow_shared`` lets devices other processes use be picked (after idle ones); ``row`` names the
    row ("cuda/nvidia", "npu", ... ; default: this job's own); ``wait`` (seconds, at most 3600)
    lets the daemon wait for a device to be released. The daemon never picks outside this
    process's visibility variables, /dev nodes or DRA allocation (``job``, default
    :func:`devplace.from_environment`; a scheduler picking for another process passes
    :func:`devplace.for_job`'s request).

    Who holds the lease (``holder``; the lease ends when its holder does, and the devices go to the
    next pick):

    - None (the default), over the unix socket: the job. When this process leads its process group
      (started from an interactive shell, as a container's entrypoint, with ``setsid`` or
      ``start_new_session=True``), the lease is held for that group (``"process_group"``): it lasts
      while any process of the group runs, so workers started with ``subprocess``,
      ``multiprocessing`` or ``torch.multiprocessing.spawn`` keep it even when this process is
      killed (SIGKILL, the OOM killer), and it ends when the last of them ends. A worker started
      with ``start_new_session=True`` (or ``os.setsid()``) leaves the group and is not covered.
      Otherwise (a batch script's or an ``srun`` task's group, which is not this job's alone) the
      lease is held for this process only, and a :class:`DevplaceWarning` says so and how to cover
      the workers (:func:`devplace.job_holder`).
    - ``"process"``: this process only, whatever its group (the old default), without the warning.
    - ``"process_group"``: this process's group, which it must lead (FailedPreconditionError
      otherwise).
    - ``ttl`` (seconds, 1 to 86400; None or 0: none) asks for a lease with a time to live instead (over TCP that is the only
      kind, and ``ttl`` is then required: without it the pick raises FailedPreconditionError); it
      is kept alive in a background thread while this process runs.

    Raises:
        FailedPreconditionError: too few devices free (the message lists each one's usage), the
            job's device is cpu, ``min_free`` where no device's free memory is known, or a pick
            over TCP without ``ttl``.
        InvalidArgumentError: an argument out of range.
        UnavailableError: no daemon, or no inventory yet.

    Each warning of the answer (usage unknown, a driver-dependent mask, ...) is issued once as a
    :class:`DevplaceWarning`, as :func:`devplace.resolve_device` issues its own; the result's
    ``warnings`` keeps them too.
    """
    if _torch_already_initialised():
        warnings.warn("devplace.pick(): a torch device runtime is already initialised in this process; the "
                      "variables set now do not change the devices it sees. Call devplace.pick() before "
                      "importing torch.", RuntimeWarning, stacklevel=2)
    ttl = _ttl(ttl)  # 0 is None: no time to live
    with Client(address, timeout=timeout, tls=tls) as client:
        holder_note: Optional[str] = None
        if holder is None and ttl is None and client.target.startswith("unix:"):
            holder, holder_note = job_holder()  # over TCP the daemon says that a TTL is needed
        request = make_pick_request(count, min_free=min_free, allow_shared=allow_shared, row=row, holder=holder,
                                    ttl=ttl, wait=wait, job=job)
        result = client.pick_request(request)
    if holder_note is not None:
        result = dataclasses.replace(result, warnings=[*result.warnings, holder_note])
    result.apply()
    _issue(result, DevplaceWarning)  # as resolve_device() does: once each, at the job's line
    if result.lease.holder == devplace_pb2.LEASE_HOLDER_TTL:
        ttl_ms = (result.lease.expires_at.seconds - result.lease.created_at.seconds) * 1000
        _keep_alive(address, timeout, tls, result.lease_id, max(ttl_ms, 1000))
    return result
