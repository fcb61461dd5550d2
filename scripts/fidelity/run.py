#!/usr/bin/python3
"""Fidelity runner: devplace's answers against the libraries' own code, release by release.

For every release in the matrix it checks out Accelerate (tag vX.Y.0) and Transformers (tag vX.Y.0,
or, in a mirror without release tags, main at the commit just before the version bump that opened
the next release: that commit's __init__.py reads X.Y.0.dev0), executes their device-choosing code
under scripts/fidelity/oracle.py against each simulated host, asks `devplace resolve --inventory`
the same question on the matching fixture host, and prints the agreement per release pair.
Opt-in (needs local mirrors and Debian's python3-torch); not part of CI. See README.md here.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _digest():
    """Names kept answers: the oracle's code and the matrix (HOSTS, WORKLOADS) they came from."""
    import hashlib
    with open(os.path.join(HERE, "oracle.py"), "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(json.dumps([HOSTS, WORKLOADS]).encode())
    return h.hexdigest()[:12]
ROOT = os.path.dirname(os.path.dirname(HERE))

# The simulated hosts: device counts the libraries see, the plug-ins installed, and the devplace
# fixture host(s) whose probed inventory describes the same machine (two: their rows merged).
HOSTS = [
    {"id": "cpu", "fixtures": ["cpu-only"], "count": {}},
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
# Workloads: (id, oracle convention, devplace flags, local_rank, use_cpu)
WORKLOADS = [
    ("ta", "training_arguments", ["--workload=training", "--convention=training_arguments"], None, False),
    ("ta-rank1", "training_arguments", ["--workload=training", "--convention=training_arguments"], 1, False),
    ("ta-cpu", "training_arguments", ["--workload=training", "--convention=training_arguments", "--use_cpu"], None, True),
    ("acc", "accelerate", ["--workload=training", "--convention=accelerate"], None, False),
    ("acc-rank1", "accelerate", ["--workload=training", "--convention=accelerate"], 1, False),
    ("auto", "max_memory", ["--workload=inference", "--convention=from_pretrained", "--device_map=auto"], None, False),
]
# Transformers releases in the supported range, each paired with the Accelerate release that was
# current when it came out (the pairs jobs ran); Accelerate releases no pair names run alone.
TRANSFORMERS = ["4.%d.0" % m for m in range(30, 58)] + ["5.%d.0" % m for m in range(0, 16)]
ACCELERATE = ["0.%d.0" % m for m in range(25, 35)] + ["1.%d.0" % m for m in range(0, 15)]


HERE_DIGEST = _digest()


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def vkey(v):
    return tuple(int(x) for x in v.split(".")[:3])


# Releases whose main-line tree cannot be told without the tag: main was bumped late.
LATE_BUMPS = {"5.3.0": "main stayed 5.3.0.dev0 after 5.3.0 was released (d81ad48109 says so), so the commit before "
                       "the bump is 5.4.0's tree, not 5.3.0's"}


def version_at(repo, commit):
    r = subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:src/transformers/__init__.py"], capture_output=True,
                       text=True)
    return re.search(r'^__version__ = "([^"]+)"', r.stdout, re.M) if r.returncode == 0 else None


def transformers_commits(repo):
    """{X.Y.0: (commit, how)}: the tag when the mirror has it, else main just before the next dev bump."""
    tags = set(git(repo, "tag", "--list", "v*").split())
    found = {}
    bumps = git(repo, "log", "--all", "--since=2023-04-01", "--format=%H %P", "-G^__version__ = ", "--",
                "src/transformers/__init__.py")
    for line in bumps.splitlines():
        commit, *parents = line.split()
        if len(parents) != 1:
            continue
        before, after = version_at(repo, parents[0]), version_at(repo, commit)
        if not before or not after or not before.group(1).endswith(".dev0") or before.group(1) == after.group(1):
            continue
        release = before.group(1)[: -len(".dev0")]
        major, minor, patch = (int(x) for x in release.split("."))
        if patch:  # X.Y.1.dev0 is the main line after X.Y.0: what it turns into is X.(Y+1).0
            release = f"{major}.{minor + 1}.0"
        if release in LATE_BUMPS:
            continue
        date = int(git(repo, "show", "-s", "--format=%ct", commit))
        if after.group(1) == release:  # the release commit itself is on main
            found[release] = (commit, f"release commit {commit[:10]} on main", date)
        elif release not in found or (date < found[release][2] and "release commit" not in found[release][1]):
            found[release] = (parents[0], f"main before the {after.group(1)} bump {commit[:10]}", date)
    out = {}
    for v in TRANSFORMERS:
        if "v" + v in tags:
            c = git(repo, "rev-list", "-n1", "v" + v).strip()
            out[v] = (c, f"tag v{v}", int(git(repo, "show", "-s", "--format=%ct", c)))
        elif v in found:
            out[v] = found[v]
    return out


def accelerate_commits(repo):
    out = {}
    for v in ACCELERATE:
        try:
            c = git(repo, "rev-list", "-n1", "v" + v).strip()
        except subprocess.CalledProcessError:
            continue
        out[v] = (c, f"tag v{v}", int(git(repo, "show", "-s", "--format=%ct", c)))
    return out


_EXPORT_LOCK = __import__("threading").Lock()


def export(repo, commit, path, dest):
    with _EXPORT_LOCK:
        return _export(repo, commit, path, dest)


def _export(repo, commit, path, dest):
    if not os.path.isdir(dest):
        os.makedirs(dest + ".tmp", exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", repo, "archive", commit, path], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest + ".tmp"], input=archive, check=True)
        os.rename(dest + ".tmp", dest)
    return dest


def inventory(devplace, fixtures, cache):
    key = "+".join(fixtures)
    path = os.path.join(cache, f"inventory-{key}.json")
    if os.path.exists(path):
        return path
    merged = None
    for f in fixtures:
        libs = [f"--{n}_library=" for n in ("nvml", "cuda", "amd_smi", "level_zero", "hlml", "dcmi", "cndev", "mtml")]
        inv = json.loads(subprocess.run([devplace, "probe", f"--host_root={ROOT}/tests/fixtures/hosts/{f}", "--json", *libs],
                                        check=True, capture_output=True, text=True).stdout)
        if merged is None:
            merged = inv
        else:
            merged["backends"] += [b for b in inv["backends"] if b["row"] != "ROW_CPU"]
    with open(path, "w") as out:
        json.dump(merged, out)
    return path


def devplace_answer(devplace, inv, host, workload, tf, acc):
    _, _, flags, rank, _ = workload
    cmd = [devplace, "resolve", f"--inventory={inv}", "--no_environment", "--json", *flags,
           "--runtime_backends=" + ",".join(sorted(host["count"]) + ["cpu"])]
    if tf:
        cmd.append(f"--transformers_version={tf}")
    cmd.append(f"--accelerate_version={acc}")
    if rank is not None:
        cmd += [f"--local_rank={rank}", "--world_size=2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return {"device": json.loads(r.stdout)["device"]}


def oracle(acc_dir, tf_dir, hosts, workloads, hub_version, versions):
    cases = []
    for h in hosts:
        for w in workloads:
            cases.append({"id": f"{h['id']}/{w[0]}", "host": h, "convention": w[1], "local_rank": w[3],
                          "use_cpu": w[4]})
    job = {"accelerate": acc_dir, "transformers": tf_dir, "hub_version": hub_version, "cases": cases,
           "accelerate_version": versions[1], "transformers_version": versions[0]}
    r = subprocess.run([sys.executable, os.path.join(HERE, "oracle.py")], input=json.dumps(job), capture_output=True,
                       text=True, timeout=1800)
    got = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            got[d.pop("id")] = d
    for c in cases:
        got.setdefault(c["id"], {"error": "oracle died: " + (r.stderr.strip().splitlines() or ["?"])[-1]})
    return got


def same(lib, dp):
    if "device" in lib and "device" in dp:
        return lib["device"] == dp["device"]
    return "error" in lib and "error" in dp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accelerate_git", required=True, help="bare or .git directory of an Accelerate mirror with tags")
    ap.add_argument("--transformers_git", required=True, help="git directory of a Transformers mirror (tags or main history)")
    ap.add_argument("--devplace", default=os.path.join(ROOT, "build/dev/client/devplace"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "devplace-fidelity"), help="checkout cache")
    ap.add_argument("--out", default="", help="write every row (JSON lines) here")
    ap.add_argument("--only", default="", help="comma list of releases to run, e.g. tf4.40.0,acc0.30.0")
    ap.add_argument("--pairs", default="", help="comma list of TF:ACC release pairs to run instead of pairing by "
                    "release date, e.g. 4.36.0:0.25.0,:1.14.0 (empty TF: Accelerate alone)")
    ap.add_argument("--jobs", type=int, default=2, help="release pairs run at once")
    ap.add_argument("--fresh", action="store_true", help="execute the libraries again instead of reusing kept answers")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tfc, accc = transformers_commits(a.transformers_git), accelerate_commits(a.accelerate_git)
    pairs = []  # (tf version or None, acc version)
    used = set()
    for tf, (c, how, date) in sorted(tfc.items(), key=lambda kv: vkey(kv[0])):
        cands = [v for v, (_, _, d) in accc.items() if d <= date and (vkey(tf) < (5,) or vkey(v) >= (1, 1))]
        acc = max(cands, key=vkey) if cands else min(accc, key=vkey)
        pairs.append((tf, acc))
        used.add(acc)
    pairs += [(None, v) for v in sorted(accc, key=vkey) if v not in used]
    if a.pairs:  # explicit pairs instead of the release-date pairing
        pairs = []
        for item in a.pairs.split(","):
            tf, acc = item.split(":")
            if (tf and tf not in tfc) or acc not in accc:
                ap.error(f"--pairs: {item}: no such release in the mirrors (Transformers {sorted(tfc, key=vkey)}, "
                         f"Accelerate {sorted(accc, key=vkey)})")
            pairs.append((tf or None, acc))
    if a.only:
        keep = set(a.only.split(","))
        pairs = [p for p in pairs if f"tf{p[0]}" in keep or f"acc{p[1]}" in keep and p[0] is None]
    print("release sources:")
    for tf, acc in pairs:
        tf_src = f"Transformers {tf} = {tfc[tf][0][:10]} ({tfc[tf][1]})" if tf else "Transformers -"
        print(f"  {tf_src}; Accelerate {acc} = {accc[acc][0][:10]} ({accc[acc][1]})")

    def one(pair):
        tf, acc = pair
        acc_dir = export(a.accelerate_git, accc[acc][0], "src", os.path.join(a.work, f"accelerate-{acc}"))
        tf_dir = export(a.transformers_git, tfc[tf][0], "src/transformers", os.path.join(a.work, f"transformers-{tf}")) if tf else None
        workloads = WORKLOADS if tf else [w for w in WORKLOADS if w[1] != "training_arguments"]
        hub = "1.2.0" if tf and vkey(tf) >= (5,) else "0.30.0"
        # Transformers reads Intel Extension for PyTorch once, at import: that host runs in its own process.
        # The libraries' answers depend only on the two trees and this matrix: kept, so that a rerun
        # after a change to devplace only asks devplace again (--fresh executes them again).
        cache = os.path.join(a.work, f"answers-{tf}-{acc}-{HERE_DIGEST}.json")
        if os.path.exists(cache) and not a.fresh:
            with open(cache) as f:
                got = json.load(f)
        else:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                parts = pool.map(lambda hosts: oracle(acc_dir, tf_dir, hosts, workloads, hub, pair),
                                 [[h for h in HOSTS if h["id"] != "xpu2-ipex"], [h for h in HOSTS if h["id"] == "xpu2-ipex"]])
                got = {k: v for part in parts for k, v in part.items()}
            with open(cache, "w") as f:
                json.dump(got, f)
        asks = [(h, w) for h in HOSTS for w in workloads]
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = pool.map(lambda hw: devplace_answer(a.devplace, inventory(a.devplace, hw[0]["fixtures"], a.work),
                                                          hw[0], hw[1], tf, acc), asks)
            rows = []
            for (h, w), dp in zip(asks, answers):
                lib = got[f"{h['id']}/{w[0]}"]
                rows.append({"transformers": tf, "accelerate": acc, "host": h["id"], "workload": w[0], "library": lib,
                             "devplace": dp, "agree": same(lib, dp)})
        return rows

    all_rows = []
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for rows in ex.map(one, pairs):
            all_rows += rows
            tf, acc = rows[0]["transformers"], rows[0]["accelerate"]
            ok = sum(r["agree"] for r in rows)
            print(f"Transformers {tf or '-':>6} + Accelerate {acc:>6}: {ok}/{len(rows)} agree ({100.0 * ok / len(rows):.0f} %)",
                  flush=True)
            for r in rows:
                if not r["agree"]:
                    print(f"    {r['host']:<12} {r['workload']:<9} library {json.dumps(r['library'])[:110]}  devplace {json.dumps(r['devplace'])[:110]}")
    ok = sum(r["agree"] for r in all_rows)
    print(f"total: {ok}/{len(all_rows)} agree ({100.0 * ok / max(1, len(all_rows)):.1f} %)")
    if a.out:
        with open(a.out, "w") as f:
            for r in all_rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
