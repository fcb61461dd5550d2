"""--xla_git=GIT_DIR: torch_xla's own Neuron set-up (T-XLA-NEURON), executed at every torch_xla release tag
from 2.5 by neuron_xla.py against devplace; its summary is kept in results.json (doc.py renders it).
"""
import os
import sys

from common import HERE, load_results, save_results


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
