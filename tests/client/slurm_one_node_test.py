#!/usr/bin/env python3
"""A real one-node Slurm runs steps on the NVIDIA and Ascend fixture hosts with devplace's prolog.

For each host: `devplace slurm gres --inventory` writes gres.conf (its /dev paths moved into a
private temporary tree, where the device files are created as character devices); the test starts
Debian's munged, slurmctld and slurmd on loopback with their own key, sockets, ports, state and
spool directories under that tree (no file outside it is written, no system service touched),
with TaskProlog a wrapper around `devplace slurm task-prolog --inventory`. Then:
  - a step holding one device (`srun --gres=gpu:1`) and, while it runs, a step asking for the
    row's Type (`srun --gres=gpu:<type>:1`): each sees the row's mask variable naming exactly the
    device Slurm gave it (SLURM_STEP_GPUS), the two got different devices, and `devplace resolve
    --workload=training` inside the step answers `<type>:0` placed on that host device;
  - a two-task step with both devices: LOCAL_RANK 0/1 and WORLD_SIZE 2 from the prolog;
  - a step whose prolog is handed a SLURM_LOCALID carrying a newline and `export <mask>=0,1`:
    the prolog refuses, the step fails and its task never sees the widened mask.
Exit 77 (skipped) without the Slurm and munge binaries, or when not root.

Usage: slurm_one_node_test.py DEVPLACE_BINARY PROBE_GOLDEN_DIR
"""
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
HOSTS = {  # fixture -> (mask variable, device type)
    "nvidia-2x-h100": ("CUDA_VISIBLE_DEVICES", "cuda"),
    "npu-2x-910b": ("ASCEND_RT_VISIBLE_DEVICES", "npu"),
}


def free_ports(n):
    """`n` distinct loopback ports that are free now, drawn below the kernel's ephemeral range: a port
    the kernel handed out with bind(0) and that was closed again is handed to the next bind(0) or
    outgoing connection of any process (a neighbour test's daemon took slurmctld's port that way),
    and two such draws can even return the same port."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    held, ports = [], []
    try:
        while len(ports) < n:
            port = random.randint(10000, max(10001, ephemeral_low - 1))
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def wait_for(what, predicate, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    raise RuntimeError(f"timed out waiting for {what}")


class Cluster:
    def __init__(self, root, devplace, inventory, mask_var, extra_conf=(), ready="idle"):
        """extra_conf: more slurm.conf lines; ready: the node state (sinfo %t) start() waits for."""
        self.root, self.devplace, self.inventory, self.mask_var = root, devplace, inventory, mask_var
        self.extra_conf, self.ready = list(extra_conf), ready
        self.pids = []

    def start(self):
        r = self.root
        for d in ("munge", "state", "spool", "dev"):
            os.makedirs(os.path.join(r, d), mode=0o700, exist_ok=True)
        with open(os.path.join(r, "munge/munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(os.path.join(r, "munge/munge.key"), 0o600)
        self.sock = os.path.join(r, "munge/munge.sock")
        subprocess.run(["munged", "--force", f"--socket={self.sock}", f"--key-file={r}/munge/munge.key",
                        f"--log-file={r}/munge/munged.log", f"--pid-file={r}/munge/munged.pid",
                        f"--seed-file={r}/munge/seed"], check=True, capture_output=True)
        self.pid_files = [f"{r}/munge/munged.pid"]

        out = json.loads(subprocess.run([self.devplace, "slurm", "gres", "--json", "--inventory=" + self.inventory],
                                        check=True, capture_output=True, text=True).stdout)
        self.records = out["records"]
        with open(os.path.join(r, "gres.conf"), "w") as f:
            f.write(out["gres_conf"].replace("/dev/", r + "/dev/"))
        for rec in self.records:
            for file in rec["files"]:
                path = r + file
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        prolog = os.path.join(r, "task-prolog")
        with open(prolog, "w") as f:
            # DEVPLACE_TEST_INJECT (one step's environment): the prolog is handed a SLURM_LOCALID that
            # carries a newline and an `export` line of its own, widening the row's mask.
            f.write("#!/bin/sh\n"
                    'if [ -n "${DEVPLACE_TEST_INJECT-}" ]; then\n'
                    f"  SLURM_LOCALID=\"$(printf '0\\nexport {self.mask_var}=0,1')\"; export SLURM_LOCALID\n"
                    "fi\n"
                    f"exec {shlex.quote(self.devplace)} slurm task-prolog --inventory={shlex.quote(self.inventory)}\n")
        os.chmod(prolog, 0o755)
        inv = json.load(open(self.inventory))
        cores = int(inv["host"]["cpu"]["cores"])
        self.conf = os.path.join(r, "slurm.conf")
        self.ports = free_ports(2)
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "ClusterName=devplacetest", "SlurmctldHost=localhost(127.0.0.1)",
                "SlurmctldPort={}".format(self.ports[0]), "SlurmdPort={}".format(self.ports[1]),
                "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={self.sock}",
                "CredType=cred/munge", f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool",
                f"SlurmctldPidFile={r}/slurmctld.pid", f"SlurmdPidFile={r}/slurmd.pid",
                f"SlurmctldLogFile={r}/slurmctld.log", f"SlurmdLogFile={r}/slurmd.log",
                "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none", "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides",
                "MpiDefault=none", "ReturnToService=2", f"TaskProlog={prolog}", f"GresTypes={out['gres_types']}",
                f"NodeName=n1 NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} Sockets=1 "
                f"CoresPerSocket={cores} ThreadsPerCore=1 Gres={out['node_gres']} State=UNKNOWN",
                "PartitionName=p Nodes=n1 Default=YES MaxTime=INFINITE State=UP"] + self.extra_conf + [""]))
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for k in list(self.env):  # a surrounding job's variables must not leak into these steps
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del self.env[k]
        subprocess.run(["slurmctld", "-f", self.conf, "-c"], check=True, env=self.env)
        self.pid_files.append(f"{r}/slurmctld.pid")
        subprocess.run(["slurmd", "-f", self.conf, "-N", "n1"], check=True, env=self.env)
        self.pid_files.append(f"{r}/slurmd.pid")
        wait_for("node n1 " + self.ready, lambda: self.ready in subprocess.run(
            ["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True).stdout, 60)

    def srun(self, args, script, timeout=60, env=None):
        return subprocess.run(["srun", "-n1"] + args + ["sh", "-c", script], env=env or self.env, capture_output=True,
                              text=True, timeout=timeout, cwd=self.root)

    def stop(self):
        for pf in reversed(getattr(self, "pid_files", [])):
            try:
                pid = int(open(pf).read().split()[0])
                os.kill(pid, signal.SIGTERM)
                wait_for(f"pid {pid} to exit", lambda: not os.path.exists(f"/proc/{pid}"), 15)
            except (OSError, ValueError, RuntimeError):
                pass

    def logs(self):
        out = ""
        for name in ("slurmctld.log", "slurmd.log"):
            p = os.path.join(self.root, name)
            if os.path.exists(p):
                out += f"--- {name} (tail)\n" + "".join(open(p).readlines()[-15:])
        return out


def step_view(c, var, args, hold=0):
    """SLURM_STEP_GPUS, the mask variable and resolve's answer seen inside a step."""
    script = (f'echo "gpus=$SLURM_STEP_GPUS"; echo "mask=${{{var}-unset}}"; '
              f'{shlex.quote(c.devplace)} resolve --inventory={shlex.quote(c.inventory)} --workload=training --explain '
              '| grep -E "^(device|placed):"; '
              f"sleep {hold}")
    r = c.srun(args, script)
    text = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"srun {args} exited {r.returncode}:\n{text}")
    view = dict(re.findall(r"^(gpus|mask)=(.*)$", text, re.M))
    view["device"] = re.search(r"^device:\s+(\S+)", text, re.M).group(1)
    view["placed"] = re.search(r"^placed:\s+(.*)$", text, re.M).group(1)
    return view


def check_host(devplace, golden_dir, host, tmp):
    var, dtype = HOSTS[host]
    inventory = os.path.join(golden_dir, host + ".json")
    c = Cluster(os.path.join(tmp, host), devplace, inventory, var)
    failures = []
    try:
        c.start()
        by_num = {int(r["slurm_dev_num"]): r for r in c.records}
        holder = {}
        t = threading.Thread(target=lambda: holder.update(step_view(c, var, ["--gres=gpu:1"], hold=6)))
        t.start()
        time.sleep(2)  # the holder's step starts first and keeps its device
        typed = step_view(c, var, [f"--gres=gpu:{c.records[0]['type']}:1"])
        t.join()
        for name, v in (("holder", holder), ("typed", typed)):
            n = int(v["gpus"])
            rec = by_num.get(n)
            if rec is None:
                failures.append(f"{name}: SLURM_STEP_GPUS={n} names no record")
                continue
            # nvidia0/davinci0 -> host device 0 -> mask "0"; the job numbers it <type>:0.
            want_mask = str(rec["host_index"])
            if v["mask"] != want_mask:
                failures.append(f"{name}: {var}={v['mask']}, want {want_mask} (SLURM_STEP_GPUS={n})")
            if v["device"] != f"{dtype}:0" or not v["placed"].startswith(f"{dtype}:0 = host #{rec['host_index']} "):
                failures.append(f"{name}: resolve answered {v['device']}, placed {v['placed']!r}; "
                                f"want {dtype}:0 on host #{rec['host_index']}")
        if holder.get("gpus") == typed.get("gpus"):
            failures.append(f"both steps got SLURM_STEP_GPUS={typed.get('gpus')}: the holder did not hold its device")
        r = subprocess.run(["srun", "-n2", "--gres=gpu:2", "sh", "-c",
                            f'echo "rank=$SLURM_PROCID local=$LOCAL_RANK world=$WORLD_SIZE mask=${var}"'],
                           env=c.env, capture_output=True, text=True, timeout=60, cwd=c.root)
        got = sorted(l for l in r.stdout.splitlines() if l.startswith("rank="))
        want = [f"rank={i} local={i} world=2 mask=0,1" for i in (0, 1)]
        if got != want:
            failures.append(f"two-task step printed {got} (stderr {r.stderr.strip()!r}), want {want}")
        # The injected SLURM_LOCALID: the prolog refuses (exit 1, nothing printed), so the task
        # does not start and never sees the widened mask.
        r = c.srun(["--gres=gpu:1"], f'echo "mask=${{{var}-unset}}"', env=dict(c.env, DEVPLACE_TEST_INJECT="1"))
        if r.returncode == 0 or "mask=0,1" in r.stdout:
            failures.append(f"injected SLURM_LOCALID: srun exited {r.returncode}, printed {r.stdout.strip()!r} "
                            f"(stderr {r.stderr.strip()[-300:]!r}); want a failed step that never saw {var}=0,1")
    except Exception as e:  # noqa: BLE001 - report with the daemons' logs
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        c.stop()
    if failures:
        print(f"FAIL {host}:\n  " + "\n  ".join(failures) + "\n" + c.logs())
        return 1
    print(f"ok   {host}: holder {var}={holder['mask']}, typed {var}={typed['mask']} -> {typed['device']} "
          f"({typed['placed']}); two tasks LOCAL_RANK 0,1 WORLD_SIZE 2; injected SLURM_LOCALID refused")
    return 0


def arguments_or_skip(binaries, why_root):
    """(devplace binary, probe golden dir) from the command line, or None after printing why this
    machine cannot run a one-node Slurm (a binary missing, or not root)."""
    missing = [b for b in ("munged", "slurmctld", "slurmd") + tuple(binaries) if shutil.which(b) is None]
    why = (f"{', '.join(missing)} not installed (apt-get install slurmctld slurmd slurm-client munge)" if missing
           else None if os.geteuid() == 0 else why_root)
    if why:
        print("skipped: " + why)
        return None
    return os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])


def main():
    args = arguments_or_skip(("srun", "sinfo"), "slurmd must run as root to start steps as the job's user")
    if args is None:
        return SKIP
    devplace, golden_dir = args
    with tempfile.TemporaryDirectory(prefix="devplace-slurm-") as tmp:
        os.chmod(tmp, 0o755)
        failed = sum(check_host(devplace, golden_dir, host, tmp) for host in HOSTS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
