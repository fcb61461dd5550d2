"""What the daemon answers to ResolveDevice, as a Python object: :class:`Resolution` wraps the
``ResolveDeviceResponse`` that libdevplace's ``Client::Resolve`` returns (``max_memory`` in
Accelerate's key format, where each version came from). It knows nothing of the client that asked
(_client.py builds one from each answer).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Union

from .v1 import devplace_pb2

__all__ = ["Resolution"]


def _max_memory(response: devplace_pb2.ResolveDeviceResponse) -> Dict[Union[int, str], int]:
    """max_memory in Accelerate's key format: device indices as ints, then "mps", others, "cpu", "disk"."""
    numbered = sorted((int(k), v) for k, v in response.max_memory.items() if k.isascii() and k.isdigit())
    named = [(k, v) for k, v in response.max_memory.items() if not (k.isascii() and k.isdigit())]
    last = {"mps": 0, "cpu": 2, "disk": 3}
    named.sort(key=lambda kv: (last.get(kv[0], 1), kv[0]))
    return dict(numbered + named)


def _provenance(value: int) -> str:
    """"given", "detected", "default" (or "" from a daemon that does not say)."""
    return devplace_pb2.Provenance.Name(value)[len("PROVENANCE_"):].lower() if value else ""


@dataclasses.dataclass(frozen=True)
class Resolution:
    """The daemon's answer to ``resolve()``.

    Attributes:
        device: the device string for PyTorch in the job's numbering ("cuda:0", "cuda", "npu:1",
            "cpu", ...): ready for ``torch.device(...)``, ``from_pretrained(device_map=...)`` and
            ``pipeline(device=...)``. ``str(resolution)`` is this.
        devices: every device the job may use, primary first.
        max_memory: budgets in bytes in Accelerate's key format (``{0: 77309411328, "cpu": ...}``);
            filled for device_map keywords, else empty.
        warnings: hazards and hints, each naming the cause and the fix.
        explanation: ordered steps, each starting with a rule id.
        placed: host identity of each accelerator in ``devices`` (``devplace_pb2.PlacedDevice``).
        backend: the row chosen, as its enum name ("ROW_CUDA_NVIDIA", "ROW_CPU", ...).
        package: the Python package the job needs for that row ("torch", "torch-npu", ...).
        inventory_revision: revision of the inventory the answer was computed from, within
            ``inventory_epoch``: two answers to one request with the same pair are the same answer
            but for the measured free memory (``placed[].memory_free_bytes`` and the ``max_memory``
            budgets), which the daemon re-reads between revisions.
        transformers_version: the Transformers release whose rules were applied: the one asked
            for; else the newest devplace knows ("5.15.0"), except that naming only an Accelerate
            below 1.1.0 applies Transformers 4.57.0 (the newest that runs with it).
        accelerate_version: the Accelerate release whose rules were applied (the one asked for,
            else the newest devplace knows, "1.14.0").
        versions_from: where each came from and where the runtime backends came from:
            ``{"transformers": "detected", "accelerate": "given", "runtime_backends": "default"}``
            ("given": the request's field; "detected": the job's packages; "default": devplace's).
        runtime_backends: the runtime backends applied (given or detected); empty = every present
            row's package assumed.
        response: the whole ``devplace_pb2.ResolveDeviceResponse``.
        job_versions: the job's own releases, as the request named them or the job's packages gave
            them: ``{"transformers": "6.0.0", "accelerate": "1.16.0"}``; a library neither told is
            absent.
        newer_than_rules: the libraries (``"transformers"``, ``"accelerate"``) whose job release is
            newer than every release the daemon's rules know. The answer then applied the newest
            known release's rules (``transformers_version`` / ``accelerate_version``) and
            ``warnings`` names both releases (rule V-SKEW); with ``strict=True`` such a request
            raises FailedPreconditionError instead. Empty when the rules cover the job.
        inventory_epoch: the daemon instance that numbered ``inventory_revision`` (revisions restart
            at 1 when the daemon restarts).
    """

    device: str
    devices: List[str]
    max_memory: Dict[Union[int, str], int]
    warnings: List[str]
    explanation: List[str]
    placed: List[devplace_pb2.PlacedDevice]
    backend: str
    package: str
    inventory_revision: int
    transformers_version: str
    accelerate_version: str
    versions_from: Dict[str, str]
    runtime_backends: List[str]
    response: devplace_pb2.ResolveDeviceResponse = dataclasses.field(repr=False, compare=False)
    job_versions: Dict[str, str] = dataclasses.field(default_factory=dict)
    newer_than_rules: List[str] = dataclasses.field(default_factory=list)
    inventory_epoch: int = 0

    @classmethod
    def from_response(cls, response: devplace_pb2.ResolveDeviceResponse) -> "Resolution":
        return cls(device=response.device, devices=list(response.devices), max_memory=_max_memory(response),
                   warnings=list(response.warnings), explanation=list(response.explanation),
                   placed=list(response.placed), backend=devplace_pb2.Row.Name(response.backend),
                   package=response.package, inventory_revision=response.inventory_revision,
                   transformers_version=response.transformers_version,
                   accelerate_version=response.accelerate_version,
                   versions_from={k: _provenance(getattr(response, f)) for k, f in (
                       ("transformers", "transformers_version_from"), ("accelerate", "accelerate_version_from"),
                       ("runtime_backends", "runtime_backends_from"))},
                   runtime_backends=list(response.runtime_backends), response=response,
                   job_versions={k: v for k, v in (("transformers", response.transformers_job_version),
                                                   ("accelerate", response.accelerate_job_version)) if v},
                   newer_than_rules=[k for k, newer in (("transformers", response.transformers_newer_than_rules),
                                                        ("accelerate", response.accelerate_newer_than_rules))
                                     if newer],
                   inventory_epoch=response.inventory_epoch)

    def __str__(self) -> str:
        return self.device
