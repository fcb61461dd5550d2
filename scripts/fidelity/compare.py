"""The two sides of every comparison and how they compare: the simulated hosts and the workloads, the
libraries' side (oracle.py executing their own code in a process of its own), devplace's side (`devplace
resolve --inventory` on the matching fixture host, with the job's packages), and the verdict (same;
classify: the intended differences).
"""
import collections
import hashlib
import json
import os
import re
import subprocess
import sys

from common import HERE, ROOT, vkey
from probe_flags import no_vendor_libraries

# The simulated hosts: device counts the libraries see, the plug-ins installed (the job's packages,
# sent to devplace too), and the devplace fixture host(s) whose probed inventory describes the same
# machine (two: their rows merged; "mps": a saved inventory with one Apple GPU, which the Linux
# probe cannot find).
HOSTS = [
    {"id": "cpu", "fixtures": ["cpu-only"], "count": {}},
    {"id": "mps", "fixtures": ["cpu-only"], "count": {}, "mps": True},
    {"id": "cuda2", "fixtures": ["nvidia-2x-h100"], "count": {"cuda": 2}},
    {"id": "xpu2-stock", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 2}, "stock_xpu": True},
    {"id": "xpu2-ipex", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 2},
     "packages": ["intel_extension_for_pytorch"]},
    {"id": "npu2", "fixtures": ["npu-2x-910b"], "count": {"npu": 2}, "packages": ["torch_npu"]},
    {"id": "mlu2", "fixtures": ["mlu-2x-mlu370"], "count": {"mlu": 2}, "packages": ["torch_mlu"]},
    {"id": "musa2", "fixtures": ["musa-2x-s4000"], "count": {"musa": 2}, "packages": ["torch_musa"]},
    {"id": "hpu2", "fixtures": ["hpu-2x-gaudi2"], "count": {"hpu": 2}, "packages": ["habana_frameworks"]},
    {"id": "neuron2", "fixtures": ["neuron-2x-trn1"], "count": {"neuron": 2}, "packages": ["torch_neuronx"]},
    {"id": "cuda2+xpu2", "fixtures": ["nvidia-2x-h100", "xpu-2x-arc"], "count": {"cuda": 2, "xpu": 2},
     "stock_xpu": True},
    {"id": "cuda2+npu2", "fixtures": ["nvidia-2x-h100", "npu-2x-910b"], "count": {"cuda": 2, "npu": 2},
     "packages": ["torch_npu"]},
    {"id": "cuda2+mlu2", "fixtures": ["nvidia-2x-h100", "mlu-2x-mlu370"], "count": {"cuda": 2, "mlu": 2},
     "packages": ["torch_mlu"]},
    {"id": "cuda2+musa2", "fixtures": ["nvidia-2x-h100", "musa-2x-s4000"], "count": {"cuda": 2, "musa": 2},
     "packages": ["torch_musa"]},
    {"id": "cuda2+hpu2", "fixtures": ["nvidia-2x-h100", "hpu-2x-gaudi2"], "count": {"cuda": 2, "hpu": 2},
     "packages": ["habana_frameworks"]},
    {"id": "npu2+hpu2", "fixtures": ["npu-2x-910b", "hpu-2x-gaudi2"], "count": {"npu": 2, "hpu": 2},
     "packages": ["torch_npu", "habana_frameworks"]},
]
# The distribution each stand-in package is installed as (what a client sends in job_environment).
DISTRIBUTIONS = {"torch_npu": "torch_npu", "torch_mlu": "torch_mlu", "torch_musa": "torch_musa",
                 "intel_extension_for_pytorch": "intel_extension_for_pytorch", "torch_neuronx": "torch_neuronx",
                 "habana_frameworks": "habana_torch_plugin", "torch_tpu": "torch_tpu"}
TORCH = "2.8.0"  # the torch release the simulated job reports (oracle.py's default)

# Workloads: id, oracle convention, devplace flags, local_rank, use_cpu, pipeline device.
W = collections.namedtuple("W", "id convention flags rank use_cpu device")
WORKLOADS = [
    W("ta", "training_arguments", ["--workload=training", "--convention=training_arguments"], None, False, None),
    W("ta-rank1", "training_arguments", ["--workload=training", "--convention=training_arguments"], 1, False, None),
    W("ta-cpu", "training_arguments", ["--workload=training", "--convention=training_arguments", "--use_cpu"], None,
      True, None),
    W("acc", "accelerate", ["--workload=training", "--convention=accelerate"], None, False, None),
    W("acc-rank1", "accelerate", ["--workload=training", "--convention=accelerate"], 1, False, None),
    W("auto", "max_memory", ["--workload=inference", "--convention=from_pretrained", "--device_map=auto"], None, False,
      None),
    W("pl", "pipeline", ["--workload=inference", "--convention=pipeline"], None, False, None),
    W("pl0", "pipeline", ["--workload=inference", "--convention=pipeline", "--device_map=0"], None, False, 0),
]


def _digest():
    """Names kept answers: the oracle's code and the matrix (HOSTS, WORKLOADS) they came from."""
    with open(os.path.join(HERE, "oracle.py"), "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(json.dumps([HOSTS, WORKLOADS]).encode())
    return h.hexdigest()[:12]


HERE_DIGEST = _digest()


def inventory(devplace, host, cache):
    key = "+".join(host["fixtures"]) + ("+mps" if host.get("mps") else "")
    path = os.path.join(cache, f"inventory-{key}.json")
    if os.path.exists(path):
        return path
    merged = None
    for f in host["fixtures"]:
        libs = no_vendor_libraries(devplace)
        inv = json.loads(subprocess.run([devplace, "probe", f"--host_root={ROOT}/tests/fixtures/hosts/{f}", "--json",
                                         *libs], check=True, capture_output=True, text=True).stdout)
        if merged is None:
            merged = inv
        else:
            merged["backends"] += [b for b in inv["backends"] if b["row"] != "ROW_CPU"]
    if host.get("mps"):  # Apple silicon: one GPU with no device node, as devplace's macOS inventory has it
        merged["backends"].append({
            "row": "ROW_MPS", "name": "mps", "deviceType": "mps", "hardware": "Apple GPU", "vendor": "Apple",
            "package": "torch", "state": "BACKEND_STATE_READY",
            "devices": [{"hostIndex": 0, "name": "Apple M2", "driverLoaded": True, "deviceNodesPresent": True,
                         "health": "HEALTH_OK", "supported": True, "usable": True}]})
    with open(path, "w") as out:
        json.dump(merged, out)
    return path


def job_site(host, cache):
    """A site-packages directory holding the job's distributions (torch, at the host's "torch" release where it
    names one, and the host's plug-ins at the same release), for --python_env."""
    torch = host.get("torch", TORCH)
    pkgs = [("torch", torch)] + [(DISTRIBUTIONS[p], torch) for p in host.get("packages", [])]
    d = os.path.join(cache, "site-" + "-".join(n for n, _ in pkgs) + (f"-{torch}" if "torch" in host else ""))
    if not os.path.isdir(d):
        os.makedirs(d + ".tmp", exist_ok=True)
        for name, version in pkgs:
            info = os.path.join(d + ".tmp", f"{name}-{version}.dist-info")
            os.makedirs(info, exist_ok=True)
            with open(os.path.join(info, "METADATA"), "w") as f:
                f.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        os.rename(d + ".tmp", d)
    return d


def backends(host):
    return sorted(host["count"]) + (["mps"] if host.get("mps") else []) + ["cpu"]


def ask_devplace(devplace, work, host, w, tf, acc, world=2, env=None, xla=False):
    """devplace's side: `devplace resolve --inventory` on the fixture host(s) of `host` for workload `w` at
    Transformers `tf` (None: Accelerate alone) and Accelerate `acc`, with the job's packages (--python_env)
    and backends (and torch_xla's with `xla`); `world` processes when the workload has a rank, `env` the
    job's variables. {"device": ...}, or {"error": the last line devplace printed}."""
    cmd = [devplace, "resolve", f"--inventory={inventory(devplace, host, work)}", "--no_environment", "--json",
           *w.flags, "--runtime_backends=" + ",".join(backends(host) + (["xla"] if xla else [])),
           f"--python_env={job_site(host, work)}", f"--accelerate_version={acc}"]
    if tf:
        cmd.append(f"--transformers_version={tf}")
    if w.rank is not None:
        cmd += [f"--local_rank={w.rank}", f"--world_size={world}"]
    for k, v in (env or {}).items():
        cmd.append(f"--env={k}={v}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    answer = json.loads(r.stdout)
    if w.convention == "max_memory_keys":
        return {"device": first_budget_key(answer)}
    return {"device": answer["device"]}


def first_budget_key(answer):
    """The first key of devplace's max_memory in Accelerate's order (device indices, then named devices as
    get_max_memory adds them), as the oracle's max_memory_keys writes get_max_memory()'s; with no budgets (a device
    whose memory devplace does not know) the key its device would have."""
    keys = list(answer.get("maxMemory", {}))
    numbered = sorted(int(k) for k in keys if k.isdigit())
    if numbered:
        return str(numbered[0])
    if keys:
        return "mps" if "mps" in keys else keys[0]
    device = answer["device"]
    return device.split(":")[1] if ":" in device else device


def run_oracle(job):
    """{case id: answer} from one oracle.py process (a case it did not answer: the process's last error)."""
    r = subprocess.run(["nice", "-n", "10", sys.executable, os.path.join(HERE, "oracle.py")], input=json.dumps(job),
                       capture_output=True, text=True, timeout=1800)
    got = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            got[d.pop("id")] = d
    for c in job["cases"]:
        got.setdefault(c["id"], {"error": "oracle died: " + (r.stderr.strip().splitlines() or ["?"])[-1]})
    return got


class OracleServer:
    """oracle_server.py: one process that imports torch once and forks an oracle.py per job (its own environment and
    imports of the libraries, as a process of its own has them). run() answers as run_oracle does."""

    def __enter__(self):
        self.proc = subprocess.Popen(["nice", "-n", "10", sys.executable, os.path.join(HERE, "oracle_server.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.proc.wait()

    def run(self, job):
        """{case id: answer} from one forked oracle.py (a case it did not answer: the child's last error)."""
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        got, end = {}, {"stderr": "the oracle server ended"}
        for line in self.proc.stdout:
            if line.startswith('{"_end"'):
                end = json.loads(line)
                break
            if line.startswith("{"):
                d = json.loads(line)
                got[d.pop("id")] = d
        for c in job["cases"]:
            got.setdefault(c["id"], {"error": "oracle died: " + (end["stderr"] or "?")})
        return got


def same(lib, dp):
    if "device" in lib and "device" in dp:
        return lib["device"] == dp["device"]
    return "error" in lib and "error" in dp


# Intended differences (docs/SEMANTICS.md section 10 names each, with the library's behaviour beside it).
def classify(tf, acc, host, w, lib, dp):
    dev, mine = lib.get("device", ""), dp.get("device", "")
    if mine and re.match(r"(NotImplementedError|RuntimeError): simulated torch_xla: (`xla_device` not implemented for XRT|"
                         r"no XLA device)", lib.get("error", "")):
        return ("intended: xm.xla_device() raises in the job's torch_xla (the job fails at start); devplace answers "
                "beside a warning naming the cause and the fixes (T-XLA-PJRT)")
    if re.fullmatch(r"cpu:\d+", dev) and mine == "cpu":
        return "intended: cpu:<rank> (the same device as cpu)"
    if (tf and (4, 34) <= vkey(tf)[:2] <= (4, 37) and w.convention == "training_arguments" and w.rank
            and dev == "xpu:0"
            and mine.startswith("xpu:")):
        return "intended: every rank on xpu:0 (a bug fixed in 4.38, not emulated)"
    if re.fullmatch(r"hpu:[1-9]\d*", dev) and "HABANA_VISIBLE_MODULES" in dp.get("error", ""):
        return "intended: a Gaudi module index (the job fails using it; devplace refuses it up front)"
    if re.fullmatch(r"mps:[1-9]\d*", dev) and "mps device(s)" in dp.get("error", ""):
        return "intended: an MPS index above 0 (torch has one MPS device; devplace refuses the index up front)"
    if dev == "meta" and "not a placement target" in dp.get("error", ""):
        return "intended: meta refused (no storage, not a device a job runs on)"
    return "unintended"
