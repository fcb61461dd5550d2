#!/usr/bin/python3
"""Trainium on torch_xla: torch_xla's own NeuronCore set-up, executed at its release tags, against devplace.

torch_xla calls `torch_xla/_internal/neuron.py` `configure_pjrt_environment()` when it is imported on a
Neuron host (libneuronxla found): under torchrun it sets `NEURON_RT_VISIBLE_CORES` from `LOCAL_RANK`
when unset, and when set keeps the entry at position `LOCAL_RANK` (`neuron_utils.remap_visible_cores`,
first in torch_xla 2.5), or raises ValueError. This script extracts `_internal/neuron.py` and
`_internal/neuron_utils.py` from every torch_xla release tag from 2.5 on in a git mirror of
pytorch/xla, executes `configure_pjrt_environment()` unmodified over a grid of `NEURON_RT_VISIBLE_CORES`
x `LOCAL_RANK` x `LOCAL_WORLD_SIZE`, and reads the process's NeuronCore as the first entry of the
`NEURON_RT_VISIBLE_CORES` it leaves (parsed by torch_xla's own `get_visible_cores_list`; unset: core 0,
the Neuron runtime's first). Stand-ins, only for what the two modules import and play no part in the
remap: an empty `torch_xla` package (the real one loads the C++ extension), an empty
`torch_xla/_internal/__init__.py`, and `torch_xla.experimental.plugins` with an empty `DevicePlugin` base
class (neuron.py subclasses it at import). `torch.distributed.is_torchelastic_launched` is Debian's
python3-torch's own (torchrun is simulated by TORCHELASTIC_RUN_ID, as torchrun sets it). From torch_xla 2.6
on, torch_xla/__init__.py calls this set-up only when torch-neuronx is not installed (with it, torch-neuronx's
own `xla.init()`, which is not public): what is executed here is torch_xla's, which devplace assumes
torch-neuronx keeps (docs/SEMANTICS.md T-XLA-NEURON).

It writes tests/placement/neuron_xla_remap.txt (ctest NeuronOnXla.CoreIsTorchXlaExecutedRemap holds
devplace's resolver to it, with no mirror) and, given a devplace build, asks `devplace resolve` each
case on the neuron-2x-trn1 fixture host (2 Trainium1 devices, 4 NeuronCores) and compares the core.
Run by `run.py --xla_git=...` (with --probes or alone) or directly:

    /usr/bin/python3 scripts/fidelity/neuron_xla.py --xla_git=/path/to/xla.git [--devplace=build/dev/client/devplace]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from probe_flags import no_vendor_libraries

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TABLE = os.path.join(ROOT, "tests/placement/neuron_xla_remap.txt")
FILES = ("torch_xla/_internal/neuron.py", "torch_xla/_internal/neuron_utils.py")
FIRST = (2, 5)  # neuron_utils.remap_visible_cores is first in torch_xla 2.5

# The grid: None is unset; "" is set but empty (torch_xla treats it as unset). Cores beyond the fixture
# host's 4 (and lists torch_xla accepts but the runtime cannot use) are in on purpose.
CORES = [None, "", "0", "1", "3", "5", "0,1", "1,0", "0-1", "2-3", "1,3", "0-3", "3,2,1,0", "0-7", "4-7", "1-0", "0,0-1", "a",
         "0-1-2"]
RANKS = [None, 0, 1, 2, 3, 4]
LOCAL_WORLDS = [None, 1, 2, 4, 8]
FIXTURE = "neuron-2x-trn1"


def grid():
    for cores in CORES:
        if cores != "":  # a single process: torch_xla leaves the variables as they are (an empty list: the
            yield cores, None, None  # Neuron runtime's reading, not torch_xla's; under torchrun it is unset)
        for rank in RANKS[1:]:
            for lws in LOCAL_WORLDS:
                if lws is None or rank < lws:  # torchrun's LOCAL_RANK is below its LOCAL_WORLD_SIZE
                    yield cores, rank, lws


def tags(repo, first=FIRST):
    """torch_xla's release tags vX.Y.Z from `first` (MAJOR, MINOR) on, oldest first."""
    out = []
    for t in subprocess.run(["git", "--git-dir", repo, "tag"], check=True, capture_output=True, text=True).stdout.split():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", t)
        if m and (int(m.group(1)), int(m.group(2))) >= first:
            out.append((tuple(int(x) for x in m.groups()), t))
    return [t for _, t in sorted(out)]


# Executed in a child process per tag (its own modules and environment): one JSON line per case.
CHILD = r"""
import json, logging, os, sys
logging.disable(logging.CRITICAL)
sys.path.insert(0, sys.argv[1])
import torch.distributed  # Debian's python3-torch: is_torchelastic_launched reads TORCHELASTIC_RUN_ID
from torch_xla._internal import neuron, neuron_utils
KEEP = dict(os.environ)
for line in sys.stdin:
    case = json.loads(line)
    os.environ.clear()
    os.environ.update({k: v for k, v in KEEP.items() if not k.startswith(("NEURON", "PJRT", "LOCAL_", "TORCHELASTIC"))
                       and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "XLA_USE_SPMD")})
    os.environ.update(case["env"])
    try:
        neuron.configure_pjrt_environment()
    except Exception as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e), "stage": "torch_xla"}), flush=True)
        continue
    left = os.environ.get("NEURON_RT_VISIBLE_CORES")
    try:
        cores = neuron_utils.get_visible_cores_list()  # torch_xla's parser, for the list it left
    except Exception as e:  # a list torch_xla left as it was: the Neuron runtime reads it
        print(json.dumps({"error": type(e).__name__, "message": str(e), "stage": "runtime", "left": left}), flush=True)
        continue
    print(json.dumps({"left": left, "core": list(cores)[0] if cores else 0}), flush=True)
"""


def env_of(cores, rank, lws):
    env = {}
    if cores is not None:
        env["NEURON_RT_VISIBLE_CORES"] = cores
    if rank is not None:  # torchrun: its variables (LOCAL_WORLD_SIZE as the case has it)
        env.update(TORCHELASTIC_RUN_ID="fidelity", LOCAL_RANK=str(rank), RANK=str(rank),
                   WORLD_SIZE=str(lws or rank + 1), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        if lws is not None:
            env["LOCAL_WORLD_SIZE"] = str(lws)
    return env


def execute(repo, tag, cases, python):
    """torch_xla's answers at one tag: [{left, core} or {error, message, stage}] in the order of `cases`."""
    with tempfile.TemporaryDirectory(prefix=f"fidelity-xla-{tag}-") as d:
        for f in FILES:
            path = os.path.join(d, f)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{f}"], check=True,
                                         capture_output=True).stdout)
        stubs = {"torch_xla/__init__.py": "", "torch_xla/_internal/__init__.py": "",
                 "torch_xla/experimental/__init__.py": "",
                 "torch_xla/experimental/plugins.py": "class DevicePlugin:\n    pass\n"}
        for f, text in stubs.items():
            os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
            with open(os.path.join(d, f), "w") as out:
                out.write(text)
        r = subprocess.run(["nice", "-n", "10", python, "-c", CHILD, d], capture_output=True, text=True, timeout=600,
                           input="".join(json.dumps({"env": env_of(*c)}) + "\n" for c in cases))
    got = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if len(got) != len(cases):
        sys.exit(f"torch_xla {tag}: {len(got)} of {len(cases)} answers; stderr: {r.stderr.strip()[-600:]}")
    return got


def kind(ans):
    """The answer devplace must match: core=N, or the error's kind (malformed list / count or rank)."""
    if "core" in ans:
        return f"core={ans['core']}"
    msg = ans["message"]
    if ans["error"] == "ValueError" and ("is not equal to count" in msg or "is higher than count" in msg):
        return "error=count"
    return "error=malformed"


def tok(v):
    return "-" if v is None else '""' if v == "" else str(v)


def write_table(rows, executed):
    with open(TABLE, "w") as f:
        f.write("# torch_xla's NeuronCore set-up on a Neuron host, executed by scripts/fidelity/neuron_xla.py:\n"
                "# torch_xla/_internal/neuron.py configure_pjrt_environment() (neuron_utils.remap_visible_cores),\n"
                f"# unmodified, at the torch_xla release tags {', '.join(executed)}, all answering alike.\n"
                "# Columns: NEURON_RT_VISIBLE_CORES, LOCAL_RANK (- : a single process, no torchrun), LOCAL_WORLD_SIZE\n"
                "# (- : unset; \"\" : set but empty), then the process's NeuronCore (the first entry of the\n"
                "# NEURON_RT_VISIBLE_CORES torch_xla leaves; unset: 0), or torch_xla's ValueError (count: the list\n"
                "# and LOCAL_WORLD_SIZE / LOCAL_RANK disagree), or a list that is malformed (malformed: torch_xla's\n"
                "# parser refuses it). tests/placement/versions_test.cc holds devplace's resolver to it.\n")
        for (cores, rank, lws), k in rows:
            f.write(f"{tok(cores)} {tok(rank)} {tok(lws)} {k}\n")


def host_cores(devplace, work):
    """The fixture host's inventory and, per NeuronCore (in order), its (host index, sub-device)."""
    inv_path = os.path.join(work, f"inventory-{FIXTURE}.json")
    if not os.path.exists(inv_path):
        libs = no_vendor_libraries(devplace)
        inv = subprocess.run([devplace, "probe", f"--host_root={ROOT}/tests/fixtures/hosts/{FIXTURE}", "--json", *libs],
                             check=True, capture_output=True, text=True).stdout
        with open(inv_path, "w") as f:
            f.write(inv)
    with open(inv_path) as f:
        inv = json.load(f)
    cores = []
    for b in inv["backends"]:
        if b["row"] == "ROW_NEURON":
            for dev in sorted(b["devices"], key=lambda x: x["hostIndex"]):
                cores += [(dev["hostIndex"], s) for s in range(max(1, int(dev.get("subDeviceCount", 1))))]
    return inv_path, cores


def job_site(work):
    """The job's packages: torch, torch-neuronx and torch_xla (Neuron on torch_xla), for --python_env."""
    d = os.path.join(work, "site-torch-torch_neuronx-torch_xla")
    if not os.path.isdir(d):
        for name, version in (("torch", "2.5.1"), ("torch_neuronx", "2.5.1.2.4.0"), ("torch_xla", "2.5.1")):
            info = os.path.join(d, f"{name}-{version}.dist-info")
            os.makedirs(info, exist_ok=True)
            with open(os.path.join(info, "METADATA"), "w") as f:
                f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return d


def devplace_answer(devplace, inv, site, cores_of_host, case):
    cores, rank, lws = case
    cmd = [devplace, "resolve", f"--inventory={inv}", "--no_environment", "--json", "--workload=training",
           "--convention=accelerate", "--runtime_backends=neuron,xla,cpu", f"--python_env={site}"]
    if rank is not None:
        cmd += [f"--local_rank={rank}", f"--world_size={lws or rank + 1}"]
        if lws is not None:
            cmd.append(f"--env=LOCAL_WORLD_SIZE={lws}")
    if cores is not None:
        cmd.append(f"--env=NEURON_RT_VISIBLE_CORES={cores}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        code = re.search(r"\b(INVALID_ARGUMENT|FAILED_PRECONDITION|[A-Z_]{5,})\b", msg)
        return {"error": code.group(1) if code else "?", "message": msg}
    got = json.loads(r.stdout)
    placed = got.get("placed", [])
    if got.get("device") != "xla:0" or len(placed) != 1:
        return {"device": got.get("device"), "placed": placed}
    where = (placed[0].get("hostIndex", 0), placed[0].get("subDevice", 0))
    return {"device": "xla:0", "core": cores_of_host.index(where) if where in cores_of_host else None}


def names_missing_core(cores, n_cores):
    """Whether a well-formed NEURON_RT_VISIBLE_CORES names a core at or beyond n_cores."""
    try:
        return any(int(e.split("-")[-1]) >= n_cores for e in cores.split(","))
    except ValueError:
        return False


def agrees(case, k, dp, n_cores):
    """torch_xla's answer against devplace's: the same core; a core the host lacks, or a list naming one that
    torch_xla leaves as it is (a single process), is the Neuron runtime's failure, not torch_xla's answer
    (devplace: FAILED_PRECONDITION or, for the list, INVALID_ARGUMENT); torch_xla's count ValueError is
    FAILED_PRECONDITION; a malformed list INVALID_ARGUMENT."""
    if k.startswith("core="):
        core = int(k[5:])
        kept = case[1] is None and case[0] and names_missing_core(case[0], n_cores)
        if core < n_cores and not kept:
            return dp.get("core") == core
        return dp.get("error") in ("FAILED_PRECONDITION", "INVALID_ARGUMENT")
    want = "FAILED_PRECONDITION" if k == "error=count" else "INVALID_ARGUMENT"
    return dp.get("error") == want


def run(xla_git, devplace=None, work=None, python=None):
    """Executes torch_xla at every tag from 2.5, writes the table and compares devplace: a summary dict."""
    t0 = time.time()
    python = python or "/usr/bin/python3"
    work = work or os.path.join(tempfile.gettempdir(), "devplace-fidelity")
    os.makedirs(work, exist_ok=True)
    cases = list(grid())
    executed = tags(xla_git)
    per_tag = {}
    blobs = {}
    for tag in executed:
        key = tuple(subprocess.run(["git", "--git-dir", xla_git, "rev-parse", f"{tag}:{f}"], check=True,
                                   capture_output=True, text=True).stdout.strip() for f in FILES)
        blobs[tag] = key
        per_tag[tag] = [kind(a) for a in execute(xla_git, tag, cases, python)]
        print(f"  torch_xla {tag} (neuron.py {key[0][:8]}, neuron_utils.py {key[1][:8]}): {len(cases)} cases executed",
              flush=True)
    differ = [(c, {t: per_tag[t][i] for t in executed}) for i, c in enumerate(cases)
              if len({per_tag[t][i] for t in executed}) > 1]
    for c, by_tag in differ:
        print(f"torch_xla's tags disagree on {c}: {by_tag}")
    rows = [(c, per_tag[executed[-1]][i]) for i, c in enumerate(cases)]
    write_table(rows, executed)
    summary = {"ran": time.strftime("%Y-%m-%d"), "tags": executed, "distinct_sources": len(set(blobs.values())),
               "cases": len(cases), "tags_disagree": len(differ), "compared": 0, "agree": 0, "differences": []}
    if devplace:
        inv, cores_of_host = host_cores(devplace, work)
        site = job_site(work)
        for c, k in rows:
            dp = devplace_answer(devplace, inv, site, cores_of_host, c)
            ok = agrees(c, k, dp, len(cores_of_host))
            summary["compared"] += 1
            summary["agree"] += ok
            if not ok:
                summary["differences"].append({"NEURON_RT_VISIBLE_CORES": c[0], "LOCAL_RANK": c[1],
                                               "LOCAL_WORLD_SIZE": c[2], "torch_xla": k, "devplace": dp})
                print(f"DIFF {tok(c[0]):>8} rank {tok(c[1]):>2} local_world {tok(c[2]):>2}: torch_xla {k}, devplace "
                      f"{json.dumps(dp)[:200]}")
    summary["seconds"] = round(time.time() - t0)
    print(f"torch_xla's Neuron set-up: {len(executed)} tags ({summary['distinct_sources']} distinct sources) x "
          f"{len(cases)} cases executed, tags disagreeing on {len(differ)}; devplace agrees on {summary['agree']} of "
          f"{summary['compared']}; {summary['seconds']} s; wrote {os.path.relpath(TABLE, ROOT)}")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xla_git", required=True, help="git directory of a pytorch/xla mirror with its release tags")
    ap.add_argument("--devplace", default=os.path.join(ROOT, "build/dev/client/devplace"),
                    help="devplace CLI to compare (empty: only execute torch_xla and write the table)")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "devplace-fidelity"))
    a = ap.parse_args()
    s = run(a.xla_git, a.devplace or None, a.work)
    return 1 if s["tags_disagree"] or s["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
