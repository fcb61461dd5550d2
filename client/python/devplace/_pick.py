"""Shared hosts: the Python peer of libdevplace's ``Client::Pick`` and ``ApplyPickEnvironment``
(client/client.cc). :func:`pick` asks the daemon (PickDevices, rule P-PICK of docs/SEMANTICS.md) for
the least used devices of this job's row that nobody else holds, sets the variables in
``os.environ`` that make the job's runtime see exactly them, and returns a :class:`Pick`. Call it
before ``import torch`` (before anything initialises CUDA, ROCm, ...)::

    import devplace
    devplace.pick(count=1)        # os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-...", leased to this process
    import torch                  # sees exactly the picked GPU, as cuda:0

Over the unix socket the lease lasts as long as this process; over TCP it is a lease with a time to
live that a background thread keeps alive while this process runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

from .errors import DevplaceWarning, InvalidArgumentError
from ._resolve_options import from_environment
from .v1 import devplace_pb2

if TYPE_CHECKING:
    from ._grpc_connection import TlsOptions

__all__ = ["Pick", "make_pick_request", "pick"]

_UNITS = (("TIB", 1 << 40), ("GIB", 1 << 30), ("MIB", 1 << 20), ("KIB", 1 << 10), ("TB", 1 << 40), ("GB", 1 << 30),
          ("MB", 1 << 20), ("KB", 1 << 10), ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1))


def _bytes(value: Union[int, str, None], name: str) -> int:
    """An int of bytes, or a size such as "20G" / "512MiB" (powers of 1024), like ``devplace pick --min_free``."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgumentError(f"{name}: want bytes (int) or a size such as '20G', not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{name}: {value} is negative")
        return value
    text = value.strip().upper()
    unit = 1
    for suffix, size in _UNITS:
        if len(text) > len(suffix) and text.endswith(suffix):
            text, unit = text[:-len(suffix)], size
            break
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if not number >= 0 or number * unit > 1.8e19:
        raise InvalidArgumentError(f"{name}: {value!r}: want bytes or a number with K, M, G or T, e.g. '20G'")
    return int(number * unit)


def _ms(value: Optional[float], name: str, maximum: float) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= maximum:
        raise InvalidArgumentError(f"{name}: {value!r}: want seconds from 0 to {maximum:g}")
    return int(value * 1000)


def make_pick_request(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False,
                      row: Union[str, int, None] = None, holder: Union[str, int, None] = None,
                      ttl: Optional[float] = None, wait: Optional[float] = None,
                      job: Optional[devplace_pb2.ResolveDeviceRequest] = None) -> devplace_pb2.PickDevicesRequest:
    """The PickDevicesRequest for these arguments (see :func:`pick`); ``job`` defaults to this
    process (:func:`devplace.from_environment`)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
        raise InvalidArgumentError(f"count: {count!r}: want 1 to 64")
    request = devplace_pb2.PickDevicesRequest(count=count, min_free_bytes=_bytes(min_free, "min_free"),
                                              allow_shared=bool(allow_shared), ttl_ms=_ms(ttl, "ttl", 86400),
                                              wait_ms=_ms(wait, "wait", 3600))
    request.job.CopyFrom(job if job is not None else from_environment())
    if row is not None:
        request.row = _enum(devplace_pb2.Row, row, "ROW_", "row")
    if holder is not None:
        request.holder = _enum(devplace_pb2.LeaseHolder, holder, "LEASE_HOLDER_", "holder")
    elif ttl is not None:
        request.holder = devplace_pb2.LEASE_HOLDER_TTL
    return request


def _enum(enum: Any, value: Union[str, int], prefix: str, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).upper().replace("/", "_")
    for candidate in (text, prefix + text):
        if candidate in enum.keys():
            return enum.Value(candidate)
    names = ", ".join(k[len(prefix):].lower() for k in enum.keys() if not k.endswith("UNSPECIFIED"))
    raise InvalidArgumentError(f"{name}: {value!r}: want one of {names}")


@dataclasses.dataclass(frozen=True)
class Pick:
    """What :func:`pick` got: the devices, the environment that selects them and the lease.

    Attributes:
        device: the job's device string with ``env`` applied ("cuda:0"): ``str(pick)`` is this.
        devices: every picked device in the job's numbering ("cuda:0", "cuda:1", ...).
        env: the variables to set (``pick()`` has set them in ``os.environ``).
        unset: the variables to remove (``pick()`` has removed them).
        placed: host identity of each device (``devplace_pb2.PlacedDevice``).
        lease_id: the lease (``Client.release_lease(lease_id)`` ends it early).
        lease: the whole ``devplace_pb2.LeaseInfo``.
        explanation: why each device was or was not picked, rule ids first.
        warnings: hazards and hints.
        response: the ``devplace_pb2.PickDevicesResponse`` itself.
    """

    device: str
    devices: List[str]
    env: Dict[str, str]
    unset: List[str]
    placed: List[devplace_pb2.PlacedDevice]
    lease_id: str
    lease: devplace_pb2.LeaseInfo
    explanation: List[str]
    warnings: List[str]
    response: devplace_pb2.PickDevicesResponse

    @classmethod
    def from_response(cls, response: devplace_pb2.PickDevicesResponse) -> Pick:
        return cls(device=response.device, devices=list(response.devices), env=dict(response.env),
                   unset=list(response.unset), placed=list(response.placed), lease_id=response.lease.lease_id,
                   lease=response.lease, explanation=list(response.explanation), warnings=list(response.warnings),
                   response=response)

    def apply(self) -> None:
        """Sets ``env`` and removes ``unset`` in ``os.environ`` (what :func:`pick` does)."""
        for name in self.unset:
            os.environ.pop(name, None)
        os.environ.update(self.env)

    def __str__(self) -> str:
        return self.device


def _torch_already_initialised() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    for backend in ("cuda", "xpu", "npu", "mlu", "musa"):
        module = getattr(torch, backend, None)
        initialised = getattr(module, "is_initialized", None)
        try:
            if callable(initialised) and initialised():
                return True
        except Exception:  # noqa: BLE001 - a plug-in's own failure is not the pick's
            continue
    return False


def _keep_alive(address: Optional[str], timeout: Optional[float], tls: Optional[TlsOptions], lease_id: str,
                ttl_ms: int) -> None:
    """Renews a TTL lease every third of its time to live for as long as this process runs."""
    from ._client import Client  # noqa: PLC0415 - a cycle at import time otherwise

    def run() -> None:
        stop = threading.Event()
        while not stop.wait(max(ttl_ms / 3000.0, 0.5)):
            try:
                with Client(address, timeout=timeout, tls=tls) as client:
                    client.keep_lease_alive(lease_id, ttl_ms / 1000.0)
            except Exception as e:  # noqa: BLE001 - report and stop: the lease has ended
                warnings.warn(f"devplace: lease {lease_id} could not be kept alive ({e}); its devices may be "
                              "picked by another job", RuntimeWarning, stacklevel=1)
                return

    threading.Thread(target=run, name=f"devplace-lease-{lease_id[:8]}", daemon=True).start()


def pick(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False,
         row: Union[str, int, None] = None, ttl: Optional[float] = None, wait: Optional[float] = None,
         job: Optional[devplace_pb2.ResolveDeviceRequest] = None, address: Optional[str] = None,
         timeout: Optional[float] = 5.0, tls: Optional[TlsOptions] = None) -> Pick:
    """Leases the ``count`` least used devices of this job's row and sets ``os.environ`` so that the
    job sees exactly them; call it before importing torch.

    ``min_free`` (bytes, or a size such as "20G") skips devices with less free memory;
    ``allow_shared`` lets devices other processes use be picked (after idle ones); ``row`` names the
    row ("cuda/nvidia", "npu", ... ; default: this job's own); ``wait`` (seconds, at most 3600)
    lets the daemon wait for a device to be released; ``ttl`` (seconds) asks for a lease with a time
    to live instead of one held for this process (over TCP that is the only kind, and ``ttl`` is
    then required: without it the pick raises FailedPreconditionError; it is kept alive in a
    background thread). The daemon never picks outside this process's visibility variables,
    /dev nodes or DRA allocation (``job``, default :func:`devplace.from_environment`; a scheduler
    picking for another process passes :func:`devplace.for_job`'s request).

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
    from ._client import Client, _issue  # noqa: PLC0415

    if _torch_already_initialised():
        warnings.warn("devplace.pick(): a torch device runtime is already initialised in this process; the "
                      "variables set now do not change the devices it sees. Call devplace.pick() before "
                      "importing torch.", RuntimeWarning, stacklevel=2)
    request = make_pick_request(count, min_free=min_free, allow_shared=allow_shared, row=row, ttl=ttl, wait=wait,
                                job=job)
    with Client(address, timeout=timeout, tls=tls) as client:
        result = client.pick_request(request)
    result.apply()
    _issue(result, DevplaceWarning)  # as resolve_device() does: once each, at the job's line
    if result.lease.holder == devplace_pb2.LEASE_HOLDER_TTL:
        ttl_ms = (result.lease.expires_at.seconds - result.lease.created_at.seconds) * 1000
        _keep_alive(address, timeout, tls, result.lease_id, max(ttl_ms, 1000))
    return result
