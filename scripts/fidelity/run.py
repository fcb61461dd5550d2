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
- `--crosscheck`: each matrix release of Transformers against an independent fork with main's history.
- `--landing`: where device_map="auto"/"balanced"/"balanced_low_0"/"sequential" puts the modules (landing.py), the
  library's own code with simulated memory, against devplace's device and max_memory.
- `--search`: generated scenarios (search.py) at every release tag pair, differences shrunk into
  tests/placement/fidelity_search_cases.jsonl, which ctest holds the resolver to.
Opt-in (needs local mirrors with the release tags, and Debian's python3-torch); not part of CI.

Each mode is a module here, beside run.py (which parses the flags and runs one): matrix.py (the default),
boundaries.py, probes.py, search.py, xla.py, newer.py and crosscheck.py; doc.py renders docs/FIDELITY.md. What they
share: common.py (paths, the mirrors' releases, versions.cc's rows, results.json) and compare.py (the
simulated hosts and workloads, the libraries' side through oracle.py, devplace's side, the verdict).
"""
import argparse
import os
import sys
import tempfile

import boundaries
import crosscheck
import doc
import landing
import matrix
import newer
import probes
import search
import xla
from common import ROOT, load_results, releases


def parser():
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
    ap.add_argument("--search", action="store_true", help="generated scenarios instead of the matrix: --scenarios "
                    "per release pair (default: every release tag from Transformers 4.36 / Accelerate 0.25, patch "
                    "releases included; --pairs, --only narrow it), drawn from --seed; differences shrunk into "
                    "tests/placement/fidelity_search_cases.jsonl")
    ap.add_argument("--landing", action="store_true", help="where the modules land (landing.py): --scenarios per "
                    "release pair given with --pairs (default 300), drawn from --seed")
    ap.add_argument("--seed", type=int, default=1, help="--search, --landing: the seed (the same seed draws the same scenarios)")
    ap.add_argument("--scenarios", type=int, default=None, help="--search (default 10000), --landing (default 300): "
                    "scenarios per release pair")
    ap.add_argument("--jobs", type=int, default=2, help="--search: oracle processes run at once (default 2; each "
                    "batch of scenarios is its own process, the answers do not depend on it)")
    ap.add_argument("--shrink_max", type=int, default=5, help="--search: kinds of difference shrunk per pair")
    ap.add_argument("--batch", default="", help="--search, --landing, --probes' landing probes: devplace's batch "
                    "resolver (default: "
                    "build/dev/tests/placement/fidelity_batch_resolve)")
    return ap


def rendered(a, rc):
    """`rc`, after rendering docs/FIDELITY.md from results.json when --doc asks for it."""
    if a.doc:
        doc.render_doc(load_results())
    return rc


def main():
    ap = parser()
    a = ap.parse_args()
    tfr, accr = releases(a.transformers_git, "transformers"), releases(a.accelerate_git, "accelerate")
    if a.xla_git and not a.probes:
        return rendered(a, xla.run_neuron_xla(a))
    if a.boundaries:
        return boundaries.check_boundaries(a, tfr, accr)
    if a.newer:
        return newer.list_newer(tfr, accr)
    if a.probes:
        os.makedirs(a.work, exist_ok=True)
        rc = probes.run_probes(a, tfr, accr)
        if a.xla_git:
            rc = xla.run_neuron_xla(a) or rc
        return rendered(a, rc)
    if a.landing:
        os.makedirs(a.work, exist_ok=True)
        a.scenarios = a.scenarios or 300
        pairs = matrix.select_pairs(a, tfr, accr, ap.error, search.every_pair(tfr, accr))
        return rendered(a, landing.run_landing(a, tfr, accr, pairs) if pairs and not a.list else 0)
    a.scenarios = a.scenarios or 10000
    if a.search:
        os.makedirs(a.work, exist_ok=True)
        base = search.every_pair(tfr, accr)
        pairs = matrix.select_pairs(a, tfr, accr, ap.error, base)
        return rendered(a, search.run_search(a, tfr, accr, pairs) if pairs and not a.list else 0)
    if a.crosscheck:
        return crosscheck.crosscheck(a.transformers_git, a.crosscheck, tfr)
    os.makedirs(a.work, exist_ok=True)
    pairs = matrix.select_pairs(a, tfr, accr, ap.error)
    if a.list:
        return 0
    if pairs:
        matrix.run_pairs(a, tfr, accr, pairs)
    return rendered(a, 0)


if __name__ == "__main__":
    sys.exit(main())
