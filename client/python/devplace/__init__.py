"""devplace: ask the host's devplaced which device this PyTorch job should use.

The Python peer of libdevplace (client/README.md), over grpcio and protobuf (pip's, or Debian's
python3-grpcio and python3-protobuf)::

    from devplace import resolve_device
    device = resolve_device("inference", device_map="auto")   # "cuda:0", "npu:0", "cpu", ...
    resolve_device("training", transformers_version="4.46.3", accelerate_version="1.0.0")  # older rules

    import devplace
    with devplace.Client() as client:                  # $DEVPLACE_ADDRESS, the default sockets, 127.0.0.1:7465
        answer = client.resolve("training", local_rank=1)
        answer.device, answer.devices, answer.max_memory, answer.warnings, answer.explanation
        client.inventory(); client.backends(); client.health(); client.refresh()

        with client.watch() as revisions:              # cancel() from any thread ends it
            for inventory in revisions: ...

    devplace.pick(count=1)       # shared hosts: lease the least used GPU to this job, set CUDA_VISIBLE_DEVICES;
                                 # then import torch and start the workers (they keep the lease: see pick())

Like ``devplace resolve``, ``resolve()`` sends this process's placement variables and accelerator
/dev nodes (and, in a Kubernetes pod with DRA claims, its allocated devices), captured exactly as
libdevplace's ``ResolveOptions::FromEnvironment()`` does (:func:`from_environment`,
:func:`device_allocation`). Errors raise :class:`ResolveError` (alias of :class:`Error`), one
subclass per gRPC code, carrying ``.code`` and ``.message`` (see :mod:`devplace.errors`).
``resolve_device()`` issues each warning of the answer once, as a :class:`DevplaceWarning`
(``logging.captureWarnings(True)`` puts them in the job's log); the cpu fallback's is a
:class:`FallbackWarning`.
Messages, enums and stubs of devplace.proto: ``devplace.v1.devplace_pb2`` / ``devplace_pb2_grpc``.
"""

import importlib as _importlib
import sys as _sys

__version__ = "@PROJECT_VERSION@"  # the project's version (CMake's project(VERSION)), written in by the build

# The two runtime dependencies (pyproject.toml; their ranges: client/README.md "Python"), checked first
# so that a venv or image without them gets what to install rather than "No module named 'grpc'".
for _module, _package in (("grpc", "grpcio"), ("google.protobuf", "protobuf")):
    try:
        _importlib.import_module(_module)
    except ImportError as _missing:
        raise ImportError(
            f"devplace needs the {_package} package, which this Python ({_sys.executable}) cannot import "
            f"({_missing}): pip install 'grpcio>=1.51' 'protobuf>=4.21.12,<6' (with Debian's /usr/bin/python3: "
            "apt-get install python3-grpcio python3-protobuf)") from _missing

from ._client import Client, Lease, Watch, pick, resolve_device
from ._device_metadata import DRA_METADATA_DIR, device_allocation
from ._grpc_connection import TlsOptions
from ._pick import Pick, job_holder, make_pick_request
from ._python_environment import JOB_PYTHON_PACKAGES, job_environment
from ._resolution import Resolution
from ._resolve_options import (MAX_CAPTURED_NEAR_MISSES, PLACEMENT_ENVIRONMENT_VARIABLES, for_job, from_environment,
                               job_device_nodes, make_request, possible_placement_typo)
from ._target import check_local_listener, check_unix_socket, default_target
from .errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError, DeadlineExceededError,
                     DevplaceWarning, Error, FailedPreconditionError, FallbackWarning, InternalError,
                     InvalidArgumentError, NotFoundError, OutOfRangeError, PermissionDeniedError, ResolveError,
                     ResourceExhaustedError, UnauthenticatedError, UnavailableError, UnimplementedError, UnknownError)

__all__ = [
    "__version__", "Client", "Lease", "Resolution", "TlsOptions", "Watch", "make_request", "resolve_device",
    "PLACEMENT_ENVIRONMENT_VARIABLES", "JOB_PYTHON_PACKAGES", "for_job", "from_environment", "job_device_nodes",
    "job_environment", "MAX_CAPTURED_NEAR_MISSES", "possible_placement_typo", "DRA_METADATA_DIR", "device_allocation",
    "check_local_listener", "check_unix_socket", "default_target", "Pick", "job_holder", "make_pick_request",
    "pick", "Error", "ResolveError", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError",
    "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError", "UnknownError", "DevplaceWarning", "FallbackWarning",
]
