"""``devplace.Client``: the Python peer of libdevplace's ``devplace::Client`` (client/client.cc)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import ssl
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import grpc
from google.protobuf import wrappers_pb2

from . import _environment
from ._target import check_local_listener, check_unix_socket, default_target
from .errors import (AbortedError, DeadlineExceededError, Error, FailedPreconditionError, InvalidArgumentError,
                     NotFoundError, UnavailableError, error_for)
from .v1 import devplace_pb2, devplace_pb2_grpc

__all__ = ["Client", "TlsOptions", "Resolution", "Watch", "make_request", "resolve_device"]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_UINT64_MAX = 2**64 - 1

#: The keyword overrides ``resolve()`` / ``make_request()`` accept: request fields (``job_device_nodes``
#: fills ``job_devices``).
OVERRIDES = ("env", "local_rank", "world_size", "runtime_backends", "job_device_nodes", "transformers_version",
             "accelerate_version", "job_environment", "device_allocation")


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


# ---- why a daemon did not answer: the peer of libdevplace's client/connect_diagnosis.cc ----
# After gRPC reports UNAVAILABLE (its text says "Socket closed" for most TLS mistakes), the target
# is dialled once more with the standard library's socket and ssl to name the cause and the
# setting that fixes it: devplaced not running (no socket, a stale socket, connection refused),
# plaintext sent to a TLS listener, TLS sent to a plaintext one, a daemon certificate from an
# unknown CA or without the dialled name, a required client certificate missing, or a client
# certificate the daemon refused.

_START_HINT = ("devplaced is probably not running: start it with `sudo systemctl start devplaced` (the package's "
              "unit) or run `devplaced`")
_CERT_FIX = ("pass --tls_cert and --tls_key (DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY; TlsOptions cert/key): a client "
             "certificate issued by the CA in the daemon's --tls_client_ca")
# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server answers with its SETTINGS.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _unix(path: str) -> str:
    try:
        os.lstat(path)
    except FileNotFoundError:
        return f"no socket at {path}: {_START_HINT}"
    except OSError:
        return ""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except ConnectionRefusedError:
        return f"{path} is a socket nobody accepts on (left behind by a devplaced that stopped): {_START_HINT}"
    except OSError:
        return ""
    finally:
        s.close()
    return ""


def _split(target: str) -> Optional[Tuple[str, str]]:
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(prefix):
            target = target[len(prefix):]
            break
    host, sep, port = target.rpartition(":")
    if not sep or not port or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _dial(host: str, port: str, timeout: float) -> Tuple[Optional[socket.socket], str]:
    where = f"{host}:{port}"
    try:
        s = socket.create_connection((host, int(port)), timeout=timeout)
    except ConnectionRefusedError:
        return None, (f"nothing listens on {where} (connection refused): {_START_HINT}, or it listens elsewhere "
                      "(its --listen)")
    except socket.timeout:
        return None, f"{where} accepted no connection within {int(timeout * 1000)} ms (a firewall, or the wrong host?)"
    except (OSError, ValueError):
        return None, ""
    return s, ""


def _context(tls: Dict[str, str], verify: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if verify:
        if tls.get("ca"):
            ctx.load_verify_locations(tls["ca"])
        else:
            ctx.load_default_certs()
    if tls.get("cert"):
        ctx.load_cert_chain(tls["cert"], tls["key"])
    ctx.set_alpn_protocols(["h2"])  # gRPC servers insist on ALPN h2
    return ctx


def _names(cert: dict) -> str:
    names = [f"{'IP' if kind == 'IP Address' else kind}:{value.strip()}"
             for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    return ", ".join(names) or "no subject alternative names"


def _tls(host: str, port: str, tls: Optional[Dict[str, str]], timeout: float) -> str:
    where = f"{host}:{port}"
    settings = tls or {}
    sni = settings.get("server_name") or host
    # 1. Does the port speak TLS, and does the daemon take this client (its certificate, or none)?
    # A gRPC daemon that accepts answers HTTP/2's preface with its SETTINGS; one that refuses the
    # client's certificate (TLS 1.3 settles it after the handshake) closes the connection.
    s, why = _dial(host, port, timeout)
    if s is None:
        return why
    handshake = accepted = False
    alert = ""
    try:
        with _context(settings, verify=False).wrap_socket(s, server_hostname=sni) as conn:
            handshake = True
            try:
                conn.sendall(_PREFACE)
                accepted = bool(conn.recv(64))
            except ssl.SSLError as e:
                alert = str(e.reason or "")
            except OSError:
                pass
    except ssl.SSLError as e:
        alert = str(e.reason or "")
    except OSError:
        pass
    finally:
        s.close()
    if tls is None:
        if not handshake and "ALERT" not in alert:
            return ""  # not a TLS listener either
        return (f"{where} is a TLS listener (devplaced --listen=tls:...) and this client spoke plaintext: pass "
                "--tls_ca (DEVPLACE_TLS_CA; TlsOptions ca), the CA that signed the daemon's certificate" +
                ("" if accepted else f"; the daemon also wants a client certificate: {_CERT_FIX}"))
    if not handshake and "ALERT" not in alert:
        return (f"{where} did not answer the TLS handshake: it is probably a plaintext listener; dial the daemon's "
                "tls: listener, or leave out --tls_ca/--tls_cert (and DEVPLACE_TLS_*) for this one")
    # 2. Is the daemon's certificate from the CA given, and does it carry the name dialled?
    s, why = _dial(host, port, timeout)
    if s is None:
        return why
    try:
        with _context(settings, verify=True).wrap_socket(s, server_hostname=sni) as conn:
            cert = conn.getpeercert() or {}
        if not _matches(cert, sni):
            return (f"the daemon's certificate names {_names(cert)}, not {sni}: dial one of those names, or pass "
                    "--tls_server_name=NAME (DEVPLACE_TLS_SERVER_NAME; TlsOptions server_name) with a name it carries")
    except ssl.SSLCertVerificationError as e:
        given = (f" with --tls_ca={settings['ca']}; pass the CA that signed it (DEVPLACE_TLS_CA)" if settings.get("ca")
                 else "; pass --tls_ca (DEVPLACE_TLS_CA), the CA that signed it")
        return f"the daemon's certificate is not trusted: {e.verify_message}{given}"
    except (ssl.SSLError, OSError):
        pass
    finally:
        s.close()
    # 3. The client certificate, as the first connection saw it.
    if accepted:
        return ""
    if not settings.get("cert"):
        return f"the daemon at {where} requires a client certificate (mutual TLS) and none was given: {_CERT_FIX}"
    told = f", TLS alert: {alert.lower()}" if alert else ""
    return (f"the daemon at {where} refused the client certificate --tls_cert={settings['cert']}{told}; use one "
            "issued by the CA in the daemon's --tls_client_ca")


def _matches(cert: dict, name: str) -> bool:
    """Whether `cert` (getpeercert()) carries `name`: an IP address SAN, or a DNS SAN (one leading *.)."""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        ip = None
    for kind, value in cert.get("subjectAltName", ()):
        if ip is not None and kind == "IP Address":
            try:
                if ipaddress.ip_address(value.strip()) == ip:
                    return True
            except ValueError:
                continue
        elif ip is None and kind == "DNS":
            pattern, host = value.lower(), name.lower()
            if pattern == host or (pattern.startswith("*.") and host.partition(".")[2] == pattern[2:]):
                return True
    return False


def _diagnose_unreachable(target: str, tls: Optional[Dict[str, str]], timeout: Optional[float]) -> str:
    """One sentence naming why ``target`` did not answer and what fixes it, or "" when no cause is found.

    ``tls`` is None for a plaintext channel, else its settings after the DEVPLACE_TLS_* fill (keys
    ca, cert, key, server_name)."""
    wait = min(timeout, 3.0) if timeout else 3.0
    if target.startswith("unix:"):
        path = target[len("unix:"):]
        return _unix(path[2:] if path.startswith("//") else path)
    if target.startswith("unix-abstract:"):
        return ""
    split = _split(target)
    if split is None:
        return ""
    return _tls(split[0], split[1], tls, wait)


def _channel(target: str, tls: Optional[TlsOptions]) -> Tuple[grpc.Channel, Optional[Dict[str, str]]]:
    """The channel to ``target``: plaintext, or TLS as TlsOptions says (environment included); and
    the TLS settings used (None for plaintext), for :func:`_diagnose_unreachable`."""
    if target.startswith("unix:") or target.startswith("unix-abstract:"):
        return grpc.insecure_channel(target), None
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
        return grpc.insecure_channel(target), None
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
    options: List[Tuple[str, Any]] = []
    if values["server_name"]:
        options.append(("grpc.ssl_target_name_override", values["server_name"]))
    return grpc.secure_channel(target, credentials, options=options), values


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
    request = _environment.from_environment() if from_environment else devplace_pb2.ResolveDeviceRequest()
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
        job = _environment.job_environment()
        if any(_environment.normalize_name(p.name) == "torch" for p in job.packages):
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
        inventory_revision: revision of the inventory the answer was computed from.
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
                   runtime_backends=list(response.runtime_backends), response=response)

    def __str__(self) -> str:
        return self.device


class Watch(Iterator[devplace_pb2.Inventory]):
    """An iterator over inventories (``devplace_pb2.Inventory``) from ``Client.watch()``.

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
            if self._cancelled.is_set():
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
            health); None or <= 0: none.
        tls: TLS settings for a ``tls:`` listener (:class:`TlsOptions`; DEVPLACE_TLS_* fill what
            is not given).
        trust_any_socket: skip the socket-trust check for an explicit ``unix:`` address.
        watch_timeout: deadline of a whole ``watch()`` in seconds; None: none.

    Does not contact the daemon: the channel connects on the first call, and calls fail fast with
    :class:`UnavailableError` when the daemon is not there (the message names the target, where it
    came from, and the default sockets passed over). Safe to use from several threads.

    Raises:
        InvalidArgumentError: a ``unix:`` address without a path; TLS files that cannot be used
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
        self._channel, self._tls = _channel(target, tls)
        self._stub = devplace_pb2_grpc.DevicePlacementStub(self._channel)
        self._health = self._channel.unary_unary(
            # grpc.health.v1 (Debian has no grpcio-health-checking): HealthCheckRequest{string service = 1}
            # and HealthCheckResponse{ServingStatus status = 1} have the wire form of StringValue / Int32Value.
            "/grpc.health.v1.Health/Check",
            request_serializer=wrappers_pb2.StringValue.SerializeToString,
            response_deserializer=wrappers_pb2.Int32Value.FromString)
        self._timeout = timeout if timeout is not None and timeout > 0 else None
        self._watch_timeout = watch_timeout if watch_timeout is not None and watch_timeout > 0 else None
        self._note = f" [devplace target {target} ({origin})"
        if notes:
            self._note += "; passed over: " + "; ".join(notes)
        self._note += "; set DEVPLACE_ADDRESS or --address to choose the daemon]"

    # ---- lifecycle ----
    def close(self) -> None:
        """Closes the channel; running watches end."""
        self._channel.close()

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
            model_size_bytes: model size in bytes, for "balanced" budgets.
            from_environment: send this process's placement variables, accelerator /dev nodes and
                DRA devices (as libdevplace's ``FromEnvironment()``); False sends only the arguments.
            fallback: what to answer when the daemon gives no answer (UnavailableError: not running,
                unreachable, no inventory yet; DeadlineExceededError): "none" raises (the default),
                "cpu" returns a ``cpu`` Resolution whose first warning starts "devplace fallback:"
                and quotes the error, and issues it as a ``RuntimeWarning`` too. None: env
                DEVPLACE_FALLBACK when ``from_environment``, else "none". Other errors always raise.
            **overrides: request fields that win over the environment: ``env={...}`` (a None
                value removes a variable), ``local_rank=1``, ``world_size=2``,
                ``runtime_backends=["cuda"]``, ``job_device_nodes=["/dev/nvidia1"]`` ([] = the job
                sees no accelerator, None = unknown), ``transformers_version="4.46.3"``,
                ``accelerate_version="0.34.2"`` (the releases whose rules to apply, docs/SEMANTICS.md
                section 10: Transformers 4.30.0 up to 5.x, Accelerate 0.25.0 up to 1.15.x; None or
                "" = the newest devplace knows), ``job_environment=devplace.job_environment([...])``,
                ``device_allocation=devplace.device_allocation(DIR)`` (the job's Kubernetes DRA
                devices; None sends none).

        Returns:
            The :class:`Resolution`; ``str()`` of it is the device string.

        Raises:
            InvalidArgumentError: a malformed request or environment, or a version outside the
                supported range (the daemon's message names the field and the range).
            FailedPreconditionError: this host or the job's visibility cannot satisfy the request.
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
            return _cpu_fallback(e)

    def resolve_request(self, request: devplace_pb2.ResolveDeviceRequest) -> Resolution:
        """ResolveDevice with a request built by the caller (e.g. :func:`devplace.for_job` for a scheduler)."""
        return Resolution.from_response(self._unary(self._stub.ResolveDevice, request))

    def inventory(self) -> devplace_pb2.Inventory:
        """The daemon's current inventory snapshot (``devplace_pb2.Inventory``). UnavailableError before
        the first probe."""
        return self._unary(self._stub.GetInventory, devplace_pb2.GetInventoryRequest())

    def backends(self) -> List[devplace_pb2.BackendInfo]:
        """The hardware table: the 11 rows as ``devplace_pb2.BackendInfo``, in table order."""
        return list(self._unary(self._stub.ListBackends, devplace_pb2.ListBackendsRequest()).backends)

    def refresh(self) -> devplace_pb2.Inventory:
        """Re-probes the host now (RefreshInventory); the resulting inventory.

        Raises:
            PermissionDeniedError: not root / the daemon's user / its socket group over the unix
                socket, nor an mTLS client.
            ResourceExhaustedError: within ``--refresh_min_interval`` of the last one (the message
                gives the wait in ms).
        """
        return self._unary(self._stub.RefreshInventory, devplace_pb2.RefreshInventoryRequest())

    def watch(self, known_revision: int = 0) -> Watch:
        """Streams inventories: the current snapshot first, then every new revision (WatchInventory).

        ``known_revision`` is forwarded as is, with no ``known_epoch``: the current snapshot always
        comes first (revisions restart with the daemon). Returns a :class:`Watch` iterator, ended by
        its ``cancel()`` from any thread or by leaving its ``with`` block.
        """
        request = devplace_pb2.WatchInventoryRequest(known_revision=known_revision)
        return Watch(self, self._stub.WatchInventory(request, timeout=self._watch_timeout))

    def health(self, service: str = "") -> bool:
        """grpc.health.v1 Check: True when the daemon reports SERVING for ``service`` ("" = the whole
        server), False for any other status. Errors as for any call."""
        response = self._unary(self._health, wrappers_pb2.StringValue(value=service))
        return response.value == 1  # HealthCheckResponse.SERVING

    # ---- internals ----
    def _unary(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self._timeout)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _ready(self) -> bool:
        """Whether the channel is connected (so an UNAVAILABLE came from the daemon itself)."""
        seen = threading.Event()
        state: List[grpc.ChannelConnectivity] = []

        def on_state(s: grpc.ChannelConnectivity) -> None:
            if not seen.is_set():
                state.append(s)
                seen.set()

        self._channel.subscribe(on_state, try_to_connect=False)
        try:
            seen.wait(1.0)
        finally:
            self._channel.unsubscribe(on_state)
        return bool(state) and state[0] == grpc.ChannelConnectivity.READY

    def _error(self, e: grpc.RpcError) -> Error:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        message = (e.details() if hasattr(e, "details") else None) or ""
        if code == grpc.StatusCode.UNAVAILABLE and not self._ready():
            cause = _diagnose_unreachable(self.target, self._tls, self._timeout)
            if cause:
                message = f"{cause} (gRPC: {message})"
            message += self._note
        return error_for(code, message)


def _cpu_fallback(error: Error) -> Resolution:
    """The answer of ``fallback="cpu"`` (libdevplace's Client::Resolve gives the same)."""
    warning = ("devplace fallback: answered cpu without the daemon (fallback=cpu); accelerators, if any, "
               f"are unused: {error}")
    warnings.warn(warning, RuntimeWarning, stacklevel=3)
    response = devplace_pb2.ResolveDeviceResponse(
        device="cpu", backend=devplace_pb2.ROW_CPU, package="torch", devices=["cpu"],
        explanation=["FALLBACK no answer from the daemon; fallback=cpu answers cpu without it"], warnings=[warning])
    return Resolution.from_response(response)


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
    ``fallback="cpu"`` (or env DEVPLACE_FALLBACK=cpu) answers ``"cpu"`` with a ``RuntimeWarning``
    when the daemon gives no answer, so a pod's first line does not stop the pod.
    """
    with Client(address, timeout, tls) as client:
        return client.resolve(workload, device_map, **kwargs).device
