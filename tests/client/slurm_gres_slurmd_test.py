#!/usr/bin/env python3
"""Debian's real slurmd parses every gres.conf `devplace slurm gres` writes.

For each fixture inventory (tests/golden/probe) with accelerators: the CLI writes gres.conf
offline (--inventory), its /dev paths are moved into a private temporary tree where each device
file is created as a character device (slurmd refuses plain files), a minimal slurm.conf takes the
GresTypes= and NodeName ... Gres= lines the CLI printed as comments (SlurmdParameters=
config_overrides: the node is the fixture's, not this machine), and `slurmd -G` (print the parsed
GRES configuration and exit) must report no error and one GRES per record with the generated
type, file(s) and cores. Nothing outside the temporary tree is read or written but slurmd's own
binaries. Exit 77 (skipped) when slurmd is not installed or device files cannot be created (not
root).

Usage: slurm_gres_slurmd_test.py DEVPLACE_BINARY PROBE_GOLDEN_DIR
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

SKIP = 77


def slurm_conf_lines(gres_conf):
    """The slurm.conf lines the CLI prints as comments."""
    prefix = "# slurm.conf: "
    return [l[len(prefix):] for l in gres_conf.splitlines() if l.startswith(prefix)]


def check_host(devplace, inventory_path, tmp):
    inv = json.load(open(inventory_path))
    out = json.loads(subprocess.run([devplace, "slurm", "gres", "--json", "--inventory=" + inventory_path],
                                    check=True, capture_output=True, text=True).stdout)
    gres_conf, recs = out["gres_conf"], out.get("records", [])
    if not recs:
        return 0
    root = os.path.join(tmp, os.path.basename(inventory_path).removesuffix(".json"))
    os.makedirs(root)
    moved = gres_conf.replace("/dev/", root + "/dev/")
    for r in recs:
        for f in r["files"]:
            path = root + f
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path):
                os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with open(os.path.join(root, "gres.conf"), "w") as f:
        f.write(moved)
    cpu = inv["host"]["cpu"]
    cores = int(cpu.get("cores", 1)) or 1
    threads = int(cpu.get("threads", cores)) or cores
    conf_lines = slurm_conf_lines(gres_conf)
    node_line = next(l for l in conf_lines if l.startswith("NodeName="))
    gres = node_line.split(" Gres=", 1)[1]
    with open(os.path.join(root, "slurm.conf"), "w") as f:
        f.write("\n".join([
            "ClusterName=devplacetest",
            "SlurmctldHost=localhost",
            "SlurmdParameters=config_overrides",
            next(l for l in conf_lines if l.startswith("GresTypes=")),
            f"NodeName=n1 Sockets=1 CoresPerSocket={cores} ThreadsPerCore={threads // cores} Gres={gres} State=UNKNOWN",
            "PartitionName=p Nodes=n1 Default=YES",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmdLogFile={root}/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "",
        ]))
    run = subprocess.run(["slurmd", "-f", os.path.join(root, "slurm.conf"), "-N", "n1", "-G"],
                         capture_output=True, text=True, timeout=60)
    text = run.stdout + run.stderr
    name = os.path.basename(inventory_path)
    failures = []
    if run.returncode != 0:
        failures.append(f"slurmd -G exited {run.returncode}")
    failures += [f"slurmd: {l}" for l in text.splitlines() if "error" in l.lower()]
    # slurmd's Index is the number SLURM_STEP_GPUS will list: devplace's slurm_dev_num must agree.
    parsed = re.findall(r"Gres Name=(\S+) Type=(\S+) Count=(\d+) Index=(-?\d+) ID=\d+ File=(\S+)(?: Cores=(\S+))?", text)
    if len(parsed) != len(recs):
        failures.append(f"slurmd parsed {len(parsed)} GRES, devplace wrote {len(recs)}")
    for i, ((pname, ptype, count, index, pfile, pcores), r) in enumerate(zip(parsed, recs)):
        got = (pname, ptype, int(count), int(index), pfile, pcores)
        want = (r["name"], r["type"], 1, int(r["slurm_dev_num"]), ",".join(root + f for f in r["files"]), r["cores"])
        if got != want:
            failures.append(f"record {i}: slurmd parsed {got}, devplace wrote {want}")
    if failures:
        print(f"FAIL {name}:\n  " + "\n  ".join(failures) + "\n--- gres.conf\n" + moved + "--- slurmd -G\n" + text)
        return 1
    print(f"ok   {name}: {len(recs)} GRES ({', '.join(sorted({r['type'] for r in recs}))})")
    return 0


def main():
    devplace, golden_dir = sys.argv[1], sys.argv[2]
    if shutil.which("slurmd") is None:
        print("skipped: slurmd not installed (apt-get install slurmd; scripts/setup installs it)")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="devplace-slurmd-") as tmp:
        try:
            os.mknod(os.path.join(tmp, "probe"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            print("skipped: cannot create character devices here (slurmd only accepts them in File=); run as root")
            return SKIP
        failed, checked = 0, 0
        for entry in sorted(os.listdir(golden_dir)):
            if entry.endswith(".json"):
                failed += check_host(devplace, os.path.join(golden_dir, entry), tmp)
                checked += 1
    print(f"{checked} fixture hosts, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
