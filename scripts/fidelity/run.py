#!/usr/bin/python3
"""Fidelity runner: devplace's answers against the libraries' own code, release tag by release tag.

Modes (README.md here says how to run each):
- default: for every release pair it checks out Transformers and Accelerate at their release tags,
  executes their device-choosing code under scripts/fidelity/oracle.py against each simulated
  host, asks `devplace resolve --inventory` the same question on the matching fixture host, and
  records per pair the comparisons, the agreement and each disagreement with its classification
  in results.json here; `--doc` renders that file as docs/FIDELITY.md.
- `--boundaries`: every release boundary of server/placement/versions.cc (each row's commits) is
  looked up among every release tag in the mirrors, patch releases included; the first tag holding
  any of a row's commits must be the row's `since`. Writes tests/placement/version_boundaries.txt,
  which ctest holds the table to.
- `--probes`: a covering workload per rule, executed on both sides of each boundary (every
  Accelerate tag of the range, or all with `--every_tag`); the coverage table goes into
  results.json and, with `--doc`, docs/FIDELITY.md.
- `--xla_git`: torch_xla's own Neuron set-up (T-XLA-NEURON), executed at every torch_xla release tag from 2.5
  by neuron_xla.py here against devplace; writes tests/placement/neuron_xla_remap.txt and, with --probes, joins
  the coverage check.
- `--newer`: the release tags in the mirrors newer than the newest release the table knows.
Opt-in (needs local mirrors with the release tags, and Debian's python3-torch); not part of CI.
"""
import argparse
import collections
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

from probe_flags import no_vendor_libraries

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSIONS_CC = os.path.join(ROOT, "server/placement/versions.cc")
BOUNDARIES = os.path.join(ROOT, "tests/placement/version_boundaries.txt")
RESULTS = os.path.join(HERE, "results.json")
DOC = os.path.join(ROOT, "docs/FIDELITY.md")

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
TRANSFORMERS_LIBS = ("training_arguments", "pipeline")  # conventions that need Transformers
FIRST_MINOR = {"transformers": (4, 36), "accelerate": (0, 25)}  # the matrix: every minor from these on
SUPPORTED = {"transformers": (4, 30), "accelerate": (0, 25)}  # versions.cc MinVersion


def _digest():
    """Names kept answers: the oracle's code and the matrix (HOSTS, WORKLOADS) they came from."""
    with open(os.path.join(HERE, "oracle.py"), "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(json.dumps([HOSTS, WORKLOADS]).encode())
    return h.hexdigest()[:12]


HERE_DIGEST = _digest()


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def vkey(v):
    return tuple(int(x) for x in v.split(".")[:3])


RELEASE_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")  # vX.Y.Z (Transformers tagged 4.54.1 without the v)
INIT = {"transformers": "src/transformers/__init__.py", "accelerate": "src/accelerate/__init__.py"}
SINCE = {"transformers": "2023-05-01", "accelerate": "2023-10-01"}  # before the oldest supported release's branch


def tree_version(repo, lib, commit):
    r = subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:{INIT[lib]}"], capture_output=True, text=True)
    m = re.search(r'^__version__ = "([^"]+)"', r.stdout, re.M) if r.returncode == 0 else None
    return m.group(1) if m else None


def releases(repo, lib):
    """{X.Y.Z: (commit, how, date)}: every release in the supported range, each checked against its tree.

    A release tag is taken when the tree it names says that version. A tag naming a main-line tree (an
    X.Y.Z.dev0 version) is misplaced, and a release with no tag is missing: then the release commit, the one
    whose tree says exactly X.Y.Z, stands for it. A tag whose tree says another release is kept, and said."""
    tags = {}
    for line in git(repo, "for-each-ref", "refs/tags", "--format=%(refname:short) %(*objectname) %(objectname)").splitlines():
        tag, *objs = line.split()
        m = RELEASE_TAG.match(tag)
        if m and (int(m.group(1)), int(m.group(2))) >= SUPPORTED[lib]:
            v = ".".join(m.groups())
            if v not in tags or tag.startswith("v"):
                tags[v] = (tag, objs[0])  # annotated tags: the peeled commit comes first
    by_tree = {}  # version -> the newest commit whose tree says exactly that version
    for c in git(repo, "log", "--all", f"--since={SINCE[lib]}", "--format=%H", "-G^__version__ = ", "--", INIT[lib]).split():
        v = tree_version(repo, lib, c)
        if v and RELEASE_TAG.match(v) and (int(v.split(".")[0]), int(v.split(".")[1])) >= SUPPORTED[lib]:
            by_tree.setdefault(v, c)
    out = {}
    for v, (tag, c) in tags.items():
        tv = tree_version(repo, lib, c)
        if tv == v:
            out[v] = (c, f"tag {tag}")
        elif tv and ".dev" in tv and v in by_tree:
            out[v] = (by_tree[v], f"release commit {by_tree[v][:10]} (tag {tag} names {c[:10]}, a {tv} tree)")
        else:
            out[v] = (c, f"tag {tag} (its tree says {tv})")
    tagged = {c for _, c in tags.values()}
    for v, c in by_tree.items():
        if v not in out and c not in tagged:
            out[v] = (c, f"release commit {c[:10]} (no tag in the mirror)")
    dates = dict(line.split() for line in git(repo, "show", "-s", "--format=%H %ct", *sorted({c for c, _ in out.values()})).splitlines())
    return {v: (c, how, int(dates[c])) for v, (c, how) in out.items()}


def last_patches(rel, lib):
    """The last patch release of every minor from FIRST_MINOR on."""
    best = {}
    for v in rel:
        k = vkey(v)
        if k[:2] >= FIRST_MINOR[lib] and (k[:2] not in best or vkey(best[k[:2]]) < k):
            best[k[:2]] = v
    return [best[k] for k in sorted(best)]


_EXPORT_LOCK = __import__("threading").Lock()


def export(repo, commit, path, dest):
    with _EXPORT_LOCK:
        if not os.path.isdir(dest):
            os.makedirs(dest + ".tmp", exist_ok=True)
            archive = subprocess.run(["git", "--git-dir", repo, "archive", commit, path], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", dest + ".tmp"], input=archive, check=True)
            os.rename(dest + ".tmp", dest)
    return dest


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
    """A site-packages directory holding the job's distributions (torch and the host's plug-ins), for --python_env."""
    pkgs = [("torch", TORCH)] + [(DISTRIBUTIONS[p], TORCH) for p in host.get("packages", [])]
    d = os.path.join(cache, "site-" + "-".join(n for n, _ in pkgs))
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


def devplace_answer(devplace, inv, site, host, w, tf, acc):
    cmd = [devplace, "resolve", f"--inventory={inv}", "--no_environment", "--json", *w.flags,
           "--runtime_backends=" + ",".join(backends(host)), f"--python_env={site}", f"--accelerate_version={acc}"]
    if tf:
        cmd.append(f"--transformers_version={tf}")
    if w.rank is not None:
        cmd += [f"--local_rank={w.rank}", "--world_size=2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return {"device": json.loads(r.stdout)["device"]}


def oracle(acc_dir, tf_dir, hosts, workloads, hub_version, versions):
    cases = []
    for h in hosts:
        for w in workloads:
            cases.append({"id": f"{h['id']}/{w.id}", "host": h, "convention": w.convention, "local_rank": w.rank,
                          "use_cpu": w.use_cpu, "device": w.device})
    return run_oracle({"accelerate": acc_dir, "transformers": tf_dir, "hub_version": hub_version, "cases": cases,
                       "accelerate_version": versions[1], "transformers_version": versions[0], "torch": TORCH})


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


def same(lib, dp):
    if "device" in lib and "device" in dp:
        return lib["device"] == dp["device"]
    return "error" in lib and "error" in dp


# Intended differences (docs/SEMANTICS.md section 10 names each, with the library's behaviour beside it).
def classify(tf, acc, host, w, lib, dp):
    dev, mine = lib.get("device", ""), dp.get("device", "")
    if re.fullmatch(r"cpu:\d+", dev) and mine == "cpu":
        return "intended: cpu:<rank> (the same device as cpu)"
    if (tf and (4, 34) <= vkey(tf)[:2] <= (4, 37) and w.id == "ta-rank1" and dev == "xpu:0"
            and mine.startswith("xpu:")):
        return "intended: every rank on xpu:0 (a bug fixed in 4.38, not emulated)"
    return "unintended"


def run_pairs(a, tfr, accr, pairs):
    def one(pair):
        tf, acc = pair
        acc_dir = export(a.accelerate_git, accr[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
        tf_dir = (export(a.transformers_git, tfr[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}"))
                  if tf else None)
        workloads = WORKLOADS if tf else [w for w in WORKLOADS if w.convention not in TRANSFORMERS_LIBS]
        hub = "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0"
        # The libraries' answers depend only on the two trees and this matrix: kept, so that a rerun after a
        # change to devplace only asks devplace again (--fresh executes them again).
        cache = os.path.join(a.work, f"answers-{tf}-{acc}-{HERE_DIGEST}.json")
        if os.path.exists(cache) and not a.fresh:
            with open(cache) as f:
                got = json.load(f)
        else:
            # Transformers reads Intel Extension for PyTorch once, at import: that host runs in its own process.
            got = {}
            for hosts in ([h for h in HOSTS if h["id"] != "xpu2-ipex"], [h for h in HOSTS if h["id"] == "xpu2-ipex"]):
                got.update(oracle(acc_dir, tf_dir, hosts, workloads, hub, pair))
            with open(cache, "w") as f:
                json.dump(got, f)
        asks = [(h, w) for h in HOSTS for w in workloads]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = pool.map(lambda hw: devplace_answer(a.devplace, inventory(a.devplace, hw[0], a.work),
                                                          job_site(hw[0], a.work), hw[0], hw[1], tf, acc), asks)
            rows = []
            for (h, w), dp in zip(asks, answers):
                lib = got[f"{h['id']}/{w.id}"]
                ok = same(lib, dp)
                rows.append({"host": h["id"], "workload": w.id, "library": lib, "devplace": dp, "agree": ok,
                             "class": "" if ok else classify(tf, acc, h, w, lib, dp)})
        return rows

    today = datetime.date.today().isoformat()
    for pair in pairs:  # one pair at a time: the machine is shared
        tf, acc = pair
        rows = one(pair)
        ok = sum(r["agree"] for r in rows)
        bad = [r for r in rows if not r["agree"]]
        unintended = [r for r in bad if r["class"] == "unintended"]
        key = f"{tf or '-'}+{acc}"
        results = load_results()  # another run may have recorded other pairs meanwhile
        results["pairs"][key] = {
            "transformers": tf, "accelerate": acc,
            "transformers_source": f"{tfr[tf][1]} = {tfr[tf][0][:10]}" if tf else "",
            "accelerate_source": f"{accr[acc][1]} = {accr[acc][0][:10]}",
            "ran": today, "comparisons": len(rows), "agree": ok, "unintended": len(unintended),
            "disagreements": [{k: r[k] for k in ("host", "workload", "library", "devplace", "class")} for r in bad]}
        save_results(results)
        print(f"Transformers {tf or '-':>6} + Accelerate {acc:>6}: {ok}/{len(rows)} agree, {len(bad) - len(unintended)} "
              f"intended, {len(unintended)} unintended", flush=True)
        for r in bad:
            print(f"    {r['host']:<12} {r['workload']:<9} library {json.dumps(r['library'])[:100]}  devplace "
                  f"{json.dumps(r['devplace'])[:100]}  [{r['class']}]", flush=True)
    return load_results()


def load_results():
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            return json.load(f)
    return {"pairs": {}}


def save_results(results):
    results["pairs"] = dict(sorted(results["pairs"].items(), key=lambda kv: (
        kv[1]["transformers"] is None, vkey(kv[1]["transformers"] or "0.0.0"), vkey(kv[1]["accelerate"]))))
    with open(RESULTS + ".tmp", "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(RESULTS + ".tmp", RESULTS)


def render_doc(results):
    """docs/FIDELITY.md from results.json."""
    pairs = list(results["pairs"].values())
    lines = [
        "# Fidelity: devplace against the libraries' own code, release by release",
        "",
        "<!-- Written by scripts/fidelity/run.py --doc from scripts/fidelity/results.json; do not edit by hand. -->",
        "",
        "`scripts/fidelity/run.py` checks out Transformers and Accelerate at their **release tags**, executes",
        "their own device-choosing code, unmodified, against simulated hardware (`scripts/fidelity/oracle.py`), and",
        "asks `devplace resolve` the same question on the matching fixture host. Each Transformers minor from 4.36",
        "on (its last patch release) runs with the Accelerate release that was current when it was tagged; every",
        "Accelerate minor from 0.25 on also runs alone (`Accelerator().device`, `get_max_memory`). What is",
        "executed, the simulated hosts and the intended differences are in",
        "[SEMANTICS.md section 10](SEMANTICS.md#10-versions-v-rules); scripts/fidelity/README.md says how to rerun it.",
        "",
        f"Comparisons per pair: {len(HOSTS)} hosts x the workloads (`TrainingArguments(...).device` single, rank 1 of 2 "
        "and `use_cpu`; `PartialState().device` single and rank 1; the first device of `get_max_memory()`; "
        "`pipeline(device=None)` and `pipeline(device=0)`; Accelerate alone: the three Accelerate ones).",
        "A comparison agrees when both give the same device string or both fail.",
        "",
        "| Transformers | Accelerate | tags | ran | comparisons | agree | intended differences | unintended |",
        "|---|---|---|---|---|---|---|---|",
    ]
    total = agree = unintended = 0
    for p in pairs:
        intended = collections.Counter(d["class"][len("intended: "):].split(" (")[0] for d in p["disagreements"]
                                       if d["class"] != "unintended")
        tags = ", ".join(s for s in (p["transformers_source"], p["accelerate_source"]) if s)
        lines.append(f"| {p['transformers'] or '–'} | {p['accelerate']} | {tags} | {p['ran']} | {p['comparisons']} | "
                     f"{p['agree']} ({100.0 * p['agree'] / p['comparisons']:.0f} %) | "
                     f"{', '.join(f'{n} {k}' for k, n in sorted(intended.items())) or '–'} | {p['unintended']} |")
        total += p["comparisons"]
        agree += p["agree"]
        unintended += p["unintended"]
    lines += ["", f"Total: {len(pairs)} pairs, {total} comparisons, {agree} agree ({100.0 * agree / max(1, total):.1f} %), "
              f"{unintended} unintended disagreements.", ""]
    bad = [(p, d) for p in pairs for d in p["disagreements"] if d["class"] == "unintended"]
    lines += ["## Unintended disagreements", ""]
    if not bad:
        lines += ["None.", ""]
    else:
        lines += ["| pair | host | workload | library | devplace |", "|---|---|---|---|---|"]
        for p, d in bad:
            lines.append(f"| {p['transformers'] or '–'} + {p['accelerate']} | {d['host']} | {d['workload']} | "
                         f"`{json.dumps(d['library'])}` | `{json.dumps(d['devplace'])}` |")
        lines.append("")
    # Each intended difference once per (host, workload, answers), with the pairs it showed in.
    kinds = collections.OrderedDict()
    for p in pairs:
        for d in p["disagreements"]:
            if d["class"] != "unintended":
                key = (d["class"][len("intended: "):], d["host"], d["workload"],
                       d["library"].get("device", d["library"].get("error", "")),
                       d["devplace"].get("device", d["devplace"].get("error", "")))
                kinds.setdefault(key, []).append(f"{p['transformers'] or '–'} + {p['accelerate']}")
    lines += ["## Intended differences", "",
              "Each kind once per host, workload and pair of answers, with the pairs it showed in "
              "(docs/SEMANTICS.md section 10 says why each is kept).", "",
              "| why | host | workload | library | devplace | pairs |", "|---|---|---|---|---|---|"]
    for (why, host, workload, lib, mine), where in kinds.items():
        shown = ", ".join(where) if len(where) <= 3 else f"{where[0]} … {where[-1]}"
        lines.append(f"| {why} | {host} | {workload} | `{lib}` | `{mine}` | {len(where)}: {shown} |")
    lines.append("")
    lines += coverage_doc(results.get("coverage"))
    lines += neuron_xla_doc(results.get("neuron_xla"))
    with open(DOC, "w") as f:
        f.write("\n".join(lines))


def coverage_doc(cov):
    """The coverage table: each rule's covering workload, the library's answer on each side and devplace's."""
    if not cov:
        return []

    def ans(x):  # a code span: the library's own backticks (error messages) would end it
        return f"`{x.get('device', x.get('error', ''))[:70].replace('`', chr(39))}`"

    rows = cov["rows"]
    tags = sorted({t for r in rows for t in r["tags"]}, key=vkey)
    n_acc = len([e for e in cov["executed"] if not e.startswith("tf")])
    n_tf = len({e.split("+")[0] for e in cov["executed"] if e.startswith("tf")})
    lines = [
        "## A covering workload per rule",
        "",
        "Written by `run.py --probes` (ran " + cov["ran"] + f"; executing the libraries took "
        f"{cov.get('oracle_seconds', '?')} s of wall time in {cov.get('oracle_processes', '?')} processes on the "
        f"shared 2-core machine, plus asking devplace; this run {cov['seconds']} s, kept answers reused): "
        "for every row of `server/placement/versions.cc`, a workload whose library answer changes across the row's "
        "boundary, executed at the last release tag before it and at its first tag (a `condition` row: two workloads "
        "at one tag; the chain's T- rules: condition off / on at the newest Accelerate). Accelerate's rows are "
        "executed alone at " + ("**every** Accelerate release tag (`--every_tag`)" if cov.get("every_tag") else
                                "every Accelerate release tag from the one before the boundary through the next minor "
                                "line") + ", patch releases included, and each of those tags is compared with devplace "
        "too; Transformers' rows with the same Accelerate release on both sides (the one current at "
        "the rule's first tag), so only Transformers changes. A rule is covered when the library's answer changes "
        "and devplace agrees on both sides (or differs only as an intended difference).",
        "",
        f"Executed: {len(cov['executed'])} release pairs ({n_acc} Accelerate tags alone: "
        f"{', '.join(sorted((e[3:] for e in cov['executed'] if not e.startswith('tf')), key=vkey))}; "
        f"{len(cov['executed']) - n_acc} Transformers + Accelerate pairs over {n_tf} Transformers tags: "
        f"{', '.join(e for e in cov['executed'] if e.startswith('tf'))}).",
        "",
    ]
    last = cov.get("last_execution")
    if last:
        lines += [f"The last run that executed the libraries itself (ran {last['ran']}, "
                  f"{'every Accelerate tag' if last.get('every_tag') else 'the tags around each boundary'}) executed "
                  f"{last['fresh_processes']} oracle processes over {last['release_pairs']} release pairs and took "
                  f"{last['seconds']} s ({last['seconds'] / 60:.0f} min) from start to end, asking devplace included.",
                  ""]
    lines += [
        "The boundaries themselves (`run.py --boundaries`) are checked against every release tag of both libraries "
        "in the supported range, patch releases included (42 Accelerate, 123 Transformers in the mirrors used; about "
        "2 minutes); these probes confirm each by executing the tags on both sides.",
        "",
        "| rule | host | workload (before / after) | torch_xla | before | library | devplace | after | library | "
        "devplace | tags executed (agree) | covered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        wl = r["before_workload"] if r["before_workload"] == r["after_workload"] else \
            f"{r['before_workload']} / {r['after_workload']}"
        per = r["per_tag"]
        agree = f"{len(per)} ({sum(x['agree'] for x in per)})" if per else "2"
        ok = "yes" if r["changes"] and not r["unintended"] else \
            ("no: the library's answer does not change" if not r["changes"] else f"no: unintended at {r['unintended']}")
        lines.append(f"| {r['rule']} | {r['host']} | `{wl}` | {'yes' if r['torch_xla'] else '–'} | {r['before']} | "
                     f"{ans(r['library_before'])} | {ans(r['devplace_before'])} | {r['after']} | "
                     f"{ans(r['library_after'])} | {ans(r['devplace_after'])} | {agree} | {ok} |")
    lines += ["", "Rows without a covering workload (the coverage check fails for each): " +
              (", ".join(cov["missing"]) or "none") + ".", ""]
    return lines


def neuron_xla_doc(nx):
    """T-XLA-NEURON against torch_xla's own Neuron set-up (neuron_xla.py)."""
    if not nx:
        return []
    lines = [
        "## Trainium on torch_xla: torch_xla's own Neuron set-up",
        "",
        f"Written by `run.py --xla_git=...` (`scripts/fidelity/neuron_xla.py`, ran {nx['ran']}, {nx['seconds']} s): "
        "`torch_xla/_internal/neuron.py` `configure_pjrt_environment()` (with `neuron_utils.remap_visible_cores`), "
        f"taken unmodified from each torch_xla release tag from 2.5 ({len(nx['tags'])} tags: {', '.join(nx['tags'])}; "
        f"{nx['distinct_sources']} distinct versions of the two files), executed over {nx['cases']} combinations of "
        "`NEURON_RT_VISIBLE_CORES` x `LOCAL_RANK` (torchrun, or a single process) x `LOCAL_WORLD_SIZE`; the "
        "process's NeuronCore is the first entry of the list it leaves. Stand-ins only for what the modules import: "
        "an empty `torch_xla` package and `_internal/__init__.py`, and `torch_xla.experimental.plugins.DevicePlugin`. "
        f"The tags disagree on {nx['tags_disagree']} combinations. devplace (`resolve` on the neuron-2x-trn1 fixture, "
        f"4 NeuronCores, the job with torch-neuronx and torch_xla) agrees on {nx['agree']} of {nx['compared']}: the "
        "same core (`placed`), torch_xla's ValueError as FAILED_PRECONDITION, a list its parser refuses as "
        "INVALID_ARGUMENT, a core the host lacks as the Neuron runtime's failure. The answers are "
        "`tests/placement/neuron_xla_remap.txt`, which ctest `NeuronOnXla.CoreIsTorchXlaExecutedRemap` holds "
        "devplace's resolver to without the mirror.",
        "",
    ]
    if nx["differences"]:
        lines += ["| NEURON_RT_VISIBLE_CORES | LOCAL_RANK | LOCAL_WORLD_SIZE | torch_xla | devplace |", "|---|---|---|---|---|"]
        for d in nx["differences"]:
            lines.append(f"| `{d['NEURON_RT_VISIBLE_CORES']}` | {d['LOCAL_RANK']} | {d['LOCAL_WORLD_SIZE']} | "
                         f"{d['torch_xla']} | `{json.dumps(d['devplace'])[:120]}` |")
        lines.append("")
    return lines


# ---------------------------------------------------------------- a covering workload per rule
# Each rule of versions.cc gets at least one executed workload whose library answer changes across the rule's
# boundary (`boundary`: the same workload at the last tag before the rule and at its first tag) or across the
# condition the rule tests (`condition`: two workloads at one tag). A probe: rule, host, the workload before and
# after (convention, devplace flags, local_rank, world_size, use_cpu, pipeline device, per-case environment),
# and whether the job has torch_xla (with USE_TORCH_XLA as the process has it).
XHOSTS = {h["id"]: h for h in HOSTS}
XHOSTS["tpu2"] = {"id": "tpu2", "fixtures": ["tpu-2x-v5e"], "count": {}, "tpu": True}
# torch-tpu (the native `tpu` device, no torch_xla) on the same TPU host.
XHOSTS["tpu2-torch_tpu"] = {"id": "tpu2-torch_tpu", "fixtures": ["tpu-2x-v5e"], "count": {"tpu": 2}, "tpu": True,
                            "packages": ["torch_tpu"]}
XHOSTS["mlu2+xpu2"] = {"id": "mlu2+xpu2", "fixtures": ["mlu-2x-mlu370", "xpu-2x-arc"], "count": {"mlu": 2, "xpu": 2},
                       "stock_xpu": True, "packages": ["torch_mlu"]}
PW = collections.namedtuple("PW", "id convention flags rank world use_cpu device env")
# Workloads only the probes run, beside the matrix's: from_pretrained(device_map="cuda") (its `device`).
PROBE_WORKLOADS = WORKLOADS + [
    W("fp-cuda", "from_pretrained", ["--workload=inference", "--convention=from_pretrained", "--device_map=cuda"], None,
      False, "cuda"),
]


def pw(wid, rank=None, world=2, use_cpu=False, device=None, env=None):
    base = {w.id: w for w in PROBE_WORKLOADS}[wid]
    flags = list(base.flags) + (["--use_cpu"] if use_cpu and "--use_cpu" not in base.flags else [])
    return PW(wid + ("+use_cpu" if use_cpu and not base.use_cpu else "") + "".join(f"+{k}={v}" for k, v in sorted((env or {}).items())) + (f"@{rank}/{world}" if rank is not None else ""),
              base.convention, flags, rank if rank is not None else base.rank, world, use_cpu or base.use_cpu,
              device if device is not None else base.device, env or {})


# acc: the Accelerate release on both sides of a Transformers probe (default: the one current at the rule's
# first tag).
P = collections.namedtuple("P", "rule host before after xla acc", defaults=(None,))
PROBES = [
    # Accelerate (executed alone: Accelerator().device / PartialState().device, get_max_memory)
    P("V-ACC-XLA-IMPORT", "cuda2", pw("acc"), pw("acc"), True),
    P("V-ACC-SET-DEVICE", "mps", pw("acc", rank=1, env={"ACCELERATE_TORCH_DEVICE": "cpu"}),
      pw("acc", rank=1, env={"ACCELERATE_TORCH_DEVICE": "cpu"}), False),
    P("V-ACC-XLA-CPU", "tpu2", pw("acc", use_cpu=True), pw("acc", use_cpu=True), True),
    P("V-ACC-XLA-CPU", "cuda2", pw("acc", env={"ACCELERATE_USE_CPU": "1"}), pw("acc", env={"ACCELERATE_USE_CPU": "1"}), True),
    P("V-ACC-XLA-CPU", "tpu2", pw("acc", env={"ACCELERATE_TORCH_DEVICE": "cpu"}),
      pw("acc", env={"ACCELERATE_TORCH_DEVICE": "cpu"}), True),
    P("V-ACC-XPU-STOCK", "xpu2-stock", pw("acc"), pw("acc"), False),
    P("V-ACC-MODULO", "cuda2", pw("acc", rank=3, world=4), pw("acc", rank=3, world=4), False),
    P("V-ACC-XPU-BARE", "xpu2-stock", pw("acc"), pw("acc"), False),
    P("V-ACC-XPU-MEM-IPEX", "xpu2-ipex", pw("auto"), pw("auto"), False),
    P("V-ACC-XPU-MEM-FIX", "xpu2-ipex", pw("auto"), pw("auto"), False),
    P("V-ACC-MULTICPU", "mps", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DD-0.29", "mlu2", pw("acc"), pw("acc"), False),
    P("V-ACC-DD-0.33", "musa2", pw("acc"), pw("acc"), False),
    P("V-ACC-DD-0.34", "cuda2+npu2", pw("acc"), pw("acc"), False),
    P("V-ACC-DD-1.5", "hpu2", pw("acc"), pw("acc"), False),
    P("V-ACC-DD-1.13", "neuron2", pw("acc"), pw("acc"), False),
    P("V-ACC-DIST-0.29", "mlu2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-0.33", "musa2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-0.34", "cuda2+npu2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-1.5", "cuda2+mlu2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-1.6", "mlu2+xpu2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-1.13", "neuron2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-DIST-1.14", "cuda2+mlu2", pw("acc", rank=1), pw("acc", rank=1), False),
    P("V-ACC-MEM-0.26", "npu2", pw("auto"), pw("auto"), False),
    P("V-ACC-MEM-0.29", "mlu2", pw("auto"), pw("auto"), False),
    P("V-ACC-MEM-0.33", "musa2", pw("auto"), pw("auto"), False),
    P("V-ACC-MEM-1.5", "hpu2", pw("auto"), pw("auto"), False),
    # Transformers (with the Accelerate release current at each tag)
    P("V-TF-USE-CPU", "cuda2", pw("ta"), pw("ta-cpu"), False),  # condition: use_cpu (no_cuda before 4.32)
    P("V-TF-XPU-STOCK", "xpu2-stock", pw("ta"), pw("ta"), False),
    P("V-TF-TA-MPS", "mps", pw("ta", env={"ACCELERATE_USE_CPU": "1"}), pw("ta", env={"ACCELERATE_USE_CPU": "1"}), False),
    P("V-TF-TA-ENV", "hpu2", pw("ta", env={"ACCELERATE_TORCH_DEVICE": "hpu"}),
      pw("ta", env={"ACCELERATE_TORCH_DEVICE": "hpu"}), False),
    P("V-TF-PIPE-DEFAULT", "cuda2", pw("pl"), pw("pl"), False),
    P("V-TF-TA-4.34", "xpu2-ipex", pw("ta"), pw("ta"), False),
    P("V-TF-TA-4.40", "mlu2", pw("ta"), pw("ta"), False),
    P("V-TF-TA-4.42", "mps", pw("ta"), pw("ta"), False),
    P("V-TF-TA-4.43", "mps", pw("ta"), pw("ta"), False),
    P("V-TF-TA-4.45", "musa2", pw("ta"), pw("ta"), False),
    P("V-TF-TA-4.50", "hpu2", pw("ta"), pw("ta"), False),
    P("V-TF-TA-5.4", "neuron2", pw("ta"), pw("ta"), False),
    P("V-TF-PIPE-4.37", "xpu2-ipex", pw("pl0"), pw("pl0"), False),
    P("V-TF-PIPE-4.38", "npu2", pw("pl0"), pw("pl0"), False),
    P("V-TF-PIPE-4.40", "mlu2", pw("pl0"), pw("pl0"), False),
    P("V-TF-PIPE-4.45", "musa2", pw("pl0"), pw("pl0"), False),
    P("V-TF-PIPE-4.50", "hpu2", pw("pl0"), pw("pl0"), False),
    # Device-choice rules of the chain (docs/SEMANTICS.md section 5), across the condition each tests, at the
    # newest Accelerate release: condition off (before) / on (after).
    P("T-XLA", "cuda2", pw("acc", env={"USE_TORCH_XLA": "0"}), pw("acc"), True),
    P("T-XLA", "tpu2", pw("acc", env={"USE_TORCH_XLA": "0"}), pw("acc"), True),
    P("T-XLA-NEURON", "neuron2", pw("acc", env={"USE_TORCH_XLA": "0"}), pw("acc"), True),
    P("T-CPU", "cuda2", pw("acc"), pw("acc", use_cpu=True), False),
    P("T-CPU", "cuda2", pw("acc"), pw("acc", env={"ACCELERATE_USE_CPU": "1"}), False),
    P("T-ENV", "cuda2", pw("acc"), pw("acc", env={"ACCELERATE_TORCH_DEVICE": "cuda:1"}), False),
    P("T-DIST", "cuda2", pw("acc"), pw("acc", rank=1), False),
    P("V-TF-XLA-ENV", "cuda2", pw("ta", env={"USE_TORCH_XLA": "0"}), pw("ta", env={"USE_TORCH_XLA": "0"}), True),
    P("V-TF-TA-4.32", "npu2", pw("ta"), pw("ta"), False),
    # from_pretrained(device_map="cuda") in rank 1 of 2: 4.x passes torch.device("cuda") on, 5.0 cuda:<LOCAL_RANK>.
    P("V-TF-CUDA-RANK", "cuda2", pw("fp-cuda", rank=1), pw("fp-cuda", rank=1), False),
    # torch-tpu installed on a TPU host: TrainingArguments' tpu:0 branch (5.9), after neuron:0, before cuda:0.
    P("V-TF-TPU", "tpu2-torch_tpu", pw("ta"), pw("ta"), False),
    P("V-TF-TA-TPU", "tpu2-torch_tpu", pw("ta"), pw("ta"), False),
    # Transformers 5 requires Accelerate >= 1.1.0: the last 4.x with Accelerate 1.0.1 works, 5.0.0 raises.
    P("V-TF-V5", "cuda2", pw("ta"), pw("ta"), False, acc="1.0.1"),
]
# Process-level variables (read once, at import): USE_TORCH_XLA.
PROCESS_ENV = ("USE_TORCH_XLA",)


def rule_rows():
    """{rule id: (library, since)} for every row of versions.cc."""
    return {rid: (lib, since) for rid, lib, since, _ in table_rows()}


def tag_before(rel, v):
    older = sorted((x for x in rel if vkey(x) < vkey(v)), key=vkey)
    return older[-1] if older else None


def acc_for(tfr, accr, tf):
    date = tfr[tf][2]
    cands = [v for v, (_, _, d) in accr.items() if d <= date and (vkey(tf) < (5,) or vkey(v) >= (1, 1))
             and vkey(v) >= SUPPORTED["accelerate"]]
    return max(cands, key=vkey) if cands else min((v for v in accr if vkey(v) >= (0, 25)), key=vkey)


def probe_devplace(a, p, w, tf, acc):
    host = XHOSTS[p.host]
    inv = inventory(a.devplace, host, a.work)
    site = job_site(host, a.work)
    runtime = backends(host) + (["xla"] if p.xla else [])
    cmd = [a.devplace, "resolve", f"--inventory={inv}", "--no_environment", "--json", *w.flags,
           "--runtime_backends=" + ",".join(runtime), f"--python_env={site}", f"--accelerate_version={acc}"]
    if tf:
        cmd.append(f"--transformers_version={tf}")
    if w.rank is not None:
        cmd += [f"--local_rank={w.rank}", f"--world_size={w.world}"]
    for k, v in w.env.items():
        cmd.append(f"--env={k}={v}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return {"device": json.loads(r.stdout)["device"]}


EXEC_SECONDS = []  # wall seconds of each oracle process (kept with its answers, so a rerun still counts them)
FRESH = []  # the oracle processes this run executed (not kept answers)


def probe_library(a, tfr, accr, tf, acc, items):
    """Executes [(probe, workload)] at one (Transformers, Accelerate) pair: one process per torch_xla/process env."""
    acc_dir = export(a.accelerate_git, accr[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
    tf_dir = (export(a.transformers_git, tfr[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}"))
              if tf else None)
    groups = collections.OrderedDict()
    for p, w in items:
        penv = {k: v for k, v in w.env.items() if k in PROCESS_ENV}
        ipex = bool(tf) and "intel_extension_for_pytorch" in XHOSTS[p.host].get("packages", [])
        # With torch_xla, Accelerate before 0.28 decides at import whether to import it (is_tpu_available(
        # check_device=False) is False on a CUDA host): one process per host, as a job has one host.
        groups.setdefault((p.xla, json.dumps(penv, sort_keys=True), ipex, p.host if p.xla else ""), []).append((p, w))
    got = {}
    for (xla, penv, _, _), its in groups.items():
        key = hashlib.sha256(json.dumps([HERE_DIGEST, tf, acc, xla, penv, [(p.host, w) for p, w in its]]).encode()).hexdigest()[:16]
        cache = os.path.join(a.work, f"probe-{key}.json")
        if os.path.exists(cache) and not a.fresh:
            with open(cache) as f:
                kept = json.load(f)
            EXEC_SECONDS.append(kept.pop("_seconds", 0))
            got.update({(p.host, w.id, p.xla): kept[f"{p.host}/{w.id}"] for p, w in its})
            continue
        started = __import__("time").time()
        cases = [{"id": f"{p.host}/{w.id}", "host": XHOSTS[p.host], "convention": w.convention, "local_rank": w.rank,
                  "world_size": w.world, "use_cpu": w.use_cpu, "device": w.device,
                  "env": {k: v for k, v in w.env.items() if k not in PROCESS_ENV}} for p, w in its]
        seen, uniq = set(), []
        for c in cases:
            if c["id"] not in seen:
                seen.add(c["id"])
                uniq.append(c)
        mine = run_oracle({"accelerate": acc_dir, "transformers": tf_dir, "cases": uniq, "accelerate_version": acc,
                           "hub_version": "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0", "transformers_version": tf,
                           "torch": TORCH, "torch_xla": xla, "process_env": json.loads(penv)})
        EXEC_SECONDS.append(round(__import__("time").time() - started, 1))
        FRESH.append(EXEC_SECONDS[-1])
        with open(cache, "w") as f:
            json.dump({**mine, "_seconds": EXEC_SECONDS[-1]}, f)
        got.update({(p.host, w.id, p.xla): mine[f"{p.host}/{w.id}"] for p, w in its})
    return got


def run_probes(a, tfr, accr):
    """Executes every probe at the tags around its rule's boundary, Accelerate's at every tag of the ranges
    they span, and writes the coverage table into results.json (rendered by --doc)."""
    import time
    t0 = time.time()
    rows = rule_rows()
    accs = sorted((v for v in accr if vkey(v) >= SUPPORTED["accelerate"]), key=vkey)
    plan = collections.defaultdict(list)  # (tf, acc) -> [(probe, workload)]
    sides = []  # (probe, (tf, acc) before, (tf, acc) after)
    for p in PROBES:
        lib, since = rows.get(p.rule, (None, None))
        if p.rule.startswith("T-"):  # a condition at the newest Accelerate release
            pair = (None, accs[-1])
            plan[pair] += [(p, p.before), (p, p.after)]
            sides.append((p, pair, pair, []))
            continue
        if lib == "accelerate":
            before = tag_before(accr, since)
            span = accs if a.every_tag else [v for v in accs if vkey(before) <= vkey(v) and
                                             vkey(v)[:2] <= (vkey(since)[0], vkey(since)[1] + 1)]
            for v in span:
                plan[(None, v)].append((p, p.before if vkey(v) < vkey(since) else p.after))
            sides.append((p, (None, before), (None, since), span))
        elif lib == "transformers":
            if p.before.id != p.after.id:  # a condition at the rule's first tag
                pair = (since, p.acc or acc_for(tfr, accr, since))
                plan[pair] += [(p, p.before), (p, p.after)]
                sides.append((p, pair, pair, [since]))
                continue
            # the same Accelerate on both sides (the one current at the rule's first tag): only Transformers changes
            before, acc = tag_before(tfr, since), p.acc or acc_for(tfr, accr, since)
            b, af = (before, acc), (since, acc)
            plan[b].append((p, p.before))
            plan[af].append((p, p.after))
            sides.append((p, b, af, [before, since]))
        else:
            sys.exit(f"probe for {p.rule}: no such row in versions.cc")
    if a.only:
        keep = set(a.only.split(","))
        plan = {k: v for k, v in plan.items() if f"tf{k[0]}" in keep or f"acc{k[1]}" in keep}
    answers = {}
    for (tf, acc), items in sorted(plan.items(), key=lambda kv: (kv[0][0] is not None, vkey(kv[0][0] or "0.0.0"),
                                                                   vkey(kv[0][1]))):
        t = time.time()
        lib = probe_library(a, tfr, accr, tf, acc, items)
        for p, w in items:
            answers[(tf, acc, p.host, w.id, p.xla)] = {"library": lib[(p.host, w.id, p.xla)],
                                                         "devplace": probe_devplace(a, p, w, tf, acc)}
        print(f"  executed Transformers {tf or '-'} + Accelerate {acc}: {len(items)} probes, {time.time() - t:.0f} s",
              flush=True)
    table, bad = [], 0
    for p, b, af, span in sides:
        rb = answers.get((b[0], b[1], p.host, p.before.id, p.xla))
        ra = answers.get((af[0], af[1], p.host, p.after.id, p.xla))
        if rb is None or ra is None:
            continue
        changes = rb["library"] != ra["library"]
        # every tag executed for an Accelerate probe: each agrees with devplace or is an intended difference
        per_tag = []
        for v in span:
            key = (None, v, p.host, (p.before if vkey(v) < vkey(af[1]) else p.after).id, p.xla)
            if b[0] is None and key in answers:
                x = answers[key]
                per_tag.append({"tag": v, "library": x["library"], "devplace": x["devplace"],
                                "agree": same(x["library"], x["devplace"])})
        unintended = []
        for side, r, pair in (("before", rb, b), ("after", ra, af)):
            if not same(r["library"], r["devplace"]):
                w = p.before if side == "before" else p.after
                cls = classify(pair[0], pair[1], XHOSTS[p.host], w, r["library"], r["devplace"])
                if cls == "unintended":
                    unintended.append(side)
        for x in per_tag:
            if not x["agree"]:
                w = p.before
                cls = classify(None, x["tag"], XHOSTS[p.host], w, x["library"], x["devplace"])
                x["class"] = cls
                if cls == "unintended":
                    unintended.append(x["tag"])
        ok = changes and not unintended
        bad += not ok
        table.append({"rule": p.rule, "host": p.host, "before_workload": p.before.id, "after_workload": p.after.id,
                      "torch_xla": p.xla, "before": f"{b[0] or '-'}+{b[1]}", "after": f"{af[0] or '-'}+{af[1]}",
                      "library_before": rb["library"], "library_after": ra["library"],
                      "devplace_before": rb["devplace"], "devplace_after": ra["devplace"],
                      "tags": span, "per_tag": per_tag, "changes": changes, "unintended": unintended})
    covered = {t["rule"] for t in table if t["changes"] and not t["unintended"]}
    missing = sorted(r for r, (lib, since) in rows.items()
                     if r not in covered and not (since == "0.25.0" and lib == "accelerate")
                     and not (since == "4.30.0" and lib == "transformers"))
    executed = sorted({f"{'tf' + k[0] + '+' if k[0] else ''}acc{k[1]}" for k in plan})
    results = load_results()
    # The last run that executed the libraries itself (a rerun on kept answers keeps its figures).
    last = (results.get("coverage") or {}).get("last_execution")
    if FRESH:
        last = {"ran": datetime.date.today().isoformat(), "seconds": round(time.time() - t0),
                "fresh_processes": len(FRESH), "release_pairs": len(plan), "every_tag": bool(a.every_tag)}
    results["coverage"] = {"ran": datetime.date.today().isoformat(), "seconds": round(time.time() - t0),
                           "last_execution": last,
                           "oracle_processes": len(EXEC_SECONDS), "oracle_seconds": round(sum(EXEC_SECONDS)),
                           "every_tag": bool(a.every_tag),
                           "executed": executed, "rows": table, "missing": missing}
    save_results(results)
    for t in table:
        print(f"{'ok ' if t['changes'] and not t['unintended'] else 'BAD'} {t['rule']:<20} {t['host']:<11} "
              f"{t['before_workload']:<34} {t['before']:>14}: {json.dumps(t['library_before'])} (devplace "
              f"{json.dumps(t['devplace_before'])}) -> {t['after']}: {json.dumps(t['library_after'])} (devplace "
              f"{json.dumps(t['devplace_after'])})" + (f"  unintended at {t['unintended']}" if t["unintended"] else ""))
    print(f"{len(executed)} release pairs executed in {time.time() - t0:.0f} s; {len(covered)} rules covered; "
          f"not covered: {', '.join(missing) or 'none'}")
    return 1 if missing or bad else 0


def run_neuron_xla(a):
    """T-XLA-NEURON against torch_xla's own code (neuron_xla.py): kept in results.json, exit 1 on a difference."""
    sys.path.insert(0, HERE)
    import neuron_xla
    os.makedirs(a.work, exist_ok=True)
    summary = neuron_xla.run(a.xla_git, a.devplace, a.work, sys.executable)
    results = load_results()
    results["neuron_xla"] = summary
    save_results(results)
    return 1 if summary["tags_disagree"] or summary["differences"] else 0


# ---------------------------------------------------------------- the version table's boundaries
ROW = re.compile(r"\{\s*[FK]::k\w+,\s*L::k(\w+),\s*\{(\d+),\s*(\d+),\s*(\d+)\}")


def table_rows():
    """(id, library, since, [commits]) for every row of versions.cc (FeatureRules and OrderRules)."""
    with open(VERSIONS_CC) as f:
        text = f.read()
    starts = [m.start() for m in ROW.finditer(text)] + [len(text)]
    rows = []
    for i, s in enumerate(starts[:-1]):
        chunk = text[s:starts[i + 1]]
        m = ROW.match(chunk)
        rid = re.search(r'"(V-[A-Z0-9.-]+)"', chunk)
        commits = re.search(r'/\*commits=\*/\s*"([0-9a-f ]*)"', chunk)
        if not rid or not commits:
            sys.exit(f"versions.cc: a row without its id or /*commits=*/ field near: {chunk[:120]!r}")
        rows.append((rid.group(1), m.group(1).lower(), ".".join(m.group(2, 3, 4)), commits.group(1).split()))
    return rows


def first_release(repo, commit, rel):
    """The releases that contain `commit` (`git tag --contains` for the tagged ones; a release that is
    a release commit rather than its tag, `git merge-base --is-ancestor`), and the first of them."""
    tags = set(git(repo, "tag", "--contains", commit).split())

    def contains(how, c):
        if how.startswith("tag "):
            return how.split()[1] in tags
        return subprocess.run(["git", "--git-dir", repo, "merge-base", "--is-ancestor", commit, c]).returncode == 0

    have = sorted((v for v, (c, how, _) in rel.items() if contains(how, c)), key=vkey)
    return (have[0] if have else None), have


def check_boundaries(a, tfr, accr):
    """A row's behaviour is in a release when the release contains any of the row's commits (a change that
    reached a patch release as a commit of its own on the release branch, and main through another, is two
    commits: V-ACC-XLA-CPU). The row's `since` must be the first such release, counting every release tag,
    patch releases included, and every later release must have one of them too."""
    repos = {"transformers": (a.transformers_git, tfr), "accelerate": (a.accelerate_git, accr)}
    lines, bad = [], 0
    for rid, lib, since, commits in table_rows():
        repo, rel = repos[lib]
        if not commits:
            print(f"{rid}: no commit recorded")
            bad += 1
            continue
        firsts, have_any = [], set()
        for c in commits:
            full = git(repo, "rev-parse", "--verify", "--quiet", c + "^{commit}").strip()
            if since in rel and rel[since][0] == full:  # the oldest row of an order: the release itself
                print(f"ok  {rid:<22} {lib:<12} {c} is the release commit of {since} ({rel[since][1]})")
                lines.append(f"{rid} {lib} {c} v{since}")
                firsts.append(since)
                have_any.update(v for v in rel if vkey(v) >= vkey(since))
                continue
            first, have = first_release(repo, full, rel)
            print(f"    {rid:<22} {lib:<12} {c} first release {first} ({rel[first][1] if first else '-'})")
            lines.append(f"{rid} {lib} {c} v{first}")
            if first:
                firsts.append(first)
            have_any.update(have)
        first = min(firsts, key=vkey) if firsts else None
        # Every later release must have the behaviour too (a patch release cut from main can hold a change
        # its successors on the release branch lack: that would not be one boundary).
        gaps = [v for v in rel if first and vkey(v) > vkey(first) and v not in have_any]
        ok = first == since and not gaps
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {rid:<22} {lib:<12} first release with one of its commits {first}; table "
              f"since {since}" + (f"; not in the later {', '.join(sorted(gaps, key=vkey))}" if gaps else ""))
    with open(BOUNDARIES, "w") as f:
        f.write("# (rule, library, commit, first release tag containing the commit) for every row of\n"
                "# server/placement/versions.cc, written by scripts/fidelity/run.py --boundaries from every release\n"
                "# tag of the libraries (patch releases included); a row's release is the first tag of any of its\n"
                "# commits. tests/placement/versions_test.cc holds the table to it.\n")
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} boundary commits, {bad} rows wrong; wrote {os.path.relpath(BOUNDARIES, ROOT)}")
    return 1 if bad else 0


CROSSCHECK_FILES = ["src/transformers/training_args.py", "src/transformers/pipelines/base.py",
                    "src/transformers/utils/import_utils.py"]


def crosscheck(repo, other, rel):
    """Each matrix release of Transformers against an independent fork with main's history (no tags):
    the main commit its release branch was cut from must be in the fork, and the files that decide a
    device must be the same there unless a commit on the release branch changed them."""
    bad = 0
    for v in last_patches(rel, "transformers"):
        commit = rel[v][0]
        cut, n = None, 0
        for c in git(repo, "rev-list", "--first-parent", "-n", "400", commit).split():
            if subprocess.run(["git", "--git-dir", other, "cat-file", "-e", c + "^{commit}"],
                              capture_output=True).returncode == 0:
                cut = c
                break
            n += 1
        if cut is None:
            print(f"{v}: no ancestor within 400 commits is in {other}")
            bad += 1
            continue
        changed = set(git(repo, "diff", "--name-only", cut, commit, "--", *CROSSCHECK_FILES).split())
        same = []
        for f in CROSSCHECK_FILES:
            a = git(repo, "rev-parse", f"{commit}:{f}").strip()
            b = subprocess.run(["git", "--git-dir", other, "rev-parse", f"{cut}:{f}"], capture_output=True,
                               text=True).stdout.strip()
            same.append(f"{os.path.basename(f)} {'same' if a == b else 'changed on the branch' if f in changed else 'DIFFERS'}")
            bad += a != b and f not in changed
        print(f"{v} ({rel[v][1]}): {n} commits on its release branch, cut from {cut[:10]} (in the fork); "
              + ", ".join(same))
    return 1 if bad else 0


def newest_known():
    with open(VERSIONS_CC) as f:
        m = re.search(r"Version NewestVersion\(Library lib\) \{ return lib == Library::kTransformers \? "
                      r"Version\{(\d+), (\d+), (\d+)\} : Version\{(\d+), (\d+), (\d+)\}", f.read())
    return {"transformers": m.group(1, 2, 3), "accelerate": m.group(4, 5, 6)}


def list_newer(tfr, accr):
    newest = newest_known()
    count = 0
    for lib, rel in (("transformers", tfr), ("accelerate", accr)):
        known = tuple(int(x) for x in newest[lib])
        newer = sorted((v for v in rel if vkey(v) > known), key=vkey)
        print(f"{lib}: the table knows up to {'.'.join(newest[lib])}; newer release tags in the mirror: "
              f"{', '.join(f'{v} ({datetime.date.fromtimestamp(rel[v][2])})' for v in newer) or 'none'}")
        count += len(newer)
    return 1 if count else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accelerate_git", required=True, help="git directory of an Accelerate mirror with its release tags")
    ap.add_argument("--transformers_git", required=True, help="git directory of a Transformers mirror with its release tags")
    ap.add_argument("--devplace", default=os.path.join(ROOT, "build/dev/client/devplace"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "devplace-fidelity"), help="checkout cache")
    ap.add_argument("--pairs", default="", help="comma list of TF:ACC release pairs to run instead of the matrix, "
                    "e.g. 4.46.3:1.1.1,:1.14.0 (empty TF: Accelerate alone)")
    ap.add_argument("--only", default="", help="run only the matrix pairs whose Transformers (tf4.46.3) or, alone, "
                    "Accelerate (acc0.30.1) release is listed (comma list)")
    ap.add_argument("--list", action="store_true", help="print the matrix's pairs and their tags, run nothing")
    ap.add_argument("--fresh", action="store_true", help="execute the libraries again instead of reusing kept answers")
    ap.add_argument("--doc", action="store_true", help="render docs/FIDELITY.md from results.json (after any run)")
    ap.add_argument("--boundaries", action="store_true", help="check versions.cc's boundaries against the tags and "
                    "write tests/placement/version_boundaries.txt")
    ap.add_argument("--probes", action="store_true", help="execute each rule's covering workload at the tags "
                    "around its boundary (Accelerate: every tag of the range) and check coverage")
    ap.add_argument("--every_tag", action="store_true", help="--probes: every Accelerate probe at every Accelerate "
                    "release tag (default: the tags from the one before each boundary through the next minor)")
    ap.add_argument("--newer", action="store_true", help="list release tags newer than the table knows")
    ap.add_argument("--xla_git", default="", help="git directory of a pytorch/xla mirror with its release tags: execute "
                    "torch_xla's Neuron set-up at every tag from 2.5 against devplace (neuron_xla.py; with --probes "
                    "or alone) and write tests/placement/neuron_xla_remap.txt")
    ap.add_argument("--crosscheck", default="", help="git directory of an independent Transformers fork with main's "
                    "history: check each matrix release's branch point and device files against it")
    a = ap.parse_args()
    tfr, accr = releases(a.transformers_git, "transformers"), releases(a.accelerate_git, "accelerate")
    if a.xla_git and not a.probes:
        rc = run_neuron_xla(a)
        if a.doc:
            render_doc(load_results())
        return rc
    if a.boundaries:
        return check_boundaries(a, tfr, accr)
    if a.newer:
        return list_newer(tfr, accr)
    if a.probes:
        os.makedirs(a.work, exist_ok=True)
        rc = run_probes(a, tfr, accr)
        if a.xla_git:
            rc = run_neuron_xla(a) or rc
        if a.doc:
            render_doc(load_results())
        return rc
    if a.crosscheck:
        return crosscheck(a.transformers_git, a.crosscheck, tfr)
    os.makedirs(a.work, exist_ok=True)
    pairs = []
    for tf in last_patches(tfr, "transformers"):
        pairs.append((tf, acc_for(tfr, accr, tf)))
    pairs += [(None, v) for v in last_patches(accr, "accelerate")]
    if a.pairs:
        pairs = []
        for item in a.pairs.split(","):
            tf, acc = item.split(":")
            if (tf and tf not in tfr) or acc not in accr:
                ap.error(f"--pairs: {item}: no such release tag in the mirrors")
            pairs.append((tf or None, acc))
    if a.only:
        keep = set(a.only.split(","))
        pairs = [p for p in pairs if f"tf{p[0]}" in keep or (p[0] is None and f"acc{p[1]}" in keep)]
    for tf, acc in pairs:
        print(f"  Transformers {tf or '-'}" + (f" ({tfr[tf][1]} = {tfr[tf][0][:10]})" if tf else "") +
              f" + Accelerate {acc} ({accr[acc][1]} = {accr[acc][0][:10]})")
    if a.list:
        return 0
    results = run_pairs(a, tfr, accr, pairs) if pairs else load_results()
    if a.doc:
        render_doc(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
