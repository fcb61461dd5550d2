"""Shared hosts: the PickDevices request and answer, the Python peer of libdevplace's ``PickOptions``,
``Client::Pick``'s answer and ``ApplyPickEnvironment`` (client/client.cc). :func:`make_pick_request`
checks the arguments and builds the request (rule P-PICK of docs/SEMANTICS.md); :class:`Pick` is the
answer: the least used devices of the job's row that nobody else holds, and the variables that make
the job's runtime see exactly them (``Pick.apply()`` sets them in ``os.environ``). It knows nothing of
the client that asks: ``devplace.pick()`` (_client.py) sends the request, applies the answer and keeps
a lease with a time to live alive.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, List, Optional, Tuple, Union

from .errors import InvalidArgumentError
from ._resolve_options import from_environment
from .v1 import devplace_pb2

__all__ = ["Pick", "job_holder", "make_pick_request"]

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


def _ttl(value: Optional[float]) -> Optional[float]:
    """A pick's ``ttl`` in seconds: None (or 0, as ``devplace pick --ttl=0``) for no time to live, else
    1 to 86400; the error names ``ttl`` and what each value means (not the request's ttl_ms)."""
    if value is None or (not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= 86400:
        raise InvalidArgumentError(
            f"ttl: {value!r}: want None or 0 (no time to live: the lease is held for the job, see holder) or seconds "
            "from 1 to 86400 (a day) for a lease with a time to live")
    return value


def make_pick_request(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False,
                      row: Union[str, int, None] = None, holder: Union[str, int, None] = None,
                      ttl: Optional[float] = None, wait: Optional[float] = None,
                      job: Optional[devplace_pb2.ResolveDeviceRequest] = None) -> devplace_pb2.PickDevicesRequest:
    """The PickDevicesRequest for these arguments (see :func:`pick`); ``job`` defaults to this
    process (:func:`devplace.from_environment`). ``holder`` None leaves the holder to the daemon (the
    calling process over the unix socket; a TTL lease when ``ttl`` is given): unlike :func:`pick`,
    which asks for :func:`job_holder`'s."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 64:
        raise InvalidArgumentError(f"count: {count!r}: want 1 to 64")
    ttl = _ttl(ttl)
    request = devplace_pb2.PickDevicesRequest(count=count, min_free_bytes=_bytes(min_free, "min_free"),
                                              allow_shared=bool(allow_shared), ttl_ms=_ms(ttl, "ttl", 86400),
                                              wait_ms=_ms(wait, "wait", 3600))
    request.job.CopyFrom(job if job is not None else from_environment())
    if row is not None:
        request.row = _row(row)
    if holder is not None:
        request.holder = _enum(devplace_pb2.LeaseHolder, holder, "LEASE_HOLDER_", "holder")
    elif ttl is not None:
        request.holder = devplace_pb2.LEASE_HOLDER_TTL
    return request


def job_holder() -> Tuple[int, Optional[str]]:
    """Who holds the lease of :func:`pick` for this job over the unix socket, and the warning for it.

    The job is this process's process group when this process leads it (its pid is its group id, as
    for a command typed at an interactive shell, a container's entrypoint, or a process started with
    ``setsid`` or ``start_new_session=True``): ``LEASE_HOLDER_PROCESS_GROUP``, held while any process
    of the group runs, so workers it starts with ``subprocess``, ``multiprocessing`` or
    ``torch.multiprocessing.spawn`` keep the lease when it dies; a worker that leaves the group
    (``start_new_session=True``, ``os.setsid()``, ``process_group=0``) is not covered. Otherwise
    (a process in the group of the script, shell or ``srun`` task that started it) the group is not
    this job's alone: ``LEASE_HOLDER_PROCESS``, this process only, and a warning that says so and how
    to hold the lease for the job. libdevplace's ``Client::Pick`` chooses the same way.
    """
    pid, group = os.getpid(), os.getpgrp()
    if group == pid:
        return devplace_pb2.LEASE_HOLDER_PROCESS_GROUP, None
    return devplace_pb2.LEASE_HOLDER_PROCESS, (
        f"the lease is held for this process only (pid {pid}): it does not lead its process group {group} (the "
        "group of the script, shell or task that started it), so processes it starts (subprocess, multiprocessing) "
        "would go on running on the devices without a lease if it died first. To hold the lease for them too, "
        "start this program as the leader of a group (from an interactive shell, with setsid, or "
        "start_new_session=True), or call os.setpgid(0, 0) before pick() where no terminal signals or reads it; "
        "holder=\"process\" keeps this process's lease without this warning")


def _row(value: Union[str, int]) -> int:
    """A Row from its documented name ("cuda/nvidia", "npu": ``devplace backends``), the enum's
    ("cuda_nvidia", "ROW_NPU") or its number; the error lists the documented names of the rows a pick
    may name (not cpu or mps)."""
    try:
        return _enum(devplace_pb2.Row, value, "ROW_", "row")
    except InvalidArgumentError:
        names = ", ".join(k[len("ROW_"):].lower().replace("cuda_", "cuda/") for k in devplace_pb2.Row.keys()
                          if k not in ("ROW_UNSPECIFIED", "ROW_CPU", "ROW_MPS"))
        raise InvalidArgumentError(f"row: {value!r}: want one of {names} (`devplace backends`)") from None


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
