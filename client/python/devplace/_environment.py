"""The calling process's placement environment, captured exactly as libdevplace's
``ResolveOptions::FromEnvironment()`` captures it (client/resolve_options.cc).

- The variable list is :data:`PLACEMENT_ENVIRONMENT_VARIABLES`, generated at build time from
  libdevplace's ``PlacementEnvironmentVariables()`` (devplace/_placement_env.py): not a copy.
- Every listed variable that is set goes into ``env``, an empty value included ("set but empty" is
  not "unset" to the rules), except that a valid ``LOCAL_RANK`` (an integer >= 0) and
  ``WORLD_SIZE`` (an integer >= 1), both at most 2**31-1, fill ``local_rank`` / ``world_size``.
  Integers are read as Python's ``int()`` reads them, restricted to ASCII: surrounding whitespace,
  an optional sign, digits. Anything else (``abc``, Accelerate's ``-1``, out of range) stays in
  ``env`` verbatim, so the daemon applies its rules and answers INVALID_ARGUMENT where it is wrong.
- Near misses of those names (``CUDA_VISIBLE_DEVICE``, ``local_rank``): at most
  MAX_CAPTURED_NEAR_MISSES names that :func:`possible_placement_typo` accepts, the first in byte
  order, go into ``env`` with an empty value, so the daemon can warn (rule E-TYPO).
- ``job_devices`` lists the process's accelerator /dev nodes (:func:`job_device_nodes`), present
  even when empty: "this process sees no accelerator" (a container without GPU access).
- ``device_allocation``: the Kubernetes DRA devices of this container (:func:`device_allocation`,
  at the end of this module), when its metadata directory exists.

tests/python/test_environment.py checks all of this against the C++ capture, by running it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from typing import Any, Callable, Iterable, List, Mapping, Optional

from ._placement_env import JOB_PYTHON_PACKAGES, MAX_CAPTURED_NEAR_MISSES, PLACEMENT_ENVIRONMENT_VARIABLES
from .errors import InvalidArgumentError, NotFoundError
from .v1 import devplace_pb2

__all__ = ["PLACEMENT_ENVIRONMENT_VARIABLES", "JOB_PYTHON_PACKAGES", "MAX_CAPTURED_NEAR_MISSES", "possible_placement_typo", "job_device_nodes", "from_environment", "for_job",
           "job_environment", "DRA_METADATA_DIR", "device_allocation"]

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
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


def _scan(dev_dir: str, sub: str, match: Callable[[str], bool], out: List[str]) -> None:
    directory = os.path.join(dev_dir, sub) if sub else dev_dir
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir or not match(entry.name):
            continue
        out.append(f"/dev/{sub}/{entry.name}" if sub else f"/dev/{entry.name}")


def job_device_nodes(dev_dir: str = "/dev") -> List[str]:
    """The accelerator device nodes under ``dev_dir``, as sorted ``/dev/...`` paths.

    The same set as libdevplace's ``JobDeviceNodes()``: ``nvidia[0-9]*``, ``dri/renderD*``,
    ``dri/card*``, ``neuron*``, ``vfio/[0-9]*``, ``accel*`` and ``accel/accel*``, ``davinci[0-9]*``,
    ``cambricon_dev*``, ``mtgpu.*``. Directories are skipped; a missing ``dev_dir`` or subdirectory
    contributes nothing. Paths are reported under ``/dev`` whatever ``dev_dir`` is (a fake tree in
    tests).
    """
    nodes: List[str] = []
    _scan(dev_dir, "", lambda n: (_first_is_digit(n, "nvidia") or n.startswith("neuron") or n.startswith("accel")
                                  or _first_is_digit(n, "davinci") or n.startswith("cambricon_dev")
                                  or n.startswith("mtgpu.")), nodes)
    _scan(dev_dir, "dri", lambda n: n.startswith("renderD") or n.startswith("card"), nodes)
    _scan(dev_dir, "vfio", lambda n: "0" <= n[:1] <= "9" and n[:1] != "", nodes)
    _scan(dev_dir, "accel", lambda n: n.startswith("accel"), nodes)
    # C++ sorts the UTF-8 bytes; for str that is the same order as sorting code points.
    return sorted(nodes)


def possible_placement_typo(name: str) -> bool:
    """Whether ``name`` may be a near miss of a placement variable, as libdevplace's
    ``PossiblePlacementTypo()``: a cheap superset of the daemon's rule E-TYPO. ``name`` is
    printable ASCII, not exactly a placement variable, and for some placement variable of length n
    its length differs by at most 2 and at least n - 7 of that variable's upper-cased
    two-character pieces occur in it (an edit breaks at most 3 pieces, so 2 edits leave n - 7)."""
    if name in PLACEMENT_ENVIRONMENT_VARIABLES or not all(" " <= c <= "~" for c in name):
        return False
    upper = "".join(c.upper() if "a" <= c <= "z" else c for c in name)
    bigrams = Counter(upper[i:i + 2] for i in range(len(upper) - 1))
    for target in PLACEMENT_ENVIRONMENT_VARIABLES:
        if abs(len(name) - len(target)) > 2:
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

    Fills ``env``, ``local_rank``, ``world_size`` (see the module docstring) from ``environ``
    (default: ``os.environ``), ``job_devices`` from :func:`job_device_nodes` (``dev_dir``: a fake
    /dev tree in tests) and ``device_allocation`` from :func:`devplace.device_allocation` when
    /var/run/kubernetes.io/dra-device-attributes exists (rule P-DRA). ``workload`` and the other
    fields are left unset.

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


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them ("Torch_NPU" -> "torch-npu")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def job_environment(path: Optional[List[str]] = None) -> devplace_pb2.JobEnvironment:
    """The job's Python packages that decide an answer, read with ``importlib.metadata``.

    Never imports torch, a plug-in, transformers or accelerate: only their installed metadata
    (``*.dist-info`` / ``*.egg-info``) is read, so this stays fast. Looks for the distributions of
    :data:`JOB_PYTHON_PACKAGES` (generated from libdevplace's ``JobPythonPackages()``, the list
    ``devplace resolve --python_env`` reads) on ``path`` (default: this interpreter's ``sys.path``),
    the first of each name winning as it does for ``import``. The daemon turns them into the
    request's runtime backends and library versions (rules V-JOB-BUILD, V-JOB-VERSION).
    """
    from importlib import metadata  # Python >= 3.8

    wanted = set(JOB_PYTHON_PACKAGES)
    found = devplace_pb2.JobEnvironment()
    where = sys.executable if path is None else os.pathsep.join(path)
    found.source = f"importlib.metadata of {where}"
    seen = set()
    for dist in metadata.distributions(**({} if path is None else {"path": list(path)})):
        name = dist.metadata["Name"] or ""
        key = normalize_name(name)
        if key in wanted and key not in seen:
            seen.add(key)
            found.packages.add(name=name, version=dist.version or "")
    return found


# ---- Kubernetes DRA Device Metadata (rule P-DRA) ----
# The devices Kubernetes Dynamic Resource Allocation allocated to this container, read exactly as
# libdevplace's ReadDeviceAllocation() reads them (client/device_metadata.cc). Inside a container the
# kubelet puts one file per claim, request and driver under DRA_METADATA_DIR:
# resourceclaims/<claim>/<request>/<driver>-metadata.json for a ResourceClaim the pod names,
# resourceclaimtemplates/<pod claim name>/... for one made from a template (Kubernetes documentation,
# "Access DRA Device Metadata"). Each file is a stream of DeviceMetadata objects, one per API version,
# newest first; the first of apiVersion metadata.resource.k8s.io/v1alpha1 is read.
# tests/python/test_dra.py checks this against the C++ reader, by running it.

#: Where the kubelet puts DRA Device Metadata inside a container (libdevplace's kDraMetadataDir).
DRA_METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"

_API_VERSION = "metadata.resource.k8s.io/v1alpha1"
_FILE_SUFFIX = "-metadata.json"
# The bounds of DeviceAllocation (devplace.proto); the daemon refuses a request beyond them.
_MAX_DEVICES = 1024
_MAX_ATTRIBUTES = 64
_MAX_STRING_BYTES = 256
_MAX_PROBLEMS = 64
_MAX_PROBLEM_BYTES = 1024
_JSON_WHITESPACE = " \t\n\r"


def _stream(text: str) -> List[Any]:
    """The top-level JSON values of a stream ("{...}{...}" or one per line); ValueError when malformed."""
    decoder = json.JSONDecoder()
    out = []
    i = 0
    while True:
        while i < len(text) and text[i] in _JSON_WHITESPACE:
            i += 1
        if i >= len(text):
            return out
        value, i = decoder.raw_decode(text, i)
        out.append(value)


def _string(obj: Any, name: str) -> str:
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else ""


def _attribute_text(value: Any) -> Optional[str]:
    """A DeviceAttribute ({"int": 1} / {"bool": true} / {"string": ...} / {"version": ...}) as text."""
    if not isinstance(value, dict):
        return None
    number = value.get("int")
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        if number != int(number) or abs(number) > 9.0e15:
            return None
        return str(int(number))
    flag = value.get("bool")
    if isinstance(flag, bool):
        return "true" if flag else "false"
    for kind in ("string", "version"):
        if isinstance(value.get(kind), str):
            return value[kind]
    return None


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class _Reader:
    def __init__(self, out: devplace_pb2.DeviceAllocation) -> None:
        self.out = out
        self.truncated = False

    def problem(self, what: str) -> None:
        if len(self.out.problems) >= _MAX_PROBLEMS:
            return
        data = what.encode("utf-8", "surrogateescape")
        if len(data) > _MAX_PROBLEM_BYTES:
            what = data[:_MAX_PROBLEM_BYTES].decode("utf-8", "ignore")
        self.out.problems.append(what)

    def file(self, path: str, rel: str, claim: str, from_template: bool, request_dir: str) -> None:
        try:
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            self.problem(f"{rel}: cannot read it ({e.strerror})")
            return
        try:
            objects = _stream(text)
        except ValueError:
            objects = None
        if objects is not None and not objects:
            self.problem(f"{rel}: empty (its driver writes it later, or not at all)")
            return
        seen = []
        for obj in objects if objects is not None else [None]:
            if not isinstance(obj, dict):
                self.problem(f"{rel}: not a JSON stream of DeviceMetadata objects")
                return
            api = _string(obj, "apiVersion")
            if api != _API_VERSION or _string(obj, "kind") != "DeviceMetadata":
                seen.append(f"{_string(obj, 'kind')} {api}")
                continue  # another API version: the same data, in a version this client does not know
            self.requests(obj, rel, claim, from_template, request_dir)
            return
        self.problem(f"{rel}: no DeviceMetadata of apiVersion {_API_VERSION} (found: {', '.join(seen)})")

    def requests(self, metadata: dict, rel: str, claim: str, from_template: bool, request_dir: str) -> None:
        requests = metadata.get("requests")
        if not isinstance(requests, list):
            return
        for r in requests:
            if not isinstance(r, dict):
                continue
            name = _string(r, "name")
            devices = r.get("devices")
            if not isinstance(devices, list):
                continue
            for d in devices:
                if isinstance(d, dict):
                    self.device(d, rel, claim, from_template, name or request_dir)

    def device(self, d: dict, rel: str, claim: str, from_template: bool, request: str) -> None:
        if len(self.out.devices) >= _MAX_DEVICES:
            if not self.truncated:
                self.problem(f"{rel}: more than {_MAX_DEVICES} devices in all; the rest not sent")
            self.truncated = True
            return
        device = devplace_pb2.AllocatedDevice(claim=claim, from_template=from_template, request=request,
                                              driver=_string(d, "driver"), pool=_string(d, "pool"),
                                              name=_string(d, "name"))
        for text in (device.claim, device.request, device.driver, device.pool, device.name):
            if _size(text) > _MAX_STRING_BYTES:
                self.problem(f"{rel}: a device with a name over {_MAX_STRING_BYTES} bytes; not sent")
                return
        if not device.driver or not device.pool or not device.name:
            self.problem(f"{rel}: a device without a driver, pool or name; not sent")
            return
        attributes = d.get("attributes")
        if isinstance(attributes, dict):
            # In name order (byte order, as the C++ reader sorts), the first _MAX_ATTRIBUTES that fit.
            for key in sorted(attributes, key=lambda k: k.encode("utf-8", "surrogatepass")):
                if len(device.attributes) >= _MAX_ATTRIBUTES:
                    break
                text = _attribute_text(attributes[key])
                if _size(key) > _MAX_STRING_BYTES or text is None or _size(text) > _MAX_STRING_BYTES:
                    continue
                device.attributes[key] = text
        self.out.devices.append(device)


def _entries(directory: str, files: bool) -> List[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    test = os.path.isfile if files else os.path.isdir
    return sorted(n for n in names if test(os.path.join(directory, n)))


def device_allocation(path: Optional[str] = None) -> Optional[devplace_pb2.DeviceAllocation]:
    """The devices Kubernetes DRA allocated to this container, as ``ReadDeviceAllocation()``.

    ``path`` is the metadata directory (default :data:`DRA_METADATA_DIR`). Every
    ``<claim>/<request>/<driver>-metadata.json`` under its ``resourceclaims/`` and
    ``resourceclaimtemplates/``, in path order, gives one ``AllocatedDevice`` per
    ``requests[].devices[]`` entry, with its scalar attributes as text (the first 64 by name, each
    key and value at most 256 bytes; at most 1024 devices). Files that cannot be used (unreadable,
    not JSON, no object of a known apiVersion, empty) are listed in ``problems``, which the daemon
    warns about. The daemon treats the devices it matches as the job's (rule P-DRA).

    Returns:
        None when ``path`` is None and the default directory does not exist (not a DRA container).

    Raises:
        NotFoundError: ``path`` was given and does not exist.
        InvalidArgumentError: the path is not a directory.
    """
    directory = DRA_METADATA_DIR if path is None else path
    if not os.path.exists(directory):
        if path is None:
            return None
        raise NotFoundError(f"{directory}: no such directory (no DRA device metadata in this container)")
    if not os.path.isdir(directory):
        raise InvalidArgumentError(f"{directory}: not a directory; want the DRA device metadata directory, "
                                   f"e.g. {DRA_METADATA_DIR}")
    out = devplace_pb2.DeviceAllocation(source=directory)
    reader = _Reader(out)
    for kind in ("resourceclaims", "resourceclaimtemplates"):
        base = os.path.join(directory, kind)
        for claim in _entries(base, False):
            for request in _entries(os.path.join(base, claim), False):
                for name in _entries(os.path.join(base, claim, request), True):
                    if name.endswith(_FILE_SUFFIX):
                        reader.file(os.path.join(base, claim, request, name), f"{kind}/{claim}/{request}/{name}",
                                    claim, kind == "resourceclaimtemplates", request)
    return out
