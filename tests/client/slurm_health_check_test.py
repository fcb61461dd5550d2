#!/usr/bin/env python3
"""`devplace slurm health-check --drain` as a real one-node Slurm's HealthCheckProgram drains the node.

The fixture host amd-2x-mi210-ras (its probe golden: 0000:63:00.0 FAULT with 2 uncorrectable UMC
errors) is the node's inventory. Debian's munged, slurmctld and slurmd run on loopback as in
slurm_one_node_test.py (its Cluster: own key, ports, state and spool under a private temporary tree),
with HealthCheckProgram a two-line script running `devplace slurm health-check --drain --node=n1
--inventory=<the file named in inventory-path>` (Slurm runs the program without arguments) and
HealthCheckInterval=2. Then:
  - slurmctld shows n1 drained, its reason devplace's NHC-style failure naming the device, its
    counter and the counter's source;
  - the inventory-path file is pointed at the healthy amd-2x-mi210 golden: the next check resumes
    the node (devplace drained it), and n1 is idle again;
  - drained by hand with another reason, n1 stays drained with that reason through two more healthy
    checks and two more faulty ones (each run of the program appends a line to a file: the test
    waits for those lines, not for a time);
  - `devplace slurm health-check` by hand prints the NHC line and exits 1 on the faulty inventory,
    prints nothing and exits 0 on the healthy one.
Exit 77 (skipped) without the Slurm and munge binaries, or when not root.

Usage: slurm_health_check_test.py DEVPLACE_BINARY PROBE_GOLDEN_DIR
"""
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_one_node_test as one  # noqa: E402

SKIP = 77
FAULTY, HEALTHY = "amd-2x-mi210-ras", "amd-2x-mi210"
WANT_REASON = ("devplace: cuda/amd device 0 (0000:63:00.0) FAULT: ras/umc_err_count ue 2 "
               "(sysfs /sys/bus/pci/devices/0000:63:00.0/ras/umc_err_count)")


def node_view(c):
    """(state, reason) of n1 as slurmctld has them."""
    r = subprocess.run(["sinfo", "-h", "-N", "-n", "n1", "-o", "%T|%E"], env=c.env, capture_output=True, text=True)
    state, _, reason = r.stdout.strip().partition("|")
    return state, reason


def run_count(path):
    try:
        with open(path) as f:
            return len(f.readlines())
    except FileNotFoundError:
        return 0


def main():
    args = one.arguments_or_skip(("sinfo", "scontrol"), "slurmd runs its HealthCheckProgram as root, and must run as root")
    if args is None:
        return SKIP
    devplace, golden_dir = args
    faulty, healthy = (os.path.join(golden_dir, h + ".json") for h in (FAULTY, HEALTHY))
    failures = []

    by_hand = subprocess.run([devplace, "slurm", "health-check", "--inventory=" + faulty], capture_output=True, text=True)
    want_line = "ERROR:  devplace:  Health check failed:  " + WANT_REASON[len("devplace: "):]
    if by_hand.returncode != 1 or by_hand.stdout != want_line + "\n":
        failures.append(f"by hand on {FAULTY}: exit {by_hand.returncode}, printed {by_hand.stdout!r} "
                        f"(stderr {by_hand.stderr!r}); want exit 1 and {want_line!r}")
    by_hand = subprocess.run([devplace, "slurm", "health-check", "--inventory=" + healthy], capture_output=True, text=True)
    if by_hand.returncode != 0 or by_hand.stdout:
        failures.append(f"by hand on {HEALTHY}: exit {by_hand.returncode}, printed {by_hand.stdout!r}; want exit 0, nothing")

    with tempfile.TemporaryDirectory(prefix="devplace-slurm-health-") as tmp:
        os.chmod(tmp, 0o755)
        root = os.path.join(tmp, FAULTY)
        os.makedirs(root)
        pointer, script = os.path.join(root, "inventory-path"), os.path.join(root, "health-check")
        runs = os.path.join(root, "health-check-runs")  # a line per run of the program
        with open(pointer, "w") as f:
            f.write(faulty)
        conf = os.path.join(root, "slurm.conf")
        with open(script, "w") as f:
            # slurmd runs the program without arguments, and its environment may lack SLURM_CONF.
            f.write("#!/bin/sh\n"
                    f"echo run >> {shlex.quote(runs)}\n"
                    f"SLURM_CONF={shlex.quote(conf)}; export SLURM_CONF\n"
                    f"exec {shlex.quote(devplace)} slurm health-check --drain --node=n1 "
                    f"--inventory=\"$(cat {shlex.quote(pointer)})\"\n")
        os.chmod(script, 0o755)
        c = one.Cluster(root, devplace, faulty, "ROCR_VISIBLE_DEVICES",
                        extra_conf=[f"HealthCheckProgram={script}", "HealthCheckInterval=2"], ready="drain")
        try:
            c.start()  # waits until slurmctld shows n1 drained (or drng)
            state, reason = node_view(c)
            if not reason.startswith(WANT_REASON):
                failures.append(f"n1 is {state!r} with reason {reason!r}; want it to start with {WANT_REASON!r}")
            with open(pointer, "w") as f:
                f.write(healthy)
            one.wait_for("n1 resumed by the next health check", lambda: node_view(c)[0] == "idle", 60)
            # A node drained for another reason stays drained through two more healthy checks.
            subprocess.run(["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=operator maintenance"],
                           env=c.env, check=True)
            start = run_count(runs)
            one.wait_for("two more health checks", lambda: run_count(runs) >= start + 2, 60)
            state, reason = node_view(c)
            if not state.startswith("drain") or not reason.startswith("operator maintenance"):
                failures.append(f"after the operator's drain n1 is {state!r} with reason {reason!r}; want it kept")
            # ... and through two checks that find the faulty GPU again: not drained over, its reason kept.
            with open(pointer, "w") as f:
                f.write(faulty)
            start = run_count(runs)
            one.wait_for("two more health checks", lambda: run_count(runs) >= start + 2, 60)
            state, reason = node_view(c)
            if not state.startswith("drain") or not reason.startswith("operator maintenance"):
                failures.append(f"after two faulty checks on the operator's drain n1 is {state!r} with reason "
                                f"{reason!r}; want the operator's reason kept")
        except Exception as e:  # noqa: BLE001 - report with the daemons' logs
            failures.append(f"{type(e).__name__}: {e} (n1: {node_view(c) if hasattr(c, 'env') else 'not started'})")
        finally:
            c.stop()
        if failures:
            print("FAIL:\n  " + "\n  ".join(failures) + "\n" + c.logs())
            return 1
    print(f"ok   {FAULTY}: n1 drained with reason {WANT_REASON!r}; resumed once the inventory was {HEALTHY}'s; "
          "an operator's drain kept through healthy and faulty checks; by hand: the NHC line and exit 1, nothing and exit 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
