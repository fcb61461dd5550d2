"""The default mode (README.md "Run"): every release pair of the matrix, or --pairs, checked out at its
tags, the libraries' own code executed against each simulated host (compare.py) and devplace asked the same
question; each pair's comparisons, agreement and classified disagreements are recorded in results.json
(doc.py renders them). --list prints the pairs without running them.
"""
import concurrent.futures
import datetime
import json
import os

from common import acc_for, export, last_patches, load_results, save_results, vkey
from compare import HERE_DIGEST, HOSTS, TORCH, WORKLOADS, ask_devplace, classify, run_oracle, same

TRANSFORMERS_LIBS = ("training_arguments", "pipeline")  # conventions that need Transformers


def select_pairs(a, tfr, accr, error, base=None):
    """The release pairs to run, each printed with its commits: the matrix (every Transformers minor from
    FIRST_MINOR on with the Accelerate release current at its tag, then every Accelerate minor alone; `base`
    instead, when given),
    --pairs instead of it, narrowed by --only. `error` reports a --pairs item the mirrors lack (exit 2)."""
    pairs = base
    if base is None:
        pairs = [(tf, acc_for(tfr, accr, tf)) for tf in last_patches(tfr, "transformers")]
        pairs += [(None, v) for v in last_patches(accr, "accelerate")]
    if a.pairs:
        pairs = []
        for item in a.pairs.split(","):
            tf, acc = item.split(":")
            if (tf and tf not in tfr) or acc not in accr:
                error(f"--pairs: {item}: no such release tag in the mirrors")
            pairs.append((tf or None, acc))
    if a.only:
        keep = set(a.only.split(","))
        pairs = [p for p in pairs if f"tf{p[0]}" in keep or (p[0] is None and f"acc{p[1]}" in keep)]
    for tf, acc in pairs:
        print(f"  Transformers {tf or '-'}" + (f" ({tfr[tf][1]} = {tfr[tf][0][:10]})" if tf else "") +
              f" + Accelerate {acc} ({accr[acc][1]} = {accr[acc][0][:10]})")
    return pairs


def oracle(acc_dir, tf_dir, hosts, workloads, hub_version, versions):
    cases = []
    for h in hosts:
        for w in workloads:
            cases.append({"id": f"{h['id']}/{w.id}", "host": h, "convention": w.convention, "local_rank": w.rank,
                          "use_cpu": w.use_cpu, "device": w.device})
    return run_oracle({"accelerate": acc_dir, "transformers": tf_dir, "hub_version": hub_version, "cases": cases,
                       "accelerate_version": versions[1], "transformers_version": versions[0], "torch": TORCH})


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
            answers = pool.map(lambda hw: ask_devplace(a.devplace, a.work, hw[0], hw[1], tf, acc), asks)
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
