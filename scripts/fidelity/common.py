"""What every mode of the fidelity runner (run.py) shares: where things are, the libraries' releases in
the mirrors (each release tag checked against the version its tree says), a release's tree checked out,
the rows of server/placement/versions.cc, and results.json, the record the modes write and doc.py renders.
"""
import json
import os
import re
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSIONS_CC = os.path.join(ROOT, "server/placement/versions.cc")
RESULTS = os.path.join(HERE, "results.json")

FIRST_MINOR = {"transformers": (4, 36), "accelerate": (0, 25)}  # the matrix: every minor from these on
SUPPORTED = {"transformers": (4, 30), "accelerate": (0, 25)}  # versions.cc MinVersion


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


def tag_before(rel, v):
    older = sorted((x for x in rel if vkey(x) < vkey(v)), key=vkey)
    return older[-1] if older else None


def acc_for(tfr, accr, tf):
    date = tfr[tf][2]
    cands = [v for v, (_, _, d) in accr.items() if d <= date and (vkey(tf) < (5,) or vkey(v) >= (1, 1))
             and vkey(v) >= SUPPORTED["accelerate"]]
    return max(cands, key=vkey) if cands else min((v for v in accr if vkey(v) >= (0, 25)), key=vkey)


_EXPORT_LOCK = threading.Lock()


def export(repo, commit, path, dest):
    with _EXPORT_LOCK:
        if not os.path.isdir(dest):
            os.makedirs(dest + ".tmp", exist_ok=True)
            archive = subprocess.run(["git", "--git-dir", repo, "archive", commit, path], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", dest + ".tmp"], input=archive, check=True)
            os.rename(dest + ".tmp", dest)
    return dest


# The rows of versions.cc: FeatureRules and OrderRules, each with its library, release and commits.
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
