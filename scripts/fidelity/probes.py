"""--probes (README.md "A covering workload per rule"): for every row of server/placement/versions.cc and
the chain's device-choice rules, a workload whose library answer changes across the row's boundary or the
rule's condition (PROBES), executed on both sides of it (Accelerate's rows at every tag of the range they
span) and asked of devplace; the coverage table goes into results.json (doc.py renders it), exit 1 when a
row has no covering workload or a probe disagrees in a way that is not an intended difference.
"""
import collections
import datetime
import hashlib
import json
import os
import sys
import time

from common import SUPPORTED, acc_for, export, load_results, save_results, table_rows, tag_before, vkey
from compare import HERE_DIGEST, HOSTS, TORCH, W, WORKLOADS, ask_devplace, classify, run_oracle, same
import landing

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
# The probes' hosts: XHOSTS (which search.py samples) and the CUDA host with a torch release below a Transformers
# release's minimum (V-TF-TORCH-*: the job's Transformers cannot import its PyTorch side; the job's packages tell
# devplace the release).
PROBE_HOSTS = {**XHOSTS, **{f"cuda2-torch{v}": {**XHOSTS["cuda2"], "id": f"cuda2-torch{v}", "torch": v}
                            for v in ("2.0.1", "2.1.2", "2.3.1", "2.4.1")}}
PW = collections.namedtuple("PW", "id convention flags rank world use_cpu device env")
# A landing probe (landing.py's scenario on one of its LANDING_HOSTS): `compare` "first", the device of the library's
# first module against devplace's `device`; "landing", the devices the library fills with no max_memory against
# those it fills given devplace's max_memory.
LW = collections.namedtuple("LW", "id compare keyword memory layers tell_size convention rank env",
                            defaults=("landing", None, {}))
# Workloads only the probes run, beside the matrix's: from_pretrained(device_map="cuda") (its `device`).
PROBE_WORKLOADS = WORKLOADS + [
    W("fp-cuda", "from_pretrained", ["--workload=inference", "--convention=from_pretrained", "--device_map=cuda"], None,
      False, "cuda"),
    # device_map="auto"'s budget keys: the first key of get_max_memory() against the first of devplace's max_memory
    # (the matrix's `auto` compares where the first module lands).
    W("auto-keys", "max_memory_keys", ["--workload=inference", "--convention=from_pretrained", "--device_map=auto"],
      None, False, None),
    # pipeline(device="xpu:1"): from 4.37 refused unless is_torch_xpu_available (IPEX before 4.42).
    W("pl-xpu1", "pipeline", ["--workload=inference", "--convention=pipeline", "--device_map=xpu:1"], None, False,
      "xpu:1"),
]


def pw(wid, rank=None, world=2, use_cpu=False, device=None, env=None, strict=False):
    """A probe workload from `wid`; `strict`: devplace asked with --strict, so a hazard is its refusal (a job that
    fails in the library against devplace's answer beside a warning and a hazard: both sides fail)."""
    base = {w.id: w for w in PROBE_WORKLOADS}[wid]
    flags = (list(base.flags) + (["--use_cpu"] if use_cpu and "--use_cpu" not in base.flags else []) +
             (["--strict"] if strict else []))
    return PW(wid + ("+use_cpu" if use_cpu and not base.use_cpu else "") + ("+strict" if strict else "") + "".join(f"+{k}={v}" for k, v in sorted((env or {}).items())) + (f"@{rank}/{world}" if rank is not None else ""),
              base.convention, flags, rank if rank is not None else base.rank, world, use_cpu or base.use_cpu,
              device if device is not None else base.device, env or {})


# The landing probes' workloads (the same on both sides of their boundaries).
B0_FIRST = LW("b0-first", "first", "balanced_low_0", {"npu": [[15 << 30, 16 << 30]] * 2, "ram": [64 << 30, 128 << 30]},
              4, True)
CPU90 = LW("cpu90", "landing", "sequential", {"ram": [2 << 30, 128 << 30]}, 120, False)

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
    # single-process torchrun: 0.29.0-0.29.1 give default_device (`cuda`; `mps` on an Apple host).
    P("V-ACC-WORLD-1", "cuda2", pw("acc", rank=0, world=1), pw("acc", rank=0, world=1), False),
    P("V-ACC-WORLD-1", "mps", pw("acc", rank=0, world=1), pw("acc", rank=0, world=1), False),
    # USE_TORCH_XLA=maybe: ignored before 0.28, import accelerate's ValueError from 0.28 (a process of its own).
    P("V-ACC-XLA-IMPORT", "tpu2", pw("acc", env={"USE_TORCH_XLA": "maybe"}), pw("acc", env={"USE_TORCH_XLA": "maybe"}),
      True),
    # 1.0.x with IPEX leaves every XPU out of the budgets (before: a key with max_memory_allocated's budget); the
    # modules land on cpu on both sides, so the budget keys are compared.
    P("V-ACC-XPU-MEM-IPEX", "xpu2-ipex", pw("auto-keys"), pw("auto-keys"), False),
    P("V-ACC-XPU-MEM-FIX", "xpu2-ipex", pw("auto"), pw("auto"), False),
    P("V-ACC-XPU-MEM-STOCK", "xpu2-stock", pw("auto"), pw("auto"), False),
    P("V-ACC-MULTICPU", "mps", pw("acc", rank=1), pw("acc", rank=1), False),
    # single-process torchrun on an Apple host with ACCELERATE_TORCH_DEVICE=cpu: a single process (type NO) keeps
    # the variable before 0.28 (cpu); from 0.28 LOCAL_RANK alone makes it MULTI_CPU, which took mps until 0.29.
    P("V-ACC-LOCAL-RANK", "mps", pw("acc", rank=0, world=1, env={"ACCELERATE_TORCH_DEVICE": "cpu"}),
      pw("acc", rank=0, world=1, env={"ACCELERATE_TORCH_DEVICE": "cpu"}), False),
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
    P("V-TF-PIPE-XPU", "xpu2-stock", pw("pl-xpu1"), pw("pl-xpu1"), False),  # stock torch: xpu:1, then ValueError
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
    # Transformers 4.39 reads any value but 1/ON/YES/TRUE as off; Accelerate 0.27 reads none (cuda before, cuda:0 after).
    P("V-TF-XLA-ENV", "cuda2", pw("ta", env={"USE_TORCH_XLA": "maybe"}), pw("ta", env={"USE_TORCH_XLA": "maybe"}), True,
      acc="0.27.2"),
    # TrainingArguments(use_cpu=True) with torch_xla: xm.xla_real_devices on cpu raises before 4.39.
    P("V-TF-XLA-CPU", "tpu2", pw("ta-cpu"), pw("ta-cpu"), True),
    # ... and on any device but cuda/npu/xpu (mlu from 4.40, cpu from 4.39) until 4.42 removed the checks.
    P("V-TF-XLA-DEVICES", "cpu", pw("ta", env={"ACCELERATE_TORCH_DEVICE": "hpu"}),
      pw("ta", env={"ACCELERATE_TORCH_DEVICE": "hpu"}), True),
    P("V-TF-TA-4.32", "npu2", pw("ta"), pw("ta"), False),
    # from_pretrained(device_map="cuda") in rank 1 of 2: 4.x passes torch.device("cuda") on, 5.0 cuda:<LOCAL_RANK>.
    P("V-TF-CUDA-RANK", "cuda2", pw("fp-cuda", rank=1), pw("fp-cuda", rank=1), False),
    # torch-tpu installed on a TPU host: TrainingArguments' tpu:0 branch (5.9), after neuron:0, before cuda:0.
    P("V-TF-TPU", "tpu2-torch_tpu", pw("ta"), pw("ta"), False),
    P("V-TF-TA-TPU", "tpu2-torch_tpu", pw("ta"), pw("ta"), False),
    # Transformers 5 requires Accelerate >= 1.1.0: the last 4.x with Accelerate 1.0.1 works, 5.0.0 raises.
    P("V-TF-V5", "cuda2", pw("ta"), pw("ta"), False, acc="1.0.1"),
    # A torch below the release's minimum: is_torch_available() is False and the job fails at import (devplace:
    # a hazard, so --strict refuses); the last release before the minimum moved still runs it.
    P("V-TF-TORCH-2.1", "cuda2-torch2.0.1", pw("ta", strict=True), pw("ta", strict=True), False),
    P("V-TF-TORCH-2.2", "cuda2-torch2.1.2", pw("ta", strict=True), pw("ta", strict=True), False),
    P("V-TF-TORCH-2.4", "cuda2-torch2.3.1", pw("ta", strict=True), pw("ta", strict=True), False),
    P("V-TF-TORCH-2.5", "cuda2-torch2.4.1", pw("ta", strict=True), pw("ta", strict=True), False),
    # USE_TF=1 turns PyTorch off in Transformers 4.x (read at import: a process of its own); 5.0 no longer reads it.
    P("V-TF-USE-TF", "cuda2", pw("ta", env={"USE_TF": "1"}, strict=True), pw("ta", env={"USE_TF": "1"}, strict=True),
      False),
    # Where the modules land (landing.py's scenarios): balanced_low_0 on two NPUs, counted by Transformers' own
    # get_balanced_memory from 5.0 (npu:1 first), not by Accelerate's (npu:0 first) ...
    P("V-TF-BALANCED", "npu2", B0_FIRST, B0_FIRST, False),
    # ... and 120 layers (1.9 GiB) with 2 GiB of RAM available: all on cpu before 5.0, cpu and disk from 5.0, which
    # keeps 10 % of the cpu's budget; devplace's max_memory must give the same landing.
    P("V-TF-CPU-90", "cpu", CPU90, CPU90, False),
]
# Process-level variables (read once, at import): USE_TORCH_XLA, USE_TF.
PROCESS_ENV = ("USE_TORCH_XLA", "USE_TF")
# Rows no workload can show at their boundary, with the reason (the coverage check does not count them missing).
NOT_AT_BOUNDARY = {
    "V-ACC-BALANCED-XPU": "no Accelerate release before it measures an Intel GPU's memory (max_memory_allocated, 0 "
                          "at start-up, I-AUTO-XPU), so both sides put every module on cpu; what it counts is "
                          "executed from Accelerate 1.3.0 by the landing run (the xpu3-stock hosts) and tested in "
                          "resolver_test.cc",
}


def rule_rows():
    """{rule id: (library, since)} for every row of versions.cc."""
    return {rid: (lib, since) for rid, lib, since, _ in table_rows()}


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
        ipex = bool(tf) and "intel_extension_for_pytorch" in PROBE_HOSTS[p.host].get("packages", [])
        # With torch_xla, Accelerate before 0.28 decides at import whether to import it (is_tpu_available(
        # check_device=False) is False on a CUDA host): one process per host, as a job has one host.
        torch = PROBE_HOSTS[p.host].get("torch", TORCH)
        groups.setdefault((p.xla, json.dumps(penv, sort_keys=True), ipex, p.host if p.xla else "", torch),
                          []).append((p, w))
    got = {}
    for (xla, penv, _, _, torch), its in groups.items():
        key = hashlib.sha256(json.dumps([HERE_DIGEST, tf, acc, xla, penv, [(p.host, w) for p, w in its]]).encode()).hexdigest()[:16]
        cache = os.path.join(a.work, f"probe-{key}.json")
        if os.path.exists(cache) and not a.fresh:
            with open(cache) as f:
                kept = json.load(f)
            EXEC_SECONDS.append(kept.pop("_seconds", 0))
            got.update({(p.host, w.id, p.xla): kept[f"{p.host}/{w.id}"] for p, w in its})
            continue
        started = time.time()
        cases = [{"id": f"{p.host}/{w.id}", "host": PROBE_HOSTS[p.host], "convention": w.convention, "local_rank": w.rank,
                  "world_size": w.world, "use_cpu": w.use_cpu, "device": w.device,
                  "env": {k: v for k, v in w.env.items() if k not in PROCESS_ENV}} for p, w in its]
        seen, uniq = set(), []
        for c in cases:
            if c["id"] not in seen:
                seen.add(c["id"])
                uniq.append(c)
        mine = run_oracle({"accelerate": acc_dir, "transformers": tf_dir, "cases": uniq, "accelerate_version": acc,
                           "hub_version": "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0", "transformers_version": tf,
                           "torch": torch, "torch_xla": xla, "process_env": json.loads(penv)})
        EXEC_SECONDS.append(round(time.time() - started, 1))
        FRESH.append(EXEC_SECONDS[-1])
        with open(cache, "w") as f:
            json.dump({**mine, "_seconds": EXEC_SECONDS[-1]}, f)
        got.update({(p.host, w.id, p.xla): mine[f"{p.host}/{w.id}"] for p, w in its})
    return got


def probe_landing(a, tfr, accr, tf, acc, items):
    """Executes [(probe, LW)] at one pair as landing.py does (fidelity_batch_resolve, then the library's device-map
    code with and without devplace's max_memory): {(host, workload id): {"library": ..., "devplace": ...}}."""
    if not items:
        return {}
    acc_dir = export(a.accelerate_git, accr[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
    tf_dir = (export(a.transformers_git, tfr[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}"))
              if tf else None)
    scenarios = {f"{p.host}/{w.id}": {"host": p.host, "keyword": w.keyword, "memory": w.memory, "layers": w.layers,
                                      "tell_size": w.tell_size} for p, w in items}
    dp = landing.devplace_side(a.batch or landing.BATCH, tf, acc, scenarios)
    # The library's answers depend on the trees, the oracle, the scenarios and devplace's budgets (the runs given
    # them): kept under --work like probe_library's (--fresh: executed again).
    key = hashlib.sha256(json.dumps([HERE_DIGEST, tf, acc, scenarios, {sid: [d.get("device"), d.get("maxMemory")]
                                                                       for sid, d in sorted(dp.items())}],
                                    sort_keys=True).encode()).hexdigest()[:16]
    cache = os.path.join(a.work, f"probe-landing-{key}.json")
    if os.path.exists(cache) and not a.fresh:
        with open(cache) as f:
            got = json.load(f)
        EXEC_SECONDS.append(got.pop("_seconds", 0))
    else:
        stats = collections.Counter()
        got = landing.library_side(tf, acc, tf_dir, acc_dir, scenarios, dp, stats)
        EXEC_SECONDS.append(round(stats["oracle_seconds"], 1))
        FRESH.append(EXEC_SECONDS[-1])
        with open(cache, "w") as f:
            json.dump({**got, "_seconds": EXEC_SECONDS[-1]}, f)
    out = {}
    for p, w in items:
        sid = f"{p.host}/{w.id}"
        lib, mine = got[sid], dp[sid]
        if w.compare == "first":
            library = {"device": landing.devices(lib)[0]} if "device" in lib else lib
            devplace = {"device": mine["device"]} if "device" in mine else {"error": mine.get("error", "?")}
        else:  # the devices that receive modules, as a set (landing.compare): written in the library's order
            library = lib
            devplace = got.get(f"{sid}/dp", {"error": mine.get("error", "devplace gave no max_memory")})
            if "device" in lib and "device" in devplace and set(landing.devices(lib)) == set(landing.devices(devplace)):
                devplace = lib
        out[(p.host, w.id)] = {"library": library, "devplace": devplace}
    return out


def run_probes(a, tfr, accr):
    """Executes every probe at the tags around its rule's boundary, Accelerate's at every tag of the ranges
    they span, and writes the coverage table into results.json (rendered by --doc)."""
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
        lib = probe_library(a, tfr, accr, tf, acc, [(p, w) for p, w in items if not isinstance(w, LW)])
        landed = probe_landing(a, tfr, accr, tf, acc, [(p, w) for p, w in items if isinstance(w, LW)])
        for p, w in items:
            if isinstance(w, LW):
                answers[(tf, acc, p.host, w.id, p.xla)] = landed[(p.host, w.id)]
                continue
            answers[(tf, acc, p.host, w.id, p.xla)] = {
                "library": lib[(p.host, w.id, p.xla)],
                "devplace": ask_devplace(a.devplace, a.work, PROBE_HOSTS[p.host], w, tf, acc, world=w.world, env=w.env,
                                         xla=p.xla)}
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
                cls = classify(pair[0], pair[1], PROBE_HOSTS[p.host], w, r["library"], r["devplace"])
                if cls == "unintended":
                    unintended.append(side)
        for x in per_tag:
            if not x["agree"]:
                w = p.before
                cls = classify(None, x["tag"], PROBE_HOSTS[p.host], w, x["library"], x["devplace"])
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
                     if r not in covered and r not in NOT_AT_BOUNDARY and not (since == "0.25.0" and lib == "accelerate")
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
                           "executed": executed, "rows": table, "missing": missing,
                           "not_at_boundary": NOT_AT_BOUNDARY}
    save_results(results)
    for t in table:
        print(f"{'ok ' if t['changes'] and not t['unintended'] else 'BAD'} {t['rule']:<20} {t['host']:<11} "
              f"{t['before_workload']:<34} {t['before']:>14}: {json.dumps(t['library_before'])} (devplace "
              f"{json.dumps(t['devplace_before'])}) -> {t['after']}: {json.dumps(t['library_after'])} (devplace "
              f"{json.dumps(t['devplace_after'])})" + (f"  unintended at {t['unintended']}" if t["unintended"] else ""))
    print(f"{len(executed)} release pairs executed in {time.time() - t0:.0f} s; {len(covered)} rules covered; "
          f"not covered: {', '.join(missing) or 'none'}")
    return 1 if missing or bad else 0
