"""Kubernetes DRA Device Metadata (rule P-DRA): the Python peer of libdevplace's
client/device_metadata.cc (ReadDeviceAllocation, ``devplace resolve --dra_metadata_dir``). It owns
:func:`device_allocation`, the devices Kubernetes Dynamic Resource Allocation allocated to this
container, read exactly as the C++ reader reads them. Inside a container the kubelet puts one file
per claim, request and driver under DRA_METADATA_DIR: resourceclaims/<claim>/<request>/<driver>-metadata.json
for a ResourceClaim the pod names, resourceclaimtemplates/<pod claim name>/... for one made from a
template (Kubernetes documentation, "Access DRA Device Metadata"). Each file is a stream of
DeviceMetadata objects, one per API version, newest first; the first of apiVersion
metadata.resource.k8s.io/v1alpha1 is read, and what follows it is not. Every read keeps the bounds
of _read.py (libdevplace's client/common/bounded_read.h), and nothing a file holds raises:
tests/client/reader_table.txt holds this reader and the C++ one to the same results, hostile files
included.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from . import _read
from .errors import InvalidArgumentError, NotFoundError
from .v1 import devplace_pb2

__all__ = ["DRA_METADATA_DIR", "device_allocation"]


#: Where the kubelet puts DRA Device Metadata inside a container (libdevplace's kDraMetadataDir).
DRA_METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"

_API_VERSION = "metadata.resource.k8s.io/v1alpha1"
_FILE_SUFFIX = b"-metadata.json"
# The bounds of DeviceAllocation (devplace.proto); the daemon refuses a request beyond them.
_MAX_DEVICES = 1024
_MAX_ATTRIBUTES = 64
_MAX_STRING_BYTES = 256
_MAX_SOURCE_BYTES = 512
# Of a file: the JSON values looked at, and how deep one may nest.
_MAX_VALUES = 64
_MAX_DEPTH = 32
_JSON_WHITESPACE = " \t\n\r"
# The bounds of one call (internal::DraLimits()): time, a file, all files, a directory's entries.
_LIMITS = (5.0, _read.MIB, 16 * _read.MIB, 1024)

# A string (to its closing quote, or the end of the text) or a bracket: DepthWithin's scan.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.S)
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotJson(ValueError):
    pass


def _depth_within(text: str, i: int) -> bool:
    """Whether the value at text[i] nests at most _MAX_DEPTH deep (C++ DepthWithin, token by token)."""
    depth = 0
    for m in _TOKEN.finditer(text, i):
        c = m.group()[0]
        if c == '"':
            continue
        if c in "{[":
            depth += 1
            if depth > _MAX_DEPTH:
                return False
        else:
            depth -= 1
            if depth == 0:
                return True
    return True


def _number(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotJson("a number out of a double's range")
    return value


def _constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotJson(f"{key!r} given twice")
        out[key] = value
    return out


# RFC 8259 strictly, as the C++ reader's StrictJson (no NaN or Infinity, numbers that fit a double,
# no name twice); strings are checked for surrogates after parsing.
_DECODER = json.JSONDecoder(parse_float=_number, parse_int=_number, parse_constant=_constant,
                            object_pairs_hook=_object)


def _valid_text(value: Any) -> bool:
    """Whether every string of ``value`` is valid text (no lone surrogate: an unpaired \\u escape, or
    an invalid byte read through surrogateescape)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return False
        elif isinstance(v, dict):
            for key, item in v.items():
                if _SURROGATE.search(key):
                    return False
                stack.append(item)
        elif isinstance(v, list):
            stack.extend(v)
    return True


def _string(obj: Any, name: str) -> str:
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else ""


# The attribute names the daemon identifies an allocated device by (rule P-DRA), plain or
# qualified by the device's driver ("gpu.nvidia.com/uuid"): kept whatever the number of attributes
# (C++ IdentifyingAttribute).
_IDENTIFYING = ("uuid", "pciBusID", "pciAddr", "pciAddress", "minor", "index")


def _identifying(key: str, driver: str) -> bool:
    if key == "resource.kubernetes.io/pciBusID":
        return True
    if driver and key.startswith(driver + "/"):
        key = key[len(driver) + 1:]
    return key in _IDENTIFYING


def _attribute_text(value: Any) -> Optional[str]:
    """A DeviceAttribute ({"int": 1} / {"bool": true} / {"string": ...} / {"version": ...}) as text."""
    if not isinstance(value, dict):
        return None
    number = value.get("int")
    if isinstance(number, float):
        if number != math.floor(number) or abs(number) > 9.0e15:
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
    return len(text.encode("utf-8"))


class _Reader:
    def __init__(self, out: devplace_pb2.DeviceAllocation, limits: Tuple[float, int, int, int]) -> None:
        self.out = out
        self.file_bytes, self.max_entries = limits[1], limits[3]
        self.set = _read.ReadSet(limits[0], limits[2], out.problems)
        self.problem = self.set.problem
        self.truncated = False

    def list(self, directory: bytes, rel: str, keep: Any) -> List[bytes]:
        try:
            names, more = _read.list_names(directory, self.max_entries, self.set.budget, keep)
        except _read.Unreadable as e:
            if e.kind != "missing":
                self.set.failed(rel, e)
            return []
        if more:
            self.problem(f"{rel}: more than {self.max_entries} entries; only the first {self.max_entries} by name read")
        return names

    def file(self, path: bytes, rel: str, claim: str, from_template: bool, request_dir: str) -> None:
        code, st = _read.stat_path(path)
        if code:
            return self.problem(f"{rel}: {_read.cannot_read(code)}")
        if not _read.is_regular(st):
            return self.problem(f"{rel}: not a regular file ({_read.kind_text(st.st_mode)}); not read")
        try:
            data = _read.read_regular_file(path, self.file_bytes, self.set.budget)
        except _read.Unreadable as e:
            return self.set.failed(rel, e)
        self.objects(data.decode("utf-8", "surrogateescape"), rel, claim, from_template, request_dir)

    def objects(self, text: str, rel: str, claim: str, from_template: bool, request_dir: str) -> None:
        seen = []
        i = 0
        count = 0
        while True:
            while i < len(text) and text[i] in _JSON_WHITESPACE:
                i += 1
            if i >= len(text):
                break
            if count == _MAX_VALUES:
                return self.problem(f"{rel}: no DeviceMetadata of apiVersion {_API_VERSION} in its first {_MAX_VALUES} "
                                    "objects")
            count += 1
            if not _depth_within(text, i):
                return self.problem(f"{rel}: nested deeper than {_MAX_DEPTH} levels; not read")
            try:
                obj, i = _DECODER.raw_decode(text, i)
                valid = isinstance(obj, dict) and _valid_text(obj)
            except (ValueError, RecursionError, OverflowError, MemoryError):
                valid = False
            if not valid:
                return self.problem(f"{rel}: not a JSON stream of DeviceMetadata objects")
            api = _string(obj, "apiVersion")
            if api != _API_VERSION or _string(obj, "kind") != "DeviceMetadata":
                seen.append(f"{_string(obj, 'kind')} {api}")
                continue  # another API version: the same data, in a version this client does not know
            return self.requests(obj, rel, claim, from_template, request_dir)
        if not seen:
            return self.problem(f"{rel}: empty (its driver writes it later, or not at all)")
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
        fields = (claim, request, _string(d, "driver"), _string(d, "pool"), _string(d, "name"))
        for text in fields:
            if _size(text) > _MAX_STRING_BYTES:
                self.problem(f"{rel}: a device with a name over {_MAX_STRING_BYTES} bytes; not sent")
                return
        if not fields[2] or not fields[3] or not fields[4]:
            self.problem(f"{rel}: a device without a driver, pool or name; not sent")
            return
        device = devplace_pb2.AllocatedDevice(claim=claim, from_template=from_template, request=request,
                                              driver=fields[2], pool=fields[3], name=fields[4])
        attributes = d.get("attributes")
        if isinstance(attributes, dict):
            # The attributes that identify the hardware first (the daemon matches on them), then the
            # others, each in name order (byte order, as the C++ reader sorts): the first
            # _MAX_ATTRIBUTES that fit. Any left out is a problem line.
            driver = fields[2]
            cut = 0
            for key in sorted(attributes, key=lambda k: (not _identifying(k, driver), k.encode("utf-8"))):
                text = _attribute_text(attributes[key])
                if _size(key) > _MAX_STRING_BYTES or text is None or _size(text) > _MAX_STRING_BYTES:
                    continue
                if len(device.attributes) >= _MAX_ATTRIBUTES:
                    cut += 1
                    continue
                device.attributes[key] = text
            if cut:
                self.problem(f"{rel}: device {fields[4]} has more than {_MAX_ATTRIBUTES} attributes; {cut} not sent "
                             "(uuid, the PCI address, minor and index are kept)")
        self.out.devices.append(device)


def _is_metadata_file(name: bytes) -> bool:
    return name.endswith(_FILE_SUFFIX)


def _read_allocation(directory: bytes, limits: Tuple[float, int, int, int]) -> devplace_pb2.DeviceAllocation:
    out = devplace_pb2.DeviceAllocation(source=_read.cut_utf8(_read.escape_bytes(directory), _MAX_SOURCE_BYTES))
    reader = _Reader(out, limits)
    try:
        for kind in (b"resourceclaims", b"resourceclaimtemplates"):
            base = os.path.join(directory, kind)
            for claim in reader.list(base, kind.decode(), lambda n: True):
                claim_path = os.path.join(base, claim)
                claim_rel = f"{kind.decode()}/{_read.escape_bytes(claim)}"
                if not _read.is_dir(_read.stat_path(claim_path)[1]):
                    continue  # a stray file, or gone
                for request in reader.list(claim_path, claim_rel, lambda n: True):
                    request_path = os.path.join(claim_path, request)
                    request_rel = f"{claim_rel}/{_read.escape_bytes(request)}"
                    if not _read.is_dir(_read.stat_path(request_path)[1]):
                        continue
                    for name in reader.list(request_path, request_rel, _is_metadata_file):
                        reader.file(os.path.join(request_path, name), f"{request_rel}/{_read.escape_bytes(name)}",
                                    _read.escape_bytes(claim), kind == b"resourceclaimtemplates",
                                    _read.escape_bytes(request))
    except _read.Stop:
        pass
    return out


def device_allocation(path: Optional[str] = None) -> Optional[devplace_pb2.DeviceAllocation]:
    """The devices Kubernetes DRA allocated to this container, as ``ReadDeviceAllocation()``.

    ``path`` is the metadata directory (default :data:`DRA_METADATA_DIR`). Every
    ``<claim>/<request>/<driver>-metadata.json`` under its ``resourceclaims/`` and
    ``resourceclaimtemplates/``, in path order, gives one ``AllocatedDevice`` per
    ``requests[].devices[]`` entry, with its scalar attributes as text (at most 64: the ones that identify the
    hardware, ``uuid``, the PCI address, ``minor`` and ``index``, plain or driver-qualified, first,
    then the others by name, with a problem line when some are left out; each key and value at most
    256 bytes; at most 1024 devices). Reading is bounded: a metadata file must
    be a regular file of at most 1 MiB holding strict JSON (RFC 8259, at most 32 levels deep); the
    first 1024 entries of a directory by name, 16 MiB in all, within 5 s. Files that cannot be used
    (not a regular file, unreadable, too large, not such JSON, no object of a known apiVersion,
    empty) are listed in ``problems``, which the daemon warns about; nothing a file holds raises or
    makes a request the daemon refuses.

    Returns:
        None when ``path`` is None and the default directory cannot be read (not a DRA container).

    Raises:
        NotFoundError: ``path`` was given and does not exist.
        InvalidArgumentError: the path is not a directory, or cannot be read.
    """
    directory = DRA_METADATA_DIR if path is None else path
    raw = os.fsencode(directory)
    shown = _read.escape_bytes(raw)
    code, st = _read.stat_path(raw)
    if code or not _read.is_dir(st):
        if path is None:
            return None
        if code in (errno.ENOENT, errno.ENOTDIR):
            raise NotFoundError(f"{shown}: no such directory (no DRA device metadata in this container)")
        if code:
            raise InvalidArgumentError(f"{shown}: {_read.cannot_read(code)}")
        raise InvalidArgumentError(f"{shown}: not a directory; want the DRA device metadata directory, "
                                   f"e.g. {DRA_METADATA_DIR}")
    try:
        return _read_allocation(raw, _LIMITS)
    except Exception as e:  # never out of a reader: what it could not read is a problem
        out = devplace_pb2.DeviceAllocation(source=_read.cut_utf8(shown, _MAX_SOURCE_BYTES))
        out.problems.append(f"the reader failed: {type(e).__name__}")
        return out
