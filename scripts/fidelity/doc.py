"""--doc: docs/FIDELITY.md rendered from results.json: the matrix's pairs, the unintended and intended
differences, the coverage table of --probes, the summary of --xla_git, the generated runs of --search and where
the modules land (--landing, landing.py's landing_doc).
"""
import collections
import json
import os

import landing
from common import ROOT, vkey
from compare import HOSTS

DOC = os.path.join(ROOT, "docs/FIDELITY.md")


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
        "and `use_cpu`; `PartialState().device` single and rank 1; where `device_map=\"auto\"` puts the first module "
        "(Accelerate's `infer_auto_device_map` with `get_max_memory()`'s budgets; rows that ran before 2026-12-06 compared "
        "`get_max_memory()`'s first key, which differs only where a budget holds no module); "
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
    lines += search_doc(results.get("search"), results.get("search_plan"), results.get("search_speed"))
    lines += landing.landing_doc(results.get("landing"))
    with open(DOC, "w") as f:
        f.write("\n".join(lines))


def coverage_doc(cov):
    """The coverage table: each rule's covering workload, the library's answer on each side and devplace's."""
    if not cov:
        return []

    def ans(x):  # a code span: the library's own backticks (error messages) would end it
        return f"`{x.get('device', x.get('error', ''))[:70].replace('`', chr(39))}`"

    rows = cov["rows"]
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
    newer = rows_since(cov)
    unseen = cov.get("not_at_boundary", {})
    lines += ["", "Rows without a covering workload (the coverage check fails for each): " +
              (", ".join(cov["missing"]) or "none") + ". Rows no workload can show at their boundary: " +
              ("; ".join(f"{r}: {why}" for r, why in sorted(unseen.items())) or "none") +
              ". The landing probes' devplace column (probes.py `LW`): devplace's device where they compare the "
              "first module's device, else the devices the library fills given devplace's `max_memory`. Rows of "
              "`versions.cc` this run did not have (added since, "
              "or without a workload in `probes.py`; the next `--probes` run executes them): " +
              (", ".join(newer) or "none") + ".", ""]
    return lines


def rows_since(cov):
    """versions.cc's rows (tests/placement/version_boundaries.txt) that the stored coverage run has no row for, but
    the oldest supported releases' orders (nothing to cover, as probes.py leaves them out)."""
    first = {}
    with open(os.path.join(ROOT, "tests/placement/version_boundaries.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                rule, lib, _, tag = line.split()
                first[rule] = min(first.get(rule, (lib, tag)), (lib, tag), key=lambda x: vkey(x[1].lstrip("v")))
    have = {r["rule"] for r in cov["rows"]} | set(cov.get("not_at_boundary", {}))
    return sorted(r for r, (lib, tag) in first.items()
                  if r not in have and r not in cov["missing"] and (lib, tag) not in (("accelerate", "v0.25.0"),
                                                                                      ("transformers", "v4.30.0")))


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


def search_doc(runs, plan, sp=None):
    """The generated runs (--search): per pair the seed, the scenarios, the time and the differences by class; the
    time every pair would take (`sp`: results.json "search_speed", where the time goes and the fork server's
    before/after); the shrunk differences."""
    lines = ["## Generated scenarios (`--search`)", "",
             "Opt-in, not part of `scripts/test` (it needs the mirrors and takes hours for every pair). Instead of the "
             "fixed matrix, `run.py --search` draws scenarios from the rules' input space (scripts/fidelity/search.py): "
             "every simulated host of the matrix and the probes, the conventions (`PartialState().device`, "
             "`TrainingArguments(...).device`, where `device_map=\"auto\"` puts the first module, `pipeline(device=...)` "
             "with strings and ints, from_pretrained's conversion of an explicit `device_map` string), torchrun ranks "
             "and world sizes (single-process torchrun, world size 1, included) or none, `use_cpu`/`no_cuda`, "
             "`ACCELERATE_USE_CPU` and `ACCELERATE_TORCH_DEVICE` with valid, invalid and no values, torch_xla at three "
             "releases (1.13.1: XRT, no XLA device without a TPU; 2.1.0 and 2.5.0: PJRT's CPU device by default, "
             "T-XLA-PJRT) with `USE_TORCH_XLA` (on, off, invalid, unset) and `PJRT_SELECT_DEFAULT_DEVICE` (0, 1, "
             "unset). Not sampled yet: visibility masks (`CUDA_VISIBLE_DEVICES` "
             "and the other vendors' variables: torch and the drivers read them, and the oracle executes no code of "
             "theirs), MPI launchers' variables and package versions.",
             "The libraries run in one `oracle.py` process per batch that one process can hold (the torch_xla "
             "release, the variables read at import, Intel Extension for PyTorch), each forked by "
             "`oracle_server.py`, which imports torch once per pair (the libraries are imported afresh in each "
             "child, with the batch's environment), devplace in one `fidelity_batch_resolve` process "
             "(the placement library on the fixture hosts' probe goldens). A difference that is not an intended one is "
             "shrunk (each one-step simpler scenario executed, the first still differing kept, until none does) and "
             "written with its evidence into `tests/placement/fidelity_search_cases.jsonl`, which ctest "
             "`FidelitySearch.*` holds the resolver to.", "",
             "Rerun (a seed draws the same scenarios again):", "",
             "    /usr/bin/python3 scripts/fidelity/run.py --accelerate_git=$A --transformers_git=$T --search \\",
             "        --seed=1 --scenarios=10000 [--pairs=4.36.2:0.25.0,:0.29.1] --doc", ""]
    if not runs:
        return lines + ["Not run yet.", ""]
    lines += ["| Transformers | Accelerate | seed | scenarios | time | oracle processes | agree | intended | harness "
              "| unintended | kinds shrunk |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    harness = collections.Counter()
    for r in runs.values():
        intended = ", ".join(f"{n} {k[len('intended: '):].split(' (')[0]}" for k, n in r["classes"].items()
                             if k.startswith("intended"))
        own = {k[len("harness: "):]: n for k, n in r["classes"].items() if k.startswith("harness")}
        harness.update(own)
        lines.append(f"| {r['transformers'] or '–'} | {r['accelerate']} | {r['seed']} | {r['scenarios']} | "
                     f"{r['seconds']:.0f} s | {r['oracle_processes']} | {r['classes'].get('agree', 0)} | "
                     f"{intended or '–'} | {sum(own.values())} | {r['unintended']} | {r['kinds_shrunk']} |")
    lines += ["", "Harness differences (the simulated host or a stand-in differs from the real one, so neither side is "
              "judged; each is listed here, never counted as agreement):", ""]
    lines += [f"- {n} x {why}" for why, n in sorted(harness.items())] or ["- none"]

    def median(rs):
        per = sorted(r["seconds"] * 10000.0 / r["scenarios"] for r in rs)
        return per[len(per) // 2] if per else None

    # The time statement: the runs of the current runner (--jobs: oracle servers at once) where there are any, else
    # the ones with forked batches (oracle_server.py), else all.
    timed = ([r for r in runs.values() if r.get("jobs")] or [r for r in runs.values() if r.get("forked")]
             or list(runs.values()))
    tf_m = median([r for r in timed if r["transformers"]])
    acc_m = median([r for r in timed if not r["transformers"]])
    jobs = sorted({r["jobs"] for r in timed if r.get("jobs")})
    lines += ["", "Measured on the project's 2-core machine" +
              (f" with `--jobs={'/'.join(map(str, jobs))}`, pairs one after the other, beside the session's builds "
               "and tests" if jobs else " under `nice -n 19` beside other builds and test runs (load 6 to 17)") +
              (f" ({len(timed)} of the {len(runs)} rows; the others ran with an older, slower runner)"
               if len(timed) < len(runs) else "") + ": per 10,000 scenarios, median " +
              ", ".join(f"{what} {m / 60:.1f} min" for what, m in (("a Transformers pair", tf_m),
                                                                   ("an Accelerate pair", acc_m)) if m) + "."]
    if plan and tf_m and acc_m:
        hours = (plan["transformers"] * tf_m + plan["accelerate"] * acc_m) / 3600
        lines.append(f"Every pair ({plan['pairs']}: {plan['transformers']} Transformers releases from 4.36 with their "
                     f"Accelerate, {plan['accelerate']} Accelerate releases from 0.25 alone, patch releases included) at "
                     f"10,000 scenarios each: about {hours:.0f} hours at those medians on this machine; pairs run "
                     f"one after the other, so the run can be split with --pairs / --only.")
    speed = sp.get("rows") if sp else None
    if speed:
        lines += ["", f"Where a pair's time goes (profiled {sp['ran']}): an oracle process's start, mostly `import torch` "
                  f"({sp['start_s']} s of {sp['process_s']} s for a one-scenario process), is paid per batch, and the "
                  f"torch_xla releases and `PJRT_SELECT_DEFAULT_DEVICE` make up to {sp['groups_max']} batches a pair at "
                  f"10,000 scenarios; the library code takes about {sp['per_scenario_ms']} ms a scenario; devplace's side "
                  f"under 1 % (one batch process). `oracle_server.py` imports torch once per pair and forks each batch "
                  f"({sp['fork_s']} s a fork). The same scenarios (seed {sp['seed']}, {sp['scenarios']} a pair, "
                  f"load {sp['load']}), one process per batch before, forked after: {sp['identical']}.", ""]
        lines += ["| pair | batches | before | after | after / before |", "|---|---|---|---|---|"]
        lines += [f"| {r['pair']} | {r['batches']} | {r['before_s']:.0f} s | {r['after_s']:.0f} s | "
                  f"{r['after_s'] / r['before_s']:.2f} |" for r in speed]
    later = sp.get("later") if sp else None
    if later:
        lines += [f"Later the same day ({later['ran']}): {later['text']}", ""]
    lines += ["", "### Differences found, shrunk", ""]
    shrunk = [(r, c) for r in runs.values() for c in r["shrunk"]]
    if not shrunk:
        return lines + ["None.", ""]
    lines += ["| pair | scenario | library | devplace |", "|---|---|---|---|"]
    for r, c in shrunk:
        cell = lambda v: json.dumps(v)[:160].replace("`", "'").replace("|", "/")  # noqa: E731 (a table cell)
        lines.append(f"| {r['transformers'] or '–'} + {r['accelerate']} | `{cell(c['scenario'])}` | "
                     f"`{cell(c['library'])}` | `{cell(c['devplace'])}` |")
    return lines + [""]
