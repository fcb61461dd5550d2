"""Kubernetes DRA Device Metadata (rule P-DRA): the Python peer of libdevplace's
client/device_metadata.cc (ReadDeviceAllocation, ``devplace resolve --dra_metadata_dir``). It owns
:func:`device_allocation`, the devices Kubernetes Dynamic Resource Allocation allocated to this
container, read exactly as the C++ reader reads them. Inside a container the kubelet puts one file
per claim, request and driver under DRA_METADATA_DIR: resourceclaims/<claim>/<request>/<driver>-metadata.json
for a ResourceClaim the pod names, resourceclaimtemplates/<pod claim name>/... for one made from a
template (Kubernetes documentation, "Access DRA Device Metadata"). Each file is a stream of
DeviceMetadata objects, one per API version, newest first; the first of apiVersion
metadata.resource.k8s.io/v1alpha1 is read. tests/python/test_dra.py checks this against the C++
reader, by running it.
"""

from __future__ import annotations

import json
import os
from typing import Any, List, Optional

from .errors import InvalidArgumentError, NotFoundError
from .v1 import devplace_pb2

__all__ = ["DRA_METADATA_DIR", "device_allocation"]


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
