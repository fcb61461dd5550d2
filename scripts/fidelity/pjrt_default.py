#!/usr/bin/python3
"""torch_xla's default PJRT device (docs/SEMANTICS.md T-XLA-PJRT), executed at torch_xla's release tags.

Accelerate before 0.28 (`is_tpu_available()`) and Transformers before 4.39 (`is_torch_tpu_available()`) test for an
XLA device by calling `xm.xla_device()` in a `try` that catches RuntimeError. On a host without a TPU, what that call
does is decided by torch_xla's Python code at each release: `_maybe_select_default_device`, `device_type`,
`using_pjrt` and `requires_pjrt` (`torch_xla/experimental/pjrt.py` up to 2.0, `torch_xla/runtime.py` from 2.1), whether
`xla_device` is wrapped in `requires_pjrt` there, and whether `torch_xla/__init__.py` selects the default at import.
This script extracts those functions from every release tag from v1.13.0 in a git mirror of pytorch/xla (with
`getenv_as` from the tag's `torch_xla/utils/utils.py` and the tag's `torch_xla/core/xla_env_vars.py`), executes them
unmodified over a grid of the variables they read, on a host with no libtpu and no TPU, and writes
tests/placement/pjrt_default.txt, which ctest XlaPjrt.DefaultDeviceIsTorchXlaExecutedAtItsTags holds devplace's
resolver to (with no mirror).

Stand-ins, only for what the C++ extension does: without PJRT (`using_pjrt()` false) 1.13 and 2.0 go to XRT, which
without an XRT configuration for the host raises RuntimeError "Missing XLA configuration"; from 2.5 a process whose
PJRT_DEVICE is empty gets the runtime's RuntimeError "$PJRT_DEVICE is not set." (torch_xla/csrc/runtime/runtime.cc);
a PJRT device other than CPU is not on this host (RuntimeError when its client starts).

    /usr/bin/python3 scripts/fidelity/pjrt_default.py --xla_git=/path/to/xla.git [--check]
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

from neuron_xla import tags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(ROOT, "tests/placement/pjrt_default.txt")
FIRST = (1, 13)
FUNCTIONS = ("_maybe_select_default_device", "device_type", "using_pjrt", "requires_pjrt")
# The variables the functions read: unset (-), and the values that take each branch.
GRID = [{}, {"PJRT_SELECT_DEFAULT_DEVICE": "0"}, {"PJRT_SELECT_DEFAULT_DEVICE": "1"}, {"PJRT_DEVICE": "CPU"},
        {"PJRT_DEVICE": ""}, {"XRT_TPU_CONFIG": "localservice;0;localhost:51011"}, {"GPU_NUM_DEVICES": "2"}]


def show(repo, tag, path):
    r = subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{path}"], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def functions(source, names):
    """The source of each top-level function of `names` in `source`, decorators included."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            out[node.name] = "\n".join(lines[start:node.end_lineno])
    return out


# Executed in a child process per tag: one JSON line per case of the grid.
CHILD = r"""
import functools, json, logging, os, sys, types, typing
logging.disable(logging.CRITICAL)
spec = json.load(open(sys.argv[1]))
KEEP = {k: v for k, v in os.environ.items() if not k.startswith(("PJRT", "XRT_", "GPU_NUM", "TPU", "XLA"))}
for case in spec["grid"]:
    os.environ.clear()
    os.environ.update(KEEP)
    os.environ.update(case)
    xenv = types.ModuleType("xenv")
    exec(spec["env_vars"], xenv.__dict__)
    xu = types.SimpleNamespace()
    ns = {"os": os}
    exec(spec["getenv_as"], ns)
    xu.getenv_as = ns["getenv_as"]
    torch_xla = types.SimpleNamespace(_found_libtpu=False, _found_libneuronxla=False)
    tpu = types.SimpleNamespace(num_available_chips=lambda: 0)
    # torch: only torch.cuda is read (GPU selection); the simulated host has no CUDA GPU.
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0))
    g = {"os": os, "functools": functools, "logging": logging, "xenv": xenv, "xu": xu, "torch_xla": torch_xla,
         "tpu": tpu, "torch": torch, "Optional": typing.Optional, "TypeVar": typing.TypeVar, "Callable": typing.Callable,
         "FN": typing.TypeVar("FN")}
    for src in spec["functions"]:
        exec(src, g)
    try:
        if spec["select_at_import"]:  # torch_xla/__init__.py, from 2.5
            g["_maybe_select_default_device"]()
        if spec["xrt"]:  # xla_model.xla_device up to 2.0: PJRT when using_pjrt(), else XRT
            if not g["using_pjrt"]():
                raise RuntimeError("stand-in: XRT without a configuration: Missing XLA configuration")
        elif spec["xla_device_requires_pjrt"]:  # runtime.xla_device, 2.1 to 2.4
            g["requires_pjrt"](lambda: None)()
        kind = os.environ.get("PJRT_DEVICE", "").split("_")[0]  # what the C++ runtime then reads
        if not kind:
            raise RuntimeError("stand-in: $PJRT_DEVICE is not set.")
        if kind != "CPU":
            raise RuntimeError(f"stand-in: no {kind} on this host")
        print(json.dumps({"device": kind}), flush=True)
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)[:200]}), flush=True)
"""


def execute(repo, tag, python):
    """[outcome per GRID case] at `tag`: "device", "none" (RuntimeError, caught) or "raises" (anything else)."""
    v = tuple(int(x) for x in tag[1:].split("."))
    path = "torch_xla/experimental/pjrt.py" if v < (2, 1) else "torch_xla/runtime.py"
    source = show(repo, tag, path)
    funcs = functions(source, FUNCTIONS)
    init = show(repo, tag, "torch_xla/__init__.py") or ""
    utils = functions(show(repo, tag, "torch_xla/utils/utils.py"), ("getenv_as",))["getenv_as"]
    spec = {"grid": GRID, "env_vars": show(repo, tag, "torch_xla/core/xla_env_vars.py"), "getenv_as": utils,
            "functions": [funcs[n] for n in FUNCTIONS if n in funcs],
            "select_at_import": "runtime._maybe_select_default_device()" in init,
            "xla_device_requires_pjrt": v >= (2, 1) and bool(re.search(r"@requires_pjrt\s*\ndef xla_device\(", source)),
            "xrt": v < (2, 1)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        r = subprocess.run([python, "-c", CHILD, f.name], capture_output=True, text=True, check=True, timeout=120)
    finally:
        os.unlink(f.name)
    out, why = [], []
    for line in r.stdout.splitlines():
        d = json.loads(line)
        out.append("device" if "device" in d else "none" if d["error"] == "RuntimeError" else "raises")
        why.append(d.get("device") or f"{d['error']}: {d['message']}")
    return out, path, why


def env_text(case):
    return ",".join(f"{k}={v}" for k, v in case.items()) or "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--xla_git", required=True, help="a git mirror of pytorch/xla (its release tags)")
    p.add_argument("--check", action="store_true", help="compare with the table instead of writing it (exit 1 on a difference)")
    a = p.parse_args()
    rows = []
    for tag in tags(a.xla_git, FIRST):
        got, path, why = execute(a.xla_git, tag, sys.executable)
        for case, outcome in zip(GRID, got):
            rows.append(f"{tag[1:]} {env_text(case)} {outcome}")
        print(f"{tag} ({path}): " + "; ".join(f"{env_text(c)} {w}" for c, w in zip(GRID, why)), file=sys.stderr)
    text = ("# torch_xla's XLA device on a host without a TPU, executed by scripts/fidelity/pjrt_default.py at the\n"
            "# torch_xla release tags from v1.13.0 (its own _maybe_select_default_device, device_type, using_pjrt,\n"
            "# requires_pjrt, unmodified). Columns: torch_xla release, the variables set (- : none), then what\n"
            "# xm.xla_device() does: device (PJRT's CPU), none (RuntimeError, which the libraries' checks catch) or\n"
            "# raises (NotImplementedError, which they do not). tests/placement/xla_pjrt_test.cc holds the resolver to it.\n"
            + "".join(r + "\n" for r in rows))
    if a.check:
        same = os.path.exists(TABLE) and open(TABLE).read() == text
        print("pjrt_default: the table " + ("matches" if same else "differs"), file=sys.stderr)
        return 0 if same else 1
    with open(TABLE, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
