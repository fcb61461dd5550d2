"""--landing (README.md "Where the modules land"): for device_map="auto", "balanced", "balanced_low_0" and
"sequential", where the library's own device-map code puts the modules of a model, against what devplace's answer
implies, with simulated free/total memory behind each backend's memory API.

A scenario: a simulated host (LANDING_HOSTS: one per backend get_max_memory reads, Intel GPUs with and without
Intel Extension for PyTorch at several torch releases), a keyword, each device's free memory (of 16 GiB), the host's
available RAM, a model of `layers` Linear(2048, 2048) float32 layers (16 MiB each, meta weights: nothing is
allocated), and whether the job tells devplace the model's size (model_size_bytes). Both sides see the same memory:
the oracle's stand-in torch answers torch.<type>.mem_get_info / max_memory_allocated and psutil.virtual_memory with
it (only what torch, the vendor package or psutil would return), devplace's fixture inventory carries it
(fidelity_scenario.h "memory").

Three comparisons per scenario (oracle.py _landing says what is executed):
- `first`: the device of the library's first module against devplace's `device`;
- `landing`: the set of devices that receive modules (cpu and disk spill included) with no max_memory, against the
  same library code given devplace's `max_memory` as the job's max_memory (only where devplace gives budgets);
- `budgets`: where devplace gives none, a warning says so and the job lets the library measure: nothing to compare.
"""
import collections
import datetime
import json
import os
import random
import subprocess
import time

from common import ROOT, export, load_results, save_results, vkey
from compare import DISTRIBUTIONS, run_oracle

BATCH = os.path.join(ROOT, "build/dev/tests/placement/fidelity_batch_resolve")
GIB, MIB = 1 << 30, 1 << 20
WIDTH = 2048
LAYER_BYTES = (WIDTH * WIDTH + WIDTH) * 4
# id, fixtures, device counts as the fixture has them, packages, torch release, stock torch.xpu, mps.
LANDING_HOSTS = {h["id"]: h for h in [
    {"id": "cpu", "fixtures": ["cpu-only"], "count": {}},
    {"id": "mps", "fixtures": ["cpu-only"], "count": {}, "mps": True},
    {"id": "cuda2", "fixtures": ["nvidia-2x-h100"], "count": {"cuda": 2}},
    {"id": "npu2", "fixtures": ["npu-2x-910b"], "count": {"npu": 2}, "packages": ["torch_npu"]},
    {"id": "mlu2", "fixtures": ["mlu-2x-mlu370"], "count": {"mlu": 2}, "packages": ["torch_mlu"]},
    {"id": "musa2", "fixtures": ["musa-2x-s4000"], "count": {"musa": 2}, "packages": ["torch_musa"]},
    {"id": "hpu2", "fixtures": ["hpu-2x-gaudi2"], "count": {"hpu": 2}, "packages": ["habana_frameworks"]},
    {"id": "cuda2+npu2", "fixtures": ["nvidia-2x-h100", "npu-2x-910b"], "count": {"cuda": 2, "npu": 2},
     "packages": ["torch_npu"]},
    # xpu-2x-arc: 3 Intel GPUs (an integrated one first), as the job counts them
    {"id": "xpu3-stock-2.8", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 3}, "stock_xpu": True, "torch": "2.8.0"},
    {"id": "xpu3-stock-2.5", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 3}, "stock_xpu": True, "torch": "2.5.1"},
    {"id": "xpu3-ipex-2.8", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 3}, "torch": "2.8.0",
     "packages": ["intel_extension_for_pytorch"]},
    {"id": "xpu3-ipex-2.4", "fixtures": ["xpu-2x-arc"], "count": {"xpu": 3}, "torch": "2.4.1",
     "packages": ["intel_extension_for_pytorch"]},
]}
ACC_ALONE_AS = "4.57.6"  # the last Transformers whose from_pretrained calls Accelerate's get_balanced_memory
KEYWORDS = ("auto", "balanced", "balanced_low_0", "sequential")
FREE = [0, 256 * MIB, 1 * GIB, 4 * GIB, 15 * GIB]  # of 16 GiB: a full device, little, some, most
RAM = [512 * MIB, 2 * GIB, 64 * GIB]  # available, of 128 GiB
LAYERS = [1, 4, 16, 64, 256, 1024]  # 16 MiB to 16 GiB


def sample(rng):
    host = LANDING_HOSTS[rng.choice(sorted(LANDING_HOSTS))]
    memory = {t: [[rng.choice(FREE), 16 * GIB] for _ in range(n)] for t, n in host["count"].items()}
    memory["ram"] = [rng.choice(RAM), 128 * GIB]
    return {"host": host["id"], "keyword": rng.choice(KEYWORDS), "memory": memory, "layers": rng.choice(LAYERS),
            "tell_size": rng.random() < 0.5}


def torch_of(host):
    return host.get("torch", "2.8.0")


def request(s, tf, acc):
    """The ResolveDeviceRequest devplace resolve --python_env sends for `s` (from_pretrained with the keyword)."""
    host = LANDING_HOSTS[s["host"]]
    r = {"workload": "WORKLOAD_INFERENCE", "convention": "CONVENTION_FROM_PRETRAINED", "deviceMap": s["keyword"],
         "runtimeBackends": sorted(host["count"]) + (["mps"] if host.get("mps") else []) + ["cpu"],
         "accelerateVersion": acc,
         "jobEnvironment": {"source": "fidelity landing: the simulated job's packages",
                            "packages": [{"name": "torch", "version": torch_of(host)}] +
                                        [{"name": DISTRIBUTIONS[p], "version": torch_of(host)}
                                         for p in host.get("packages", [])]}}
    # Accelerate alone: Accelerate's own get_balanced_memory, as from_pretrained of a 4.x Transformers calls it
    r["transformersVersion"] = tf or ACC_ALONE_AS
    if s["tell_size"]:
        r["modelSizeBytes"] = str(s["layers"] * LAYER_BYTES)
    return r


def devplace_side(batch, tf, acc, scenarios):
    host = lambda s: LANDING_HOSTS[s["host"]]  # noqa: E731
    lines = "".join(json.dumps({"id": sid, "fixtures": host(s)["fixtures"], "mps": bool(host(s).get("mps")),
                                "memory": s["memory"], "request": request(s, tf, acc)}) + "\n"
                    for sid, s in scenarios.items())
    r = subprocess.run(["nice", "-n", "10", batch, "--warnings"], input=lines, capture_output=True, text=True,
                       check=True)
    got = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        sid = d.pop("id")
        if "harness: " in d.get("error", ""):
            raise SystemExit(f"fidelity_batch_resolve: {sid}: {d['error']}")
        got[sid] = d
    return got


def library_side(tf, acc, tf_dir, acc_dir, scenarios, dp, stats):
    """{case id: answer}: "<sid>" the library alone, "<sid>/dp" the library given devplace's max_memory. One oracle
    process per torch release and Intel Extension for PyTorch (Transformers reads it once, at import)."""
    groups = collections.defaultdict(list)
    for sid, s in scenarios.items():
        host = LANDING_HOSTS[s["host"]]
        sim = {**host, "id": f"{host['id']}/{sid}", "memory": s["memory"]}  # a host of its own: its memory
        base = {"convention": "landing", "device": s["keyword"], "model": {"layers": s["layers"], "width": WIDTH},
                "host": sim}
        key = (torch_of(host), "intel_extension_for_pytorch" in host.get("packages", []))
        groups[key].append({"id": sid, **base})
        budgets = dp[sid].get("maxMemory")
        if budgets:
            typ = dp[sid]["device"].split(":")[0]
            groups[key].append({"id": f"{sid}/dp", **base, "max_memory": budgets,
                                "index_type": typ if typ not in ("cpu", "mps") else (sorted(host["count"]) or
                                                                                      ["cuda"])[0]})
    got = {}
    for (torch, _), cases in sorted(groups.items()):
        t0 = time.time()
        got.update(run_oracle({"accelerate": acc_dir, "transformers": tf_dir, "cases": cases, "accelerate_version": acc,
                               "transformers_version": tf, "torch": torch,
                               "hub_version": "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0"}))
        stats["oracle_processes"] += 1
        stats["oracle_seconds"] += time.time() - t0
    return got


def devices(answer):
    return answer["device"].split("+") if "device" in answer else None


def compare(s, lib, lib_dp, dp):
    """[(comparison, verdict)]: verdict "" agrees, else the class of the difference."""
    out = []
    mine = lib.get("device", "").split("+")[0] if "device" in lib else None
    theirs = dp.get("device")
    if mine is None or theirs is None:
        out.append(("first", "" if mine is None and theirs is None else
                    f"first: library {lib.get('error', mine)[:80]} / devplace {dp.get('error', theirs)[:80]}"))
    else:
        out.append(("first", "" if mine == theirs else f"first: library {mine} / devplace {theirs}"))
    if lib_dp is not None:
        a, b = devices(lib), devices(lib_dp)
        same = a is not None and b is not None and set(a) == set(b)
        out.append(("landing", "" if same else
                    f"landing: library {'+'.join(a) if a else lib.get('error')} / with devplace's max_memory "
                    f"{'+'.join(b) if b else lib_dp.get('error')}"))
    return out


# Intended differences (docs/FIDELITY.md "Where the modules land" says why each is kept): (what, test) -> why.
INTENDED = {
    "low0-size": "intended: balanced_low_0 with no model_size_bytes: devplace answers the device after device 0, "
                 "the library puts on device 0 what the others cannot hold (I-AUTO-FIRST)",
    "low0-excess": "intended: balanced_low_0 with a model_size_bytes just above what the other devices can hold: "
                   "device 0's share, the excess, is smaller than the first layer, so the library skips device 0; "
                   "devplace does not know the layers and answers device 0 (I-AUTO-FIRST)",
    "torch-min": "intended: the job's Transformers release cannot import its PyTorch side with the job's torch (below "
                 "its minimum, or below 2.5 for 4.52.0 and 4.52.2): the job fails at import; devplace answers beside "
                 "a warning naming the cause and the fix, a hazard strict refuses (V-TF-TORCH, V-TF-TP-IMPORT)",
}
TORCH_MIN_WARNINGS = ("(V-TF-TORCH-", "(V-TF-TP-IMPORT")


def torch_min_warning(w):
    return any(rule in w for rule in TORCH_MIN_WARNINGS)


def torch_min_warned(dp):
    return any(torch_min_warning(w) for w in dp.get("warnings", []))


def generalize(why, s, lib, dp):
    """A difference's class: an intended one, or the host, the keyword and the answers."""
    first = lib.get("device", "").split("+")[0]
    if "error" in lib and "device" in dp and torch_min_warned(dp):
        return INTENDED["torch-min"]
    if why.startswith("first:") and s["keyword"] == "balanced_low_0" and first.endswith(":0") and not s["tell_size"]:
        return INTENDED["low0-size"]
    if (why.startswith("first:") and s["keyword"] == "balanced_low_0" and s["tell_size"]
            and dp.get("device", "").endswith(":0")):
        typ = dp["device"].split(":")[0]
        excess = s["layers"] * LAYER_BYTES - sum(free for free, _ in s["memory"].get(typ, [])[1:])
        if 0 < excess < LAYER_BYTES:
            return INTENDED["low0-excess"]
    return f"{s['host']} {s['keyword']}: " + why


def run_landing(a, tfr, accr, pairs):
    """--landing over `pairs`: a.scenarios scenarios each (seed a.seed); exit 1 when a comparison differs."""
    batch = a.batch or BATCH
    rc = 0
    for tf, acc in pairs:
        t0 = time.time()
        stats = collections.Counter(oracle_processes=0, oracle_seconds=0.0)
        acc_dir = export(a.accelerate_git, accr[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
        tf_dir = (export(a.transformers_git, tfr[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}"))
                  if tf else None)
        scenarios = {f"l{i}": sample(random.Random(f"landing/{a.seed}/{tf}/{acc}/{i}")) for i in range(a.scenarios)}
        dp = devplace_side(batch, tf, acc, scenarios)
        lib = library_side(tf, acc, tf_dir, acc_dir, scenarios, dp, stats)
        counts = collections.Counter()
        classes = collections.Counter()
        examples = {}
        for sid, s in scenarios.items():
            for what, why in compare(s, lib[sid], lib.get(f"{sid}/dp"), dp[sid]):
                counts[what] += 1
                counts[f"{what} agree"] += not why
                if why:
                    k = generalize(why, s, lib[sid], dp[sid])
                    classes[k] += 1
                    mine = {f: v for f, v in dp[sid].items() if f != "warnings"}
                    if torch_min_warned(dp[sid]):
                        mine["warnings"] = [w for w in dp[sid]["warnings"] if torch_min_warning(w)]
                    examples.setdefault(k, {"scenario": s, "library": lib[sid], "library_with_devplace":
                                            lib.get(f"{sid}/dp"), "devplace": mine})
        counts["no budgets"] = sum(1 for sid in scenarios if "maxMemory" not in dp[sid] and "device" in dp[sid])
        seconds = round(time.time() - t0, 1)
        key = f"{tf or '-'}+{acc}"
        results = load_results()
        results.setdefault("landing", {})[key] = {
            "transformers": tf, "accelerate": acc, "seed": a.seed, "scenarios": a.scenarios,
            "ran": datetime.date.today().isoformat(), "seconds": seconds, "oracle_processes": stats["oracle_processes"],
            "counts": dict(sorted(counts.items())), "differences": dict(sorted(classes.items())),
            "examples": examples}
        save_results(results)
        print(f"landing {key}: {a.scenarios} scenarios in {seconds} s: " +
              ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), flush=True)
        for k, n in sorted(classes.items()):
            print(f"    {n} x {k}", flush=True)
        rc = rc or int(any(not k.startswith("intended") for k in classes))
    return rc


def landing_doc(runs):
    """docs/FIDELITY.md's section for --landing: what is compared, per pair the counts and the differences by class."""
    lines = ["## Where the modules land (`--landing`)", "",
             "Opt-in, like the rest. For `device_map=\"auto\"`, `\"balanced\"`, `\"balanced_low_0\"` and `\"sequential\"`, "
             "`run.py --landing` (scripts/fidelity/landing.py) executes the library's own device-map code at the tag: "
             "Transformers' `_get_device_map` where the release has it (4.50 on), else the statements from_pretrained "
             "runs for a string `device_map` (Accelerate's `get_balanced_memory`, with `low_zero` for `balanced_low_0`, "
             "unless `sequential`, then `infer_auto_device_map`), which Accelerate alone runs in "
             "`load_checkpoint_and_dispatch`. The model is small and built from a config (n `Linear(2048, 2048)` "
             "layers of 16 MiB, 1 to 1024, meta weights), not loaded by `from_pretrained` itself: that reads a "
             "checkpoint through safetensors and huggingface_hub, which the runner replaces with stand-ins. Each "
             "scenario draws a host (CUDA, NPU, MLU, MUSA, HPU, MPS, cpu, CUDA + NPU, and Intel GPUs with stock torch "
             "2.8 or 2.5 and with Intel Extension for PyTorch on torch 2.8 or 2.4), each device's free memory (0, "
             "256 MiB, 1, 4 or 15 of 16 GiB), the available RAM and whether the job tells devplace the model's size. "
             "The simulated memory is what torch, the vendor package or psutil returns (`torch.<type>.mem_get_info`, "
             "`max_memory_allocated`, IPEX's `xpu.mem_get_info`, `psutil.virtual_memory`; `torch.xpu.mem_get_info` "
             "only from torch 2.6), never the library's code; devplace's fixture inventory carries the same figures.",
             "Compared per scenario: `first`, the device of the library's first module against devplace's `device`; "
             "`landing`, the set of devices that receive modules (cpu and disk spill included) with no `max_memory` "
             "against the same library code given devplace's `max_memory` as the job's own (where devplace gives "
             "budgets).", "",
             "    /usr/bin/python3 scripts/fidelity/run.py --accelerate_git=$A --transformers_git=$T --landing \\",
             "        --seed=1 --scenarios=300 --pairs=4.36.2:0.25.0,4.46.3:1.1.1,:1.2.1,:1.3.0 --doc", "",
             "Accelerate alone is asked of devplace as from_pretrained of Transformers 4.57.6, the last whose "
             "from_pretrained calls Accelerate's `get_balanced_memory`. What the first runs found and fixed (rules "
             "I-MEM, I-AUTO-FIRST, V-ACC-BALANCED-XPU, V-TF-BALANCED in SEMANTICS.md): devplace's `balanced` budgets "
             "shared `model_size_bytes` out without the layer sizes, lower than the library's own, so a job passing "
             "them got modules pushed to the next device, cpu or disk (now each device's free memory, which "
             "from_pretrained balances itself); `device` named device 0 where its budget was 0 (now the first device "
             "with a budget, cpu when none has one), and device 0 for `balanced_low_0` (now the next one, where the "
             "release's `get_balanced_memory` counts the row's devices: CUDA, every row from Transformers 5.0). "
             "The Intel GPU budgets before Accelerate 1.3 (I-AUTO-XPU: `max_memory_allocated`, IPEX's 1.0.x version "
             "check) already gave the library's landing, cpu. Later runs found what the library sums for "
             "`balanced_low_0`'s \"others\" (the budgets of indices 1 to num_devices - 1, each but the last device "
             "with a budget capped at the model's share first: devplace had summed every other device's free memory, "
             "so it answered the next device where the library keeps the first module on device 0), that a job "
             "whose torch its Transformers release cannot import with (V-TF-TORCH, V-TF-TP-IMPORT: at 5.15.0, the "
             "Intel GPU host's torch 2.4) fails in the library while devplace answers, now beside a warning and a "
             "hazard, and that from Transformers 5.0 from_pretrained keeps 10 % of the cpu's budget when the job "
             "passes no `max_memory` (V-TF-CPU-90: at 5.12.1 a job passing the whole available RAM as devplace's "
             "`cpu` budget kept modules off the disk the library offloads; now 90 %).",
             "Intended: " + "; ".join(v[len("intended: "):] for v in INTENDED.values()) + ". Not sampled: "
             "budgets above 0 but below one layer (the library skips such a device; devplace does not know the "
             "layers), quantized models and `no_split_module_classes`, tied weights.", ""]
    return lines + (landing_table(runs) if runs else ["Not run yet.", ""])


def landing_table(runs):
    """Per pair: the counts; then every class of difference with the pairs it showed in."""
    def pair(r):
        return f"{r['transformers'] or '–'} + {r['accelerate']}"

    def row(r):
        c, d = r["counts"], r["differences"]
        intended = sum(n for k, n in d.items() if k.startswith("intended"))
        return (f"| {r['transformers'] or '–'} | {r['accelerate']} | {r['seed']} | {r['scenarios']} | "
                f"{r['seconds']:.0f} s | {r['oracle_processes']} | {c.get('first agree', 0)} of {c.get('first', 0)} "
                f"| {c.get('landing agree', 0)} of {c.get('landing', 0)} | {intended} | {sum(d.values()) - intended} |")

    by_class = collections.defaultdict(list)
    for r in runs.values():
        for k, n in sorted(r["differences"].items()):
            by_class[k].append(f"{pair(r)}: {n}")
    return (["| Transformers | Accelerate | seed | scenarios | time | oracle processes | first: agree | landing: "
             "agree | intended | unintended |", "|---|---|---|---|---|---|---|---|---|---|"] +
            [row(r) for r in runs.values()] + ["", "Differences by class (pair: count):", ""] +
            ([f"- {k}: {', '.join(v)}" for k, v in sorted(by_class.items())] or ["- none"]) + [""])
