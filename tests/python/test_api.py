"""The public API of `import devplace`, spelled out: every name of devplace.__all__, the signature of
each public function, of each public class's constructor and of its public methods, what the
constants are, and the error classes with their gRPC codes. A name removed or renamed, a parameter
added, removed, renamed or reordered, or one with another kind, default or annotation fails here,
whichever module of the package holds it. A deliberate change of the API updates this file (and
client/README.md "Python")."""

import collections.abc
import dataclasses
import inspect
import re
import unittest

import grpc

import devplace

NAMES = [
    "__version__", "Client", "Lease", "Resolution", "TlsOptions", "Watch", "make_request", "resolve_device",
    "PLACEMENT_ENVIRONMENT_VARIABLES", "JOB_PYTHON_PACKAGES", "for_job", "from_environment", "job_device_nodes",
    "job_environment", "MAX_CAPTURED_NEAR_MISSES", "possible_placement_typo", "DRA_METADATA_DIR", "device_allocation",
    "check_local_listener", "check_unix_socket", "default_target", "Pick", "job_holder", "make_pick_request", "pick",
    "Error", "ResolveError", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError",
    "OutOfRangeError", "PermissionDeniedError", "ResourceExhaustedError", "UnauthenticatedError",
    "UnavailableError", "UnimplementedError", "UnknownError", "DevplaceWarning", "FallbackWarning",
]

FUNCTIONS = {
    "make_request": "(workload: Union[str, int], device_map: Union[str, int, None] = None, *, "
                    "convention: Union[str, int, None] = None, use_cpu: bool = False, strict: bool = False, "
                    "model_size_bytes: Optional[int] = None, from_environment: bool = True, **overrides: Any) "
                    "-> devplace_pb2.ResolveDeviceRequest",
    "resolve_device": "(workload: Union[str, int], device_map: Union[str, int, None] = None, *, "
                      "address: Optional[str] = None, timeout: Optional[float] = 5.0, "
                      "tls: Optional[TlsOptions] = None, **kwargs: Any) -> str",
    "for_job": "(job_env: Mapping[str, str], job_device_nodes: Optional[Iterable[str]] = None) "
               "-> devplace_pb2.ResolveDeviceRequest",
    "from_environment": "(dev_dir: str = '/dev', environ: Optional[Mapping[str, str]] = None) "
                        "-> devplace_pb2.ResolveDeviceRequest",
    "job_device_nodes": "(dev_dir: str = '/dev') -> List[str]",
    "job_environment": "(path: Union[str, List[str], None] = None) -> devplace_pb2.JobEnvironment",
    "possible_placement_typo": "(name: str) -> bool",
    "device_allocation": "(path: Optional[str] = None) -> Optional[devplace_pb2.DeviceAllocation]",
    "check_local_listener": "(address: str) -> None",
    "check_unix_socket": "(path: str) -> None",
    "default_target": "(notes: Optional[List[str]] = None) -> str",
    "make_pick_request": "(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False, "
                         "row: Union[str, int, None] = None, holder: Union[str, int, None] = None, "
                         "ttl: Optional[float] = None, wait: Optional[float] = None, "
                         "job: Optional[devplace_pb2.ResolveDeviceRequest] = None) -> devplace_pb2.PickDevicesRequest",
    "pick": "(count: int = 1, *, min_free: Union[int, str, None] = None, allow_shared: bool = False, "
            "row: Union[str, int, None] = None, holder: Union[str, int, None] = None, ttl: Optional[float] = None, "
            "wait: Optional[float] = None, job: Optional[devplace_pb2.ResolveDeviceRequest] = None, "
            "address: Optional[str] = None, timeout: Optional[float] = 5.0, tls: Optional[TlsOptions] = None) -> Pick",
    "job_holder": "() -> Tuple[int, Optional[str]]",
}

# "(constructor)": the class's call signature; "property" / "classmethod (...)": what the name is.
CLASSES = {
    "Client": {
        "(constructor)": "(address: Optional[str] = None, timeout: Optional[float] = 5.0, "
                         "tls: Optional[TlsOptions] = None, *, trust_any_socket: bool = False, "
                         "watch_timeout: Optional[float] = None) -> None",
        "__enter__": "(self) -> Client",
        "__exit__": "(self, *exc: Any) -> None",
        "close": "(self) -> None",
        "resolve": "(self, workload: Union[str, int], device_map: Union[str, int, None] = None, *, "
                   "convention: Union[str, int, None] = None, use_cpu: bool = False, strict: bool = False, "
                   "model_size_bytes: Optional[int] = None, from_environment: bool = True, "
                   "fallback: Optional[str] = None, **overrides: Any) -> Resolution",
        "resolve_request": "(self, request: devplace_pb2.ResolveDeviceRequest) -> Resolution",
        "inventory": "(self) -> devplace_pb2.Inventory",
        "backends": "(self) -> List[devplace_pb2.BackendInfo]",
        "refresh": "(self) -> devplace_pb2.Inventory",
        "watch": "(self, known_revision: int = 0) -> Watch",
        "health": "(self, service: str = '') -> bool",
        "pick_request": "(self, request: devplace_pb2.PickDevicesRequest) -> Pick",
        "release_lease": "(self, lease_id: str) -> devplace_pb2.LeaseInfo",
        "keep_lease_alive": "(self, lease_id: str, ttl: float = 300.0) -> devplace_pb2.LeaseInfo",
    },
    "Lease": {
        "(constructor)": "(lease_id: str, address: Optional[str] = None, timeout: Optional[float] = 5.0, "
                         "tls: Optional[TlsOptions] = None) -> None",
        "renew": "(self, ttl: float = 300.0) -> devplace_pb2.LeaseInfo",
        "release": "(self) -> devplace_pb2.LeaseInfo",
    },
    "Pick": {
        "(constructor)": "(device: str, devices: List[str], env: Dict[str, str], unset: List[str], "
                         "placed: List[devplace_pb2.PlacedDevice], lease_id: str, lease: devplace_pb2.LeaseInfo, "
                         "explanation: List[str], warnings: List[str], "
                         "response: devplace_pb2.PickDevicesResponse) -> None",
        "from_response": "classmethod (response: devplace_pb2.PickDevicesResponse) -> Pick",
        "apply": "(self) -> None",
        "__str__": "(self) -> str",
    },
    "Resolution": {
        "(constructor)": "(device: str, devices: List[str], max_memory: Dict[Union[int, str], int], "
                         "warnings: List[str], explanation: List[str], placed: List[devplace_pb2.PlacedDevice], "
                         "backend: str, package: str, inventory_revision: int, transformers_version: str, "
                         "accelerate_version: str, versions_from: Dict[str, str], runtime_backends: List[str], "
                         "response: devplace_pb2.ResolveDeviceResponse, job_versions: Dict[str, str] = <factory>, "
                         "newer_than_rules: List[str] = <factory>, inventory_epoch: int = 0) -> None",
        "from_response": "classmethod (response: devplace_pb2.ResolveDeviceResponse) -> Resolution",
        "__str__": "(self) -> str",
    },
    "TlsOptions": {
        "(constructor)": "(ca: Optional[str] = None, cert: Optional[str] = None, key: Optional[str] = None, "
                         "server_name: Optional[str] = None) -> None",
    },
    "Watch": {
        "(constructor)": "(client: Client, call: Any) -> None",
        "__iter__": "(self) -> Watch",
        "__next__": "(self) -> devplace_pb2.Inventory",
        "cancel": "(self) -> None",
        "cancelled": "property",
        "__enter__": "(self) -> Watch",
        "__exit__": "(self, *exc: Any) -> None",
    },
}

ERRORS = {
    "CancelledError": "CANCELLED", "UnknownError": "UNKNOWN", "InvalidArgumentError": "INVALID_ARGUMENT",
    "DeadlineExceededError": "DEADLINE_EXCEEDED", "NotFoundError": "NOT_FOUND", "AlreadyExistsError": "ALREADY_EXISTS",
    "PermissionDeniedError": "PERMISSION_DENIED", "ResourceExhaustedError": "RESOURCE_EXHAUSTED",
    "FailedPreconditionError": "FAILED_PRECONDITION", "AbortedError": "ABORTED", "OutOfRangeError": "OUT_OF_RANGE",
    "UnimplementedError": "UNIMPLEMENTED", "InternalError": "INTERNAL", "UnavailableError": "UNAVAILABLE",
    "DataLossError": "DATA_LOSS", "UnauthenticatedError": "UNAUTHENTICATED",
}
ERROR_CONSTRUCTOR = "(message: str, code: grpc.StatusCode | None = None) -> None"
# Magic methods a user calls through syntax (with, for, str()); every other public method has no underscore.
DUNDERS = {"__enter__", "__exit__", "__iter__", "__next__", "__str__"}


class _Spelled:
    """An annotation shown as its source text (the package's annotations are strings, PEP 563)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _plain(annotation):
    if annotation is inspect.Parameter.empty:
        return annotation
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return _Spelled(text)


def spell(callable_):
    """The signature as source would write it: `(a: int = 1, *, b: str = 'x') -> None`."""
    sig = inspect.signature(callable_)
    return str(sig.replace(parameters=[p.replace(annotation=_plain(p.annotation)) for p in sig.parameters.values()],
                           return_annotation=_plain(sig.return_annotation)))


def members(cls):
    """The constructor and the public methods and properties a class defines, each spelled."""
    out = {"(constructor)": spell(cls)}
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in DUNDERS:
            continue
        if isinstance(member, property):
            out[name] = "property"
        elif isinstance(member, classmethod):
            out[name] = "classmethod " + spell(getattr(cls, name))
        elif callable(member):
            out[name] = spell(member)
    return out


class PublicApi(unittest.TestCase):
    maxDiff = None

    def test_all_lists_exactly_the_public_names_and_each_imports(self):
        self.assertEqual(sorted(devplace.__all__), sorted(NAMES))
        self.assertEqual(len(devplace.__all__), len(set(devplace.__all__)))
        namespace = {}
        exec("from devplace import *", namespace)  # what `from devplace import *` gives a user
        for name in NAMES:
            self.assertIn(name, namespace)
            self.assertIs(namespace[name], getattr(devplace, name), name)

    def test_function_signatures(self):
        for name, expected in FUNCTIONS.items():
            with self.subTest(name):
                function = getattr(devplace, name)
                self.assertTrue(inspect.isfunction(function), name)
                self.assertEqual(spell(function), expected)

    def test_class_constructors_and_public_methods(self):
        for name, expected in CLASSES.items():
            with self.subTest(name):
                cls = getattr(devplace, name)
                self.assertTrue(inspect.isclass(cls), name)
                self.assertEqual(members(cls), expected)

    def test_option_and_answer_classes_are_frozen_dataclasses(self):
        for cls in (devplace.TlsOptions, devplace.Resolution, devplace.Pick):
            with self.subTest(cls.__name__):
                self.assertTrue(dataclasses.is_dataclass(cls))
                self.assertTrue(cls.__dataclass_params__.frozen)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            devplace.TlsOptions(ca="ca.pem").ca = "other.pem"
        self.assertTrue(issubclass(devplace.Watch, collections.abc.Iterator))

    def test_resolution_gives_every_enum_of_the_answer_as_a_name(self):
        # Python fields speak the user's terms: each enum of ResolveDeviceResponse reaches Resolution
        # as its name ("ROW_SDAA", "default"), never as the number on the wire; a field added to both
        # must do the same.
        from devplace.v1 import devplace_pb2
        response = devplace_pb2.ResolveDeviceResponse()
        enums = [f for f in response.DESCRIPTOR.fields if f.enum_type is not None]
        self.assertTrue(enums)
        for f in enums:  # the last value of each enum, so that no field is left at 0
            last = f.enum_type.values[-1].number
            if f.label == f.LABEL_REPEATED:
                getattr(response, f.name).append(last)
            else:
                setattr(response, f.name, last)
        resolution = devplace.Resolution.from_response(response)
        leaves = []

        def walk(value):
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(k)
                    walk(v)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    walk(v)
            else:
                leaves.append(value)

        for field in dataclasses.fields(resolution):
            if field.name not in ("response", "inventory_revision", "inventory_epoch"):
                walk(getattr(resolution, field.name))
        self.assertEqual([v for v in leaves if isinstance(v, int) and not isinstance(v, bool)], [])
        names = [v.lower() for v in leaves if isinstance(v, str) and v]
        for f in enums:
            value = f.enum_type.values[-1].name.lower()
            self.assertTrue(any(value.endswith(n) for n in names), (f.name, value, names))

    def test_constants(self):
        self.assertRegex(devplace.__version__, r"^[0-9]+\.[0-9]+\.[0-9]+$")
        self.assertEqual(devplace.DRA_METADATA_DIR, "/var/run/kubernetes.io/dra-device-attributes")
        self.assertIsInstance(devplace.MAX_CAPTURED_NEAR_MISSES, int)
        self.assertGreater(devplace.MAX_CAPTURED_NEAR_MISSES, 0)
        for name, member in (("PLACEMENT_ENVIRONMENT_VARIABLES", "CUDA_VISIBLE_DEVICES"),
                             ("PLACEMENT_ENVIRONMENT_VARIABLES", "LOCAL_RANK"), ("JOB_PYTHON_PACKAGES", "torch")):
            value = getattr(devplace, name)
            self.assertIsInstance(value, tuple, name)
            self.assertTrue(all(isinstance(v, str) for v in value), name)
            self.assertIn(member, value)

    def test_errors_one_class_per_code_under_error(self):
        self.assertIs(devplace.ResolveError, devplace.Error)
        self.assertTrue(issubclass(devplace.Error, Exception))
        self.assertEqual(members(devplace.Error), {"(constructor)": ERROR_CONSTRUCTOR, "__str__": "(self) -> str"})
        self.assertEqual(devplace.Error.code, grpc.StatusCode.UNKNOWN)
        named = {n for n in NAMES if re.fullmatch(r"[A-Z][A-Za-z]*Error", n)} - {"Error", "ResolveError"}
        self.assertEqual(named, set(ERRORS))
        for name, code in ERRORS.items():
            with self.subTest(name):
                cls = getattr(devplace, name)
                self.assertIn(devplace.Error, cls.__mro__)
                self.assertEqual(spell(cls), ERROR_CONSTRUCTOR)
                self.assertEqual(cls.code, getattr(grpc.StatusCode, code))
                error = cls("the message")
                self.assertEqual((error.code, error.message, str(error)),
                                 (getattr(grpc.StatusCode, code), "the message", f"{code}: the message"))
        self.assertTrue(issubclass(devplace.InvalidArgumentError, ValueError))

    def test_warning_categories(self):
        # Shown by Python's default filters (a UserWarning); the fallback's is a RuntimeWarning too, as before.
        self.assertEqual(devplace.DevplaceWarning.__bases__, (UserWarning,))
        self.assertEqual(devplace.FallbackWarning.__bases__, (devplace.DevplaceWarning, RuntimeWarning))
        for cls in (devplace.DevplaceWarning, devplace.FallbackWarning):
            with self.subTest(cls.__name__):
                self.assertFalse(issubclass(cls, devplace.Error))  # a warning, never an error a job catches
                self.assertEqual([n for n in vars(cls) if not n.startswith("_")], [])  # a category: no members
                self.assertEqual(str(cls("the text")), "the text")


if __name__ == "__main__":
    unittest.main()
