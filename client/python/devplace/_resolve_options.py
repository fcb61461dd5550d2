"""The request ``resolve()`` sends and the job's environment it starts from: the Python peer of
libdevplace's client/resolve_options.cc. It owns :func:`make_request` (``ResolveOptions::ToRequest``:
the arguments of ``Client.resolve()`` over this process's capture), :func:`from_environment`
(``FromEnvironment()``: the placement variables, their near misses, the accelerator /dev nodes and
the DRA devices of the calling process) and :func:`for_job` (``ForJob()``: a job a scheduler
describes), with :func:`job_device_nodes` and :func:`possible_placement_typo`. The variable list is
:data:`PLACEMENT_ENVIRONMENT_VARIABLES`, generated at build time from libdevplace's
``PlacementEnvironmentVariables()`` (devplace/_placement_env.py): not a copy. The readers it calls
are _python_environment.py (the job's packages) and _device_metadata.py (DRA).
tests/python/test_environment.py checks the capture against the C++ one, by running it.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable, Iterable, List, Mapping, Optional, Union

from . import _read
from ._device_metadata import device_allocation
from ._placement_env import MAX_CAPTURED_NEAR_MISSES, PLACEMENT_ENVIRONMENT_VARIABLES
from ._python_environment import job_environment, normalize_name
from .errors import InvalidArgumentError
from .v1 import devplace_pb2

__all__ = ["PLACEMENT_ENVIRONMENT_VARIABLES", "MAX_CAPTURED_NEAR_MISSES", "OVERRIDES", "possible_placement_typo",
           "job_device_nodes", "from_environment", "for_job", "make_request"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1
_ASCII_WHITESPACE = " \t\n\v\f\r"


def _parse_int(text: str) -> Optional[int]:
    """An integer as libdevplace's ParseInt reads it (ASCII whitespace, sign, ASCII digits, int64)."""
    text = text.strip(_ASCII_WHITESPACE)
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _first_is_digit(name: str, prefix: str) -> bool:
    return len(name) > len(prefix) and name.startswith(prefix) and "0" <= name[len(prefix)] <= "9"


_MAX_DEVICE_NODES = 1024  # the daemon takes at most 1024 job device nodes


def _scan(dev_dir: str, sub: str, match: Callable[[str], bool], budget: _read.Budget, out: List[str]) -> None:
    """Appends "/dev/<sub>/<name>" for each non-directory entry that ``match`` accepts, as ScanDev:
    the first 1024 by name; names that are not UTF-8 are no device node devplace knows."""
    directory = os.fsencode(os.path.join(dev_dir, sub) if sub else dev_dir)

    def keep(name: bytes) -> bool:
        return _read.is_utf8(name) and match(name.decode("utf-8"))

    try:
        names, _ = _read.list_names(directory, _MAX_DEVICE_NODES, budget, keep)
    except _read.Unreadable:
        return
    for raw in names:
        if _read.is_dir(_read.stat_path(directory + b"/" + raw)[1]):
            continue
        name = raw.decode("utf-8")
        out.append(f"/dev/{sub}/{name}" if sub else f"/dev/{name}")


def job_device_nodes(dev_dir: str = "/dev") -> List[str]:
    """The accelerator device nodes under ``dev_dir``, as sorted ``/dev/...`` paths.

    The same set as libdevplace's ``JobDeviceNodes()``: ``nvidia[0-9]*``, ``dri/renderD*``,
    ``dri/card*``, ``neuron*``, ``vfio/[0-9]*``, ``accel*`` and ``accel/accel*``, ``davinci[0-9]*``,
    ``cambricon_dev*``, ``mtgpu.*``. Directories and names that are not UTF-8 are skipped; a missing
    ``dev_dir`` or subdirectory contributes nothing; at most 1024, the first in path order, listed
    within 2 s. Paths are reported under ``/dev`` whatever ``dev_dir`` is (a fake tree in
    tests).
    """
    nodes: List[str] = []
    budget = _read.Budget(2.0, 0)
    _scan(dev_dir, "", lambda n: (_first_is_digit(n, "nvidia") or n.startswith("neuron") or n.startswith("accel")
                                  or _first_is_digit(n, "davinci") or n.startswith("cambricon_dev")
                                  or n.startswith("mtgpu.")), budget, nodes)
    _scan(dev_dir, "dri", lambda n: n.startswith("renderD") or n.startswith("card"), budget, nodes)
    _scan(dev_dir, "vfio", lambda n: "0" <= n[:1] <= "9" and n[:1] != "", budget, nodes)
    _scan(dev_dir, "accel", lambda n: n.startswith("accel"), budget, nodes)
    # C++ sorts the UTF-8 bytes; for str that is the same order as sorting code points.
    return sorted(nodes)[:_MAX_DEVICE_NODES]


def possible_placement_typo(name: str) -> bool:
    """Whether ``name`` may be a near miss of a placement variable, as libdevplace's
    ``PossiblePlacementTypo()``: a cheap superset of the daemon's rule E-TYPO. ``name`` is
    printable ASCII, not exactly a placement variable, and for some placement variable of length n >= 8
    (E-TYPO's targets) its length differs by at most 2 and at least n - 7 of that variable's upper-cased
    two-character pieces occur in it (an edit breaks at most 3 pieces, so 2 edits leave n - 7)."""
    if name in PLACEMENT_ENVIRONMENT_VARIABLES or not all(" " <= c <= "~" for c in name):
        return False
    upper = "".join(c.upper() if "a" <= c <= "z" else c for c in name)
    bigrams = Counter(upper[i:i + 2] for i in range(len(upper) - 1))
    for target in PLACEMENT_ENVIRONMENT_VARIABLES:
        if len(target) < 8 or abs(len(name) - len(target)) > 2:  # E-TYPO's targets have 8 characters or more
            continue
        shared = sum((bigrams & Counter(target[i:i + 2] for i in range(len(target) - 1))).values())
        if shared + 7 >= len(target):
            return True
    return False


def _add_near_misses(request: devplace_pb2.ResolveDeviceRequest, names: Iterable[str]) -> None:
    """The first MAX_CAPTURED_NEAR_MISSES possible typos of ``names`` (byte order), value empty."""
    added = 0
    for name in sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape")):
        if added == MAX_CAPTURED_NEAR_MISSES:
            break
        if possible_placement_typo(name):
            request.env[name] = ""
            added += 1


def _placement_request(lookup: Callable[[str], Optional[str]]) -> devplace_pb2.ResolveDeviceRequest:
    request = devplace_pb2.ResolveDeviceRequest()
    for name in PLACEMENT_ENVIRONMENT_VARIABLES:
        value = lookup(name)
        if value is None:
            continue
        number = _parse_int(value)
        if name == "LOCAL_RANK" and number is not None and 0 <= number <= _INT32_MAX:
            request.local_rank = number
        elif name == "WORLD_SIZE" and number is not None and 1 <= number <= _INT32_MAX:
            request.world_size = number
        else:
            try:
                request.env[name] = value
            except ValueError:  # undecodable bytes (os.environ's surrogate escapes)
                raise InvalidArgumentError(f"environment variable {name}: value is not valid UTF-8") from None
    return request


def from_environment(dev_dir: str = "/dev",
                     environ: Optional[Mapping[str, str]] = None) -> devplace_pb2.ResolveDeviceRequest:
    """A ``ResolveDeviceRequest`` describing the calling process, as ``ResolveOptions::FromEnvironment()``.

    Fills ``env``, ``local_rank``, ``world_size`` from ``environ`` (default: ``os.environ``),
    ``job_devices`` from :func:`job_device_nodes` (``dev_dir``: a fake /dev tree in tests) and
    ``device_allocation`` from :func:`devplace.device_allocation` when
    /var/run/kubernetes.io/dra-device-attributes exists (rule P-DRA). ``workload`` and the other
    fields are left unset. Exactly as libdevplace captures them:

    - Every placement variable (:data:`PLACEMENT_ENVIRONMENT_VARIABLES`) that is set goes into
      ``env``, an empty value included ("set but empty" is not "unset" to the rules), except that a
      valid ``LOCAL_RANK`` (an integer >= 0) and ``WORLD_SIZE`` (an integer >= 1), both at most
      2**31-1, fill ``local_rank`` / ``world_size``. Integers are read as Python's ``int()`` reads
      them, restricted to ASCII: surrounding whitespace, an optional sign, digits. Anything else
      (``abc``, Accelerate's ``-1``, out of range) stays in ``env`` verbatim, so the daemon applies
      its rules and answers INVALID_ARGUMENT where it is wrong.
    - Near misses of those names (``CUDA_VISIBLE_DEVICE``, ``local_rank``): at most
      MAX_CAPTURED_NEAR_MISSES names that :func:`possible_placement_typo` accepts, the first in
      byte order, go into ``env`` with an empty value, so the daemon can warn (rule E-TYPO).
    - ``job_devices`` is present even when empty: "this process sees no accelerator" (a container
      without GPU access).

    Raises:
        InvalidArgumentError: a placement variable's value is not valid UTF-8.
    """
    source = os.environ if environ is None else environ
    request = _placement_request(source.get)
    _add_near_misses(request, source.keys())
    request.job_devices.SetInParent()  # present even when empty: this process sees no accelerator
    request.job_devices.device_nodes.extend(job_device_nodes(dev_dir))
    allocation = device_allocation()  # None outside a container of a pod with DRA claims
    if allocation is not None:
        request.device_allocation.CopyFrom(allocation)
    return request


def for_job(job_env: Mapping[str, str],
            job_device_nodes: Optional[Iterable[str]] = None) -> devplace_pb2.ResolveDeviceRequest:
    """A request for a job described by its caller (a scheduler), as ``ResolveOptions::ForJob()``.

    Reads nothing of the calling process: only the placement variables of ``job_env`` are kept
    (LOCAL_RANK / WORLD_SIZE read as in :func:`from_environment`), and ``job_device_nodes`` is the
    job's accelerator /dev nodes (None: unknown, every host node assumed visible; empty: none).
    """
    request = _placement_request(job_env.get)
    _add_near_misses(request, job_env.keys())
    if job_device_nodes is not None:
        request.job_devices.SetInParent()
        request.job_devices.device_nodes.extend(job_device_nodes)
    return request


# make_request's argument ``from_environment`` hides the function of that name there.
_capture = from_environment

#: The keyword overrides ``resolve()`` / ``make_request()`` accept: request fields (``job_device_nodes``
#: fills ``job_devices``).
OVERRIDES = ("env", "local_rank", "world_size", "runtime_backends", "job_device_nodes", "transformers_version",
             "accelerate_version", "job_environment", "device_allocation")


def _enum(value: Union[str, int, None], enum: Any, prefix: str, field: str, accepted: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidArgumentError(f"{field}={value!r}: want {accepted}")
    if isinstance(value, int):
        return value  # an enum number (devplace_pb2.WORKLOAD_TRAINING, ...); the daemon checks it
    upper = value.upper()
    if upper and upper != "UNSPECIFIED" and prefix + upper in enum.keys():
        return enum.Value(prefix + upper)
    raise InvalidArgumentError(f"{field}={value!r}: want {accepted}")


def _int_field(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name}={value!r}: want an integer in {low}..{high}")
    return value


def _set_message(request: devplace_pb2.ResolveDeviceRequest, name: str, value: Any, cls: Any) -> None:
    """Sets message field ``name`` (cleared for None) from an override made by ``devplace.<name>(...)``."""
    request.ClearField(name)
    if value is None:
        return
    if not isinstance(value, cls):
        raise InvalidArgumentError(f"{name}={value!r}: want a devplace_pb2.{cls.__name__} (devplace.{name}(...)) "
                                   "or None")
    getattr(request, name).CopyFrom(value)


def make_request(workload: Union[str, int],
                 device_map: Union[str, int, None] = None,
                 *,
                 convention: Union[str, int, None] = None,
                 use_cpu: bool = False,
                 strict: bool = False,
                 model_size_bytes: Optional[int] = None,
                 from_environment: bool = True,
                 **overrides: Any) -> devplace_pb2.ResolveDeviceRequest:
    """The ``ResolveDeviceRequest`` that :meth:`Client.resolve` sends; arguments as there.

    Built as ``devplace resolve`` builds it from its flags: this process's capture first
    (:func:`devplace.from_environment`, unless ``from_environment=False``), then the arguments.
    ``local_rank`` / ``world_size`` replace the environment's LOCAL_RANK / WORLD_SIZE; an ``env``
    entry replaces the captured variable of that name (``None`` as a value removes it), and an
    ``env`` LOCAL_RANK / WORLD_SIZE drops the captured ``local_rank`` / ``world_size`` unless that is
    given too.

    The job's packages (``job_environment``): by default, with ``from_environment``, this
    interpreter's own (:func:`devplace.job_environment`, package metadata only, nothing imported),
    sent when torch is installed here (a process without torch is not the job's runtime, e.g. an
    init container: then nothing is sent and the answer is as without). Pass a
    ``devplace_pb2.JobEnvironment`` (``devplace.job_environment([site_packages_dir])``) to describe
    another environment, or ``None`` to send none. The daemon fills empty ``runtime_backends`` /
    ``transformers_version`` / ``accelerate_version`` from it; :class:`Resolution` says where each
    came from.

    The job's Kubernetes DRA devices (``device_allocation``): by default, with ``from_environment``,
    read from this container's DRA device metadata when /var/run/kubernetes.io/dra-device-attributes
    exists (:func:`devplace.device_allocation`); pass ``devplace.device_allocation(DIR)`` to read
    another directory, or ``None`` to send none. The daemon treats the devices it matches as the
    job's, numbered in the runtime's order, and names their claims in the explanation (rule P-DRA).

    Raises:
        InvalidArgumentError: an argument the request cannot carry (names the argument and the
            accepted forms).
        TypeError: an override that is not one of ``env``, ``local_rank``, ``world_size``,
            ``runtime_backends``, ``job_device_nodes``, ``transformers_version``,
            ``accelerate_version``, ``job_environment``, ``device_allocation``.
    """
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}: the overrides are "
                        f"{', '.join(OVERRIDES)}")
    request = _capture() if from_environment else devplace_pb2.ResolveDeviceRequest()
    request.workload = _enum(workload, devplace_pb2.Workload, "WORKLOAD_", "workload", "'training' or 'inference'")
    request.convention = _enum(convention, devplace_pb2.Convention, "CONVENTION_", "convention",
                               "'training_arguments', 'accelerate', 'from_pretrained', 'pipeline' or None")
    if device_map is None:
        request.device_map = ""
    elif isinstance(device_map, bool) or isinstance(device_map, (dict, list, tuple)):
        raise InvalidArgumentError(
            f"device_map={device_map!r}: want a device string ('cuda:1'), an int (1, -1), a from_pretrained "
            "keyword ('auto', 'balanced', 'balanced_low_0', 'sequential') or None; a per-module dict is not resolved")
    else:
        request.device_map = str(device_map)  # ints as digits; torch.device prints its device string
    request.use_cpu = bool(use_cpu)
    request.strict = bool(strict)
    if model_size_bytes is not None:
        request.model_size_bytes = _int_field("model_size_bytes", model_size_bytes, 0, _UINT64_MAX)
    for name, env_name in (("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE")):
        if name not in overrides:
            continue
        value = overrides[name]
        request.env.pop(env_name, None)  # the argument replaces the environment's value
        if value is None:
            request.ClearField(name)
        else:
            setattr(request, name, _int_field(name, value, _INT32_MIN, _INT32_MAX))
    if "runtime_backends" in overrides:
        backends = overrides["runtime_backends"] or []
        if isinstance(backends, str):
            raise InvalidArgumentError(f"runtime_backends={backends!r}: want a list of names, e.g. ['cuda']")
        del request.runtime_backends[:]
        request.runtime_backends.extend(str(b) for b in backends)
    env = overrides.get("env")
    if env is not None:
        if not isinstance(env, Mapping):
            raise InvalidArgumentError(f"env={env!r}: want a dict of variable -> value (None removes one)")
        for key, value in env.items():
            if value is None:
                request.env.pop(key, None)
            else:
                request.env[str(key)] = str(value)
            if key == "LOCAL_RANK" and "local_rank" not in overrides:
                request.ClearField("local_rank")
            if key == "WORLD_SIZE" and "world_size" not in overrides:
                request.ClearField("world_size")
    for name in ("transformers_version", "accelerate_version"):
        if name not in overrides:
            continue
        version = overrides[name]
        if version is not None and not isinstance(version, str):
            raise InvalidArgumentError(f"{name}={version!r}: want a release string such as '4.46.3' or '1.0.0' "
                                       "(X.Y or X.Y.Z, optionally with a suffix like '.dev0' or 'rc1'), or None for "
                                       "the newest devplace knows")
        setattr(request, name, version or "")  # the daemon checks the form and the supported range
    if "job_environment" in overrides:
        _set_message(request, "job_environment", overrides["job_environment"], devplace_pb2.JobEnvironment)
    elif from_environment:
        job = job_environment()
        if any(normalize_name(p.name) == "torch" for p in job.packages):
            request.job_environment.CopyFrom(job)
    if "device_allocation" in overrides:
        _set_message(request, "device_allocation", overrides["device_allocation"], devplace_pb2.DeviceAllocation)
    if "job_device_nodes" in overrides:
        nodes = overrides["job_device_nodes"]
        request.ClearField("job_devices")
        if nodes is not None:
            if isinstance(nodes, str):
                raise InvalidArgumentError(f"job_device_nodes={nodes!r}: want a list of /dev paths ([] = none, "
                                           "None = unknown)")
            nodes = [str(n) for n in nodes]
            for node in nodes:
                if not node.startswith("/"):
                    raise InvalidArgumentError(f"job_device_nodes: {node!r} is not an absolute path; want /dev "
                                               "paths such as /dev/nvidia1 ([] = none, None = unknown)")
            request.job_devices.SetInParent()
            request.job_devices.device_nodes.extend(nodes)
    return request

