"""--search (README.md "Generated scenarios"): scenarios sampled from the rules' input space instead of the fixed
matrix. A seed makes a run repeatable: scenario i of a pair is drawn from random.Random(f"{seed}/{tf}/{acc}/{i}").

Each scenario: a simulated host (the matrix's and the probes'), a convention (PartialState().device,
TrainingArguments(...).device, where device_map="auto" puts the first module, pipeline(device=...),
from_pretrained's conversion of an explicit device_map), a torchrun rank and world size or none (single-process
torchrun, world size 1, included), use_cpu / no_cuda, an explicit device string or int, every job variable the
rules read from the environment with a valid, invalid or no value, and torch_xla with USE_TORCH_XLA (valid,
invalid, absent) read at import. The libraries' side runs in one oracle.py process per batch of scenarios that
one process can hold (torch_xla, the variables read at import, Intel Extension for PyTorch for Transformers);
devplace's side in one fidelity_batch_resolve process (the placement library, the fixture hosts' probe goldens).
A disagreement that is not an intended difference (compare.classify) is shrunk, greedily, to the fewest fields
that still disagree, and written with its evidence into tests/placement/fidelity_search_cases.jsonl, which
ctest FidelitySearch.* holds the resolver to. Counts, classes and times go into results.json ("search").
"""
import collections
import datetime
import hashlib
import json
import os
import queue
import re
import random
import subprocess
import threading
import time

from common import ROOT, acc_for, export, load_results, save_results, vkey
from compare import DISTRIBUTIONS, HERE_DIGEST, TORCH, OracleServer, backends, classify, same
from probes import XHOSTS

BATCH = os.path.join(ROOT, "build/dev/tests/placement/fidelity_batch_resolve")
CASES = os.path.join(ROOT, "tests/placement/fidelity_search_cases.jsonl")
XLA_HOSTS = ("cpu", "cuda2", "tpu2")  # torch_xla: one process per host (Accelerate < 0.28 decides at import)
ACC_CONVENTIONS = ("accelerate", "max_memory")
TF_CONVENTIONS = ("training_arguments", "pipeline", "from_pretrained")
# Values per variable: valid, invalid ("maybe", "foo", "-1", "") and, by leaving it out, absent.
ENV_VALUES = {
    "ACCELERATE_USE_CPU": ["1", "true", "True", "yes", "0", "false", "no", "maybe", ""],
    "ACCELERATE_TORCH_DEVICE": ["cpu", "cuda", "cuda:1", "npu", "npu:1", "xpu", "xpu:0", "mlu", "musa", "hpu",
                                "mps", "foo", ""],
}
# Read once, at import: each value is an oracle process of its own, so few (valid on, valid off, invalid).
PROCESS_ENV_VALUES = {"USE_TORCH_XLA": ["1", "0", "maybe"]}
# torch_xla's generations (T-XLA-PJRT): XRT (1.13), PJRT with requires_pjrt on xla_device (2.1 to 2.4), PJRT (2.5 on).
TORCH_XLA_RELEASES = ["1.13.1", "2.1.0", "2.5.0"]
DEVICE_STRINGS = ["cpu", "cuda", "cuda:0", "cuda:1", "cuda:2", "npu", "npu:1", "xpu", "xpu:1", "mlu:0", "musa:1",
                  "hpu", "hpu:0", "mps", "neuron", "tpu", "xla", "xla:0", "meta", "foo", "cuda:x"]  # no "": a request cannot say it
PIPELINE_DEVICES = [None, -1, 0, 1, 2] + DEVICE_STRINGS
RANKS = [None, None, (0, 1), (0, 2), (1, 2), (1, 3), (2, 3), (3, 4), (5, 8), (7, 8)]
EVIDENCE = {  # where each convention's answer is chosen, in the checked-out trees
    "accelerate": "Accelerate src/accelerate/state.py PartialState().device (AcceleratorState with ACCELERATE_USE_CPU)",
    "max_memory": "Accelerate src/accelerate/utils/modeling.py get_max_memory() + infer_auto_device_map, first module",
    "training_arguments": "Transformers src/transformers/training_args.py TrainingArguments(...).device",
    "pipeline": "Transformers src/transformers/pipelines/base.py Pipeline.__init__ device",
    "from_pretrained": "Transformers from_pretrained's device_map conversion (modeling_utils.py / "
                       "integrations/accelerate.py check_and_set_device_map)",
}


def sample(rng, tf):
    """One scenario: only the fields that are set (an absent field is the default)."""
    s = {"host": rng.choice(sorted(XHOSTS)),
         "convention": rng.choice(ACC_CONVENTIONS + (TF_CONVENTIONS if tf else ()))}
    conv = s["convention"]
    if conv in ("accelerate", "training_arguments"):
        r = rng.choice(RANKS)
        if r:
            s["rank"], s["world"] = r
        if rng.random() < 0.3:
            s["use_cpu"] = True
    if conv == "pipeline":
        s["device"] = rng.choice(PIPELINE_DEVICES)
    if conv == "from_pretrained":
        s["device"] = rng.choice(DEVICE_STRINGS)
    env = {k: rng.choice(v) for k, v in ENV_VALUES.items() if rng.random() < 0.25}
    if env:
        s["env"] = env
    if rng.random() < 0.15:
        s["xla"] = rng.choice(TORCH_XLA_RELEASES)
        s["host"] = rng.choice(XLA_HOSTS)
        if rng.random() < 0.5:
            s["process_env"] = {k: rng.choice(v) for k, v in PROCESS_ENV_VALUES.items()}
        if rng.random() < 0.3:
            s.setdefault("process_env", {})["PJRT_SELECT_DEFAULT_DEVICE"] = rng.choice(["0", "1"])
    return {k: v for k, v in s.items() if v is not None}


def process_key(s, tf, acc):
    """Scenarios one oracle process can hold: torch_xla (then one host), the variables read at import, and IPEX
    (Transformers reads it once, at import). With torch_xla, Accelerate before 0.28 decides at import whether to
    import it (is_tpu_available(check_device=False) is False on a CUDA host): one process per host there."""
    ipex = bool(tf) and "intel_extension_for_pytorch" in XHOSTS[s["host"]].get("packages", [])
    per_host = s.get("xla") and vkey(acc) < (0, 28)
    return json.dumps([s.get("xla", False), s.get("process_env", {}), ipex, s["host"] if per_host else ""],
                      sort_keys=True)


def library_side(a, tf, acc, tf_dir, acc_dir, scenarios, stats):
    """{scenario id: the libraries' answer}, one oracle process per process_key."""
    groups = collections.defaultdict(list)
    for sid, s in scenarios.items():
        groups[process_key(s, tf, acc)].append((sid, s))
    jobs = []
    for key, items in groups.items():
        xla, penv, _, _ = json.loads(key)
        items.sort(key=lambda x: x[1]["host"])  # the oracle sets a host up when it changes
        cases = [{"id": sid, "host": XHOSTS[s["host"]], "convention": s["convention"], "local_rank": s.get("rank"),
                  "world_size": s.get("world", 2), "use_cpu": bool(s.get("use_cpu")), "device": s.get("device"),
                  "env": s.get("env", {})} for sid, s in items]
        jobs.append({"accelerate": acc_dir, "transformers": tf_dir, "cases": cases, "accelerate_version": acc,
                     "transformers_version": tf, "torch": TORCH,
                     "hub_version": "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0", "torch_xla": xla,
                     "process_env": penv})
    jobs.sort(key=lambda j: -len(j["cases"]))  # the largest first, so the servers end together
    todo = queue.Queue()
    for job in jobs:
        todo.put(job)
    got, failed = {}, []

    def serve():  # one oracle server (torch imported once), one forked oracle.py per job it takes
        try:
            with OracleServer() as server:
                while True:
                    try:
                        job = todo.get_nowait()
                    except queue.Empty:
                        return
                    got.update(server.run(job))
        except BaseException as e:  # raised again in the caller: a lost batch must not read as missing answers
            failed.append(e)

    t0 = time.time()
    workers = [threading.Thread(target=serve) for _ in range(max(1, min(a.jobs, len(jobs))))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failed:
        raise failed[0]
    stats["oracle_processes"] += len(jobs)
    stats["oracle_seconds"] += time.time() - t0
    return got


def request(s, tf, acc):
    """The ResolveDeviceRequest `devplace resolve --inventory --no_environment --python_env` sends for `s` (compare.py's
    ask_devplace, as protobuf JSON)."""
    host, conv = XHOSTS[s["host"]], s["convention"]
    r = {"workload": "WORKLOAD_TRAINING" if conv in ("accelerate", "training_arguments") else "WORKLOAD_INFERENCE",
         "convention": {"accelerate": "CONVENTION_ACCELERATE", "training_arguments": "CONVENTION_TRAINING_ARGUMENTS",
                        "pipeline": "CONVENTION_PIPELINE"}.get(conv, "CONVENTION_FROM_PRETRAINED"),
         "runtimeBackends": backends(host) + (["xla"] if s.get("xla") else []),
         "accelerateVersion": acc,
         "jobEnvironment": {"source": "fidelity search: the simulated job's packages",
                            "packages": [{"name": "torch", "version": TORCH}] +
                                        [{"name": DISTRIBUTIONS[p], "version": TORCH} for p in host.get("packages", [])] +
                                        ([{"name": "torch_xla", "version": s["xla"]}] if s.get("xla") else [])}}
    if tf:
        r["transformersVersion"] = tf
    if conv == "max_memory":
        r["deviceMap"] = "auto"
    elif "device" in s:
        r["deviceMap"] = str(s["device"])
    if s.get("use_cpu"):
        r["useCpu"] = True
    if "rank" in s:
        r["localRank"], r["worldSize"] = s["rank"], s["world"]
    env = {**s.get("env", {}), **s.get("process_env", {})}
    if env:
        r["env"] = env
    return r


def fixtures(s):
    host = XHOSTS[s["host"]]
    return {"fixtures": host["fixtures"], "mps": bool(host.get("mps"))}


def devplace_side(batch, tf, acc, scenarios, stats):
    """{scenario id: devplace's answer} from one fidelity_batch_resolve process."""
    lines = "".join(json.dumps({"id": sid, **fixtures(s), "request": request(s, tf, acc)}) + "\n"
                    for sid, s in scenarios.items())
    t0 = time.time()
    r = subprocess.run(["nice", "-n", "10", batch], input=lines, capture_output=True, text=True, check=True)
    stats["devplace_seconds"] += time.time() - t0
    got = {}
    for line in r.stdout.splitlines():
        d = json.loads(line)
        sid = d.pop("id")
        if d.get("error", "").split(": ", 1)[-1].startswith("harness: "):
            raise SystemExit(f"fidelity_batch_resolve: {sid}: {d['error']}")
        got[sid] = {"device": d["device"]} if "device" in d else {"error": d["error"]}
    return got


def answer_kind(answer):
    """A device type, or an error's class (the library's exception, devplace's gRPC code)."""
    if "device" in answer:
        return answer["device"].split(":")[0]
    return answer["error"].split(":")[0]


# Where the simulated host and its fixture host differ, or a stand-in is not the real package: such a difference is
# the harness's, counted as its own class (docs/FIDELITY.md lists them), never as agreement.
FIXTURE_HAS_MORE = {  # device type: what the fixture host has beyond the simulated host's count
    "xpu": "the fixture xpu-2x-arc has 3 Intel GPUs (an integrated one first), the simulated host 2",
    "neuron": "the fixture neuron-2x-trn1 has 4 NeuronCores (2 per Trainium device; torch-neuronx numbers cores), "
              "the simulated host 2 devices",
}


def harness_class(s, lib, dp):
    host = XHOSTS[s["host"]]
    for dtype, why in FIXTURE_HAS_MORE.items():
        if (host["count"].get(dtype) and s.get("rank", 0) >= host["count"][dtype]
                and dp.get("device", "").startswith(dtype + ":")):
            return f"harness: {why}: a rank >= {host['count'][dtype]} has a device of its own on the fixture"
        # The same for an index the job names (pipeline's int device, a device string): the library's stand-in model
        # cannot move to it on the simulated host, the fixture has it.
        named = s.get("device")
        index = named if isinstance(named, int) else (int(named.split(":")[1]) if isinstance(named, str) and re.fullmatch(
            rf"{dtype}:\d+", named) else -1)
        if (host["count"].get(dtype) and index >= host["count"][dtype] and dp.get("device") == f"{dtype}:{index}"
                and lib.get("error", "").startswith(f"_NotAvailable: simulated: {dtype}:{index} ")):
            return f"harness: {why}: index {index} names a device of its own on the fixture"
    if (s.get("xla") and lib.get("error", "").startswith("_NotAvailable: simulated: xla")
            and dp.get("device", "").startswith("xla")):
        return ("harness: the oracle's stand-in torch counts no xla devices (oracle.py _available), but with torch_xla "
                "installed xla / xla:0 is the process's XLA device")
    return ""


def verdict(tf, acc, s, lib, dp):
    """"" (agree), or the class of the difference (compare.classify, harness_class)."""
    if same(lib, dp):
        return ""
    w = collections.namedtuple("SW", "id convention rank")(s["convention"], s["convention"], s.get("rank"))
    why = classify(tf, acc, XHOSTS[s["host"]], w, lib, dp)
    return (harness_class(s, lib, dp) or why) if why == "unintended" else why


def simpler(s):
    """Each scenario one step simpler than `s`: a field dropped, a variable dropped, the host reduced to cpu."""
    out = []
    for k in ("env", "process_env"):
        for var in s.get(k, {}):
            t = json.loads(json.dumps(s))
            del t[k][var]
            if not t[k]:
                del t[k]
            out.append(t)
    for k in ("use_cpu", "device", "xla"):
        if k in s and not (k == "device" and s["convention"] == "from_pretrained"):  # its one argument
            out.append({f: v for f, v in s.items() if f != k and not (k == "xla" and f == "process_env")})
    if "rank" in s:
        out.append({f: v for f, v in s.items() if f not in ("rank", "world")})
    if s["host"] != "cpu":
        out.append({**s, "host": "cpu"})
    return out


def shrink(a, tf, acc, dirs, found, stats):
    """Each unintended difference shrunk: rounds of every one-step simpler scenario, executed in one batch; the first
    that still differs unintendedly replaces it, until none does. {scenario id: (minimal scenario, lib, devplace)}."""
    current = dict(found)
    done = {}
    while current:
        trials = {}
        for sid, (s, _, _) in current.items():
            for j, t in enumerate(simpler(s)):
                trials[f"{sid}~{j}"] = t
        lib = library_side(a, tf, acc, *dirs, trials, stats) if trials else {}
        dp = devplace_side(a.batch, tf, acc, trials, stats) if trials else {}
        nxt = {}
        for sid, (s, l0, d0) in current.items():
            for j, t in enumerate(simpler(s)):
                tid = f"{sid}~{j}"
                if verdict(tf, acc, t, lib[tid], dp[tid]) == "unintended":
                    nxt[sid] = (t, lib[tid], dp[tid])
                    break
            else:
                done[sid] = (s, l0, d0)
        current = nxt
    return done


def record_cases(tf, acc, tfr, accr, shrunk):
    """The shrunk cases into tests/placement/fidelity_search_cases.jsonl, once each (the pair and the scenario)."""
    header, kept = [], {}
    if os.path.exists(CASES):
        for line in open(CASES):
            if line.startswith("#"):
                header.append(line)
            elif line.strip():
                kept[json.loads(line)["id"]] = line
    tags = (f"Transformers {tf} ({tfr[tf][1]} = {tfr[tf][0][:10]}), " if tf else "") + \
           f"Accelerate {acc} ({accr[acc][1]} = {accr[acc][0][:10]})"
    for s, lib, dp in shrunk.values():
        sid = f"{tf or '-'}+{acc}/" + hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:10]
        picked = lib.get("device") or lib.get("error", "")
        kept.setdefault(sid, json.dumps({
            "id": sid, **fixtures(s), "request": request(s, tf, acc), "scenario": s, "library": lib, "devplace": dp,
            "expect": "known", "evidence": f"{tags}: {EVIDENCE[s['convention']]} picked {picked}"}) + "\n")
    header = header or ["# Written by scripts/fidelity/run.py --search (search.py); read by tests/placement/"
                        "fidelity_search_cases_test.cc.\n"]
    with open(CASES, "w") as f:
        f.writelines(header + [kept[k] for k in sorted(kept)])


def run_search(a, tfr, accr, pairs):
    """--search over `pairs`: a.scenarios scenarios each, seed a.seed; returns 1 when an unintended difference
    was found."""
    a.batch = a.batch or BATCH
    every = every_pair(tfr, accr)
    results = load_results()
    results["search_plan"] = {"pairs": len(every), "transformers": sum(1 for tf, _ in every if tf),
                              "accelerate": sum(1 for tf, _ in every if not tf)}
    save_results(results)
    rc = 0
    for tf, acc in pairs:
        t0 = time.time()
        stats = collections.Counter(oracle_processes=0, oracle_seconds=0.0, devplace_seconds=0.0)
        acc_dir = export(a.accelerate_git, accr[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
        tf_dir = (export(a.transformers_git, tfr[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}"))
                  if tf else None)
        scenarios = {f"s{i}": sample(random.Random(f"{a.seed}/{tf}/{acc}/{i}"), tf) for i in range(a.scenarios)}
        # The libraries' answers depend only on the trees, the oracle and the scenarios: kept (--fresh: executed again).
        cache = os.path.join(a.work, f"search-{tf}-{acc}-{HERE_DIGEST}-" + hashlib.sha256(
            json.dumps(scenarios, sort_keys=True).encode()).hexdigest()[:12] + ".json")
        reused = os.path.exists(cache) and not a.fresh
        if reused:
            with open(cache) as f:
                kept = json.load(f)
            lib, stats = kept["answers"], collections.Counter(kept["stats"])
        else:
            lib = library_side(a, tf, acc, tf_dir, acc_dir, scenarios, stats)
            stats["jobs"] = a.jobs
            with open(cache, "w") as f:
                json.dump({"answers": lib, "stats": dict(stats)}, f)
        dp = devplace_side(a.batch, tf, acc, scenarios, stats)
        classes = collections.Counter()
        found = {}
        for sid, s in scenarios.items():
            v = verdict(tf, acc, s, lib[sid], dp[sid])
            classes[v or "agree"] += 1
            if v == "unintended":
                found[sid] = (s, lib[sid], dp[sid])
        # One difference per kind is shrunk (the same answers on the same convention: the same cause, mostly).
        kinds = {}
        for sid, (s, l, d) in found.items():
            kinds.setdefault((s["convention"], bool(s.get("xla")), answer_kind(l), answer_kind(d)), sid)
        picked = dict(list({sid: found[sid] for sid in kinds.values()}.items())[:a.shrink_max])
        shrunk = shrink(a, tf, acc, (tf_dir, acc_dir), picked, stats) if picked else {}
        shrunk = {json.dumps(s, sort_keys=True): (s, l, d) for s, l, d in shrunk.values()}  # each minimal case once
        record_cases(tf, acc, tfr, accr, shrunk)
        # kept answers: the time of the run that executed them (its oracle processes) counts, as if executed now
        seconds = round(time.time() - t0 + (kept["stats"]["oracle_seconds"] if reused else 0), 1)
        key = f"{tf or '-'}+{acc}"
        results = load_results()
        # kept answers from before the cache recorded its oracle servers: the row their run wrote says
        executed_jobs = stats.get("jobs") or (reused and results.get("search", {}).get(key, {}).get("jobs")) or a.jobs
        results.setdefault("search", {})[key] = {
            "transformers": tf, "accelerate": acc, "seed": a.seed, "scenarios": a.scenarios,
            "ran": datetime.date.today().isoformat(), "seconds": seconds,
            "oracle_processes": stats["oracle_processes"], "forked": True,  # batches forked by oracle_server.py
            "jobs": executed_jobs,  # oracle servers at once when executed (oracle_seconds: its wall time)
            "oracle_seconds": round(stats["oracle_seconds"], 1),
            "devplace_seconds": round(stats["devplace_seconds"], 1), "classes": dict(sorted(classes.items())),
            "unintended": classes["unintended"], "kinds_shrunk": len(shrunk),
            "shrunk": [{"scenario": s, "library": l, "devplace": d} for s, l, d in shrunk.values()]}
        save_results(results)
        print(f"search {key}: {a.scenarios} scenarios (seed {a.seed}) in {seconds} s: " +
              ", ".join(f"{n} {k}" for k, n in sorted(classes.items())), flush=True)
        for s, l, d in shrunk.values():
            print(f"    shrunk: {json.dumps(s)}  library {json.dumps(l)[:120]}  devplace {json.dumps(d)[:160]}",
                  flush=True)
        rc = rc or int(bool(classes["unintended"]))
    return rc


def every_pair(tfr, accr):
    """Every release tag from FIRST_MINOR on, patch releases included: each Transformers release with the Accelerate
    release current at its tag, then each Accelerate release alone."""
    tfs = sorted((v for v in tfr if vkey(v)[:2] >= (4, 36)), key=vkey)
    accs = sorted((v for v in accr if vkey(v)[:2] >= (0, 25)), key=vkey)
    return [(tf, acc_for(tfr, accr, tf)) for tf in tfs] + [(None, v) for v in accs]
