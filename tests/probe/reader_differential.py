#!/usr/bin/env python3
"""Probe differential: devplace's inventory of a fixture host against a real reader of the same tree.

Usage: reader_differential.py --probe=DEVPLACE_PROBE --host_dir=TREE --reader=hwloc|lspci|rocm_smi

Readers (each is the vendor's or the distribution's own code, reading the fixture as it reads a host):
  hwloc     Debian's hwloc, `lstopo-no-graphics --whole-io --of xml` with HWLOC_FSROOT=TREE (and its x86
            CPUID backend off, so the machine running the test adds nothing): logical CPU and NUMA node
            counts, each NUMA node's CPUs and memory, the PCI functions scanned, and each accelerator's
            vendor, device, class and NUMA locality (the NUMA nodes of the object hwloc attaches it to,
            from the function's local_cpus).
  lspci     pciutils' `lspci -A linux-sysfs -O sysfs.path=TREE/sys/bus/pci -vmm -nn -D`: the PCI functions
            scanned and each accelerator's vendor, device, class and NUMA node; and `-vv`: each
            accelerator's PCIe link, LnkCap (maximum width and speed) and LnkSta (current), from the
            PCI Express capability in its config space, against devplace's sysfs link counters.
  rocm_smi  Debian's ROCm SMI library (librocm_smi64.so.1, through ctypes) in a private mount namespace
            with TREE/sys/{class,bus,module} bind-mounted over /sys/{class,bus,module}; devplace-probe
            runs in the same namespace (so a ROCm SMI prober in devplace reads the same tree): the AMD
            GPUs' count, bus ids, unique ids, VRAM total and used, and the compute processes of
            /sys/class/kfd/kfd/proc (pid, the GPU it runs on, its VRAM; reader rocm_smi_processes); and the
            amdgpu RAS counters (rsmi_dev_ecc_enabled_get, rsmi_dev_ecc_status_get and rsmi_dev_ecc_count_get
            per block against devplace's ras/features and ras/<block>_err_count counters), with the device
            FAULT exactly when ROCm SMI counts an uncorrectable error.

Exit status: 0 when they agree, 1 when they disagree (both readings side by side on stdout), 77 (ctest
SKIP_RETURN_CODE) when the reader cannot run here: not installed, or no private mount namespace.
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SKIP = 77
TIMEOUT_S = 60


def skip(message):
    print("SKIPPED: " + message)
    sys.exit(SKIP)


def run(argv, env=None, timeout=TIMEOUT_S):
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, check=False)


# ------------------------------------------------------------------------------------------------
# devplace's reading
# ------------------------------------------------------------------------------------------------

def library_flags(probe, keep=()):
    """`--<lib>_library=` for every vendor library the probe knows except those in `keep`: the sysfs
    view (a real NVML or Level Zero loader installed on the test machine must not answer for the
    fixture). In the ROCm SMI namespace ROCm SMI's own is kept: there it reads the fixture."""
    text = run([probe, "--helpfull"]).stdout + run([probe, "--help"]).stdout
    flags = sorted(set(re.findall(r"--([a-z0-9_]+_library)\b", text)))
    return ["--%s=" % f for f in flags if f not in keep]


def devplace_inventory(probe, host_dir):
    r = run([probe, "--host_root=" + host_dir, "--json"] + library_flags(probe))
    if r.returncode != 0:
        raise SystemExit("devplace-probe failed (exit %d): %s" % (r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)


def devplace_devices(inv):
    out = {}
    for backend in inv.get("backends", []):
        for d in backend.get("devices", []):
            if d.get("pciBusId"):
                out[d["pciBusId"].lower()] = dict(d, row=backend.get("row", ""))
    return out


def devplace_pci_count(inv):
    for report in inv.get("probeReports", []):
        m = re.match(r"(\d+) PCI functions", report.get("message", ""))
        if m:
            return int(m.group(1))
    return 0


def parse_cpulist(text):
    cpus = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def fmt_set(values):
    return "{" + ",".join(str(v) for v in sorted(values)) + "}"


# ------------------------------------------------------------------------------------------------
# Comparison table
# ------------------------------------------------------------------------------------------------

class Table:
    def __init__(self, reader):
        self.reader = reader
        self.rows = []

    def check(self, what, devplace, reader):
        self.rows.append((what, str(devplace), str(reader), devplace == reader))

    def finish(self, notes=()):
        width = max([len(r[0]) for r in self.rows] + [4])
        dwidth = max([len(r[1]) for r in self.rows] + [8])
        print("%-*s  %-*s  %s" % (width, "what", dwidth, "devplace", self.reader))
        for what, d, r, same in self.rows:
            print("%-*s  %-*s  %s%s" % (width, what, dwidth, d, r, "" if same else "    <-- DISAGREE"))
        for note in notes:
            print("note: " + note)
        bad = [r for r in self.rows if not r[3]]
        if bad:
            print("%d of %d readings disagree" % (len(bad), len(self.rows)))
            sys.exit(1)
        print("all %d readings agree" % len(self.rows))
        sys.exit(0)


# ------------------------------------------------------------------------------------------------
# hwloc
# ------------------------------------------------------------------------------------------------

def parse_hwloc_bitmap(text):
    """hwloc's bitmap string: 32-bit hex words, most significant first, comma separated."""
    bits = set()
    if not text:
        return bits
    words = text.split(",")
    for i, word in enumerate(reversed(words)):
        value = int(word, 16)
        for b in range(32):
            if value >> b & 1:
                bits.add(i * 32 + b)
    return bits


def hwloc_reading(host_dir):
    lstopo = shutil.which("lstopo-no-graphics") or shutil.which("lstopo")
    if not lstopo:
        skip("hwloc's lstopo is not installed (Debian package hwloc; scripts/setup installs it)")
    env = dict(os.environ, HWLOC_FSROOT=host_dir, HWLOC_COMPONENTS="-x86")
    env.pop("HWLOC_XMLFILE", None)
    r = run([lstopo, "--whole-io", "--of", "xml", "-"], env=env)
    if r.returncode != 0:
        raise SystemExit("lstopo failed (exit %d): %s" % (r.returncode, r.stderr.strip()))
    root = ET.fromstring(r.stdout)
    pus, numa, pci, warnings = [], {}, {}, [line for line in r.stderr.splitlines() if line.strip()]

    def walk(obj, nodeset):
        if obj.get("nodeset") is not None:
            nodeset = parse_hwloc_bitmap(obj.get("nodeset"))
        kind = obj.get("type")
        if kind == "PU":
            pus.append(int(obj.get("os_index")))
        elif kind == "NUMANode":
            numa[int(obj.get("os_index"))] = (parse_hwloc_bitmap(obj.get("cpuset")), int(obj.get("local_memory", "0")))
        elif kind == "PCIDev":
            # pci_type: "CCSS [VVVV:DDDD] [SVVV:SDDD] RR"
            m = re.match(r"([0-9a-f]{4}) \[([0-9a-f]{4}):([0-9a-f]{4})\]", obj.get("pci_type", ""))
            pci[obj.get("pci_busid").lower()] = {
                "class": m.group(1) if m else "?", "vendor": m.group(2) if m else "?",
                "device": m.group(3) if m else "?", "nodeset": nodeset}
        for child in obj.findall("object"):
            walk(child, nodeset)

    for top in root.findall("object"):
        walk(top, set())
    return {"pus": pus, "numa": numa, "pci": pci, "warnings": warnings}


def compare_hwloc(inv, host_dir):
    hw = hwloc_reading(host_dir)
    t = Table("hwloc")
    host = inv.get("host", {})
    aborted = [w for w in hw["warnings"] if "aborting linux discovery" in w]
    t.check("hwloc's Linux discovery", "complete", "aborted" if aborted else "complete")
    t.check("logical CPUs", int(host.get("cpu", {}).get("threads", 0)), len(hw["pus"]))
    nodes = {int(n.get("id", 0)): n for n in host.get("numaNodes", [])}
    t.check("NUMA nodes", fmt_set(nodes), fmt_set(hw["numa"]))
    for node in sorted(set(nodes) | set(hw["numa"])):
        mine, theirs = nodes.get(node, {}), hw["numa"].get(node, (set(), 0))
        t.check("node%d CPUs" % node, fmt_set(parse_cpulist(mine.get("cpulist"))), fmt_set(theirs[0]))
        t.check("node%d memory bytes" % node, int(mine.get("memoryTotalBytes", 0)), theirs[1])
    t.check("PCI functions scanned", devplace_pci_count(inv), len(hw["pci"]))
    all_nodes = set(hw["numa"])
    for bus, d in sorted(devplace_devices(inv).items()):
        theirs = hw["pci"].get(bus)
        if theirs is None:
            t.check(bus, "present", "absent")
            continue
        t.check(bus + " vendor:device", "%s:%s" % (d.get("vendorId"), d.get("deviceId")),
                "%s:%s" % (theirs["vendor"], theirs["device"]))
        t.check(bus + " class", d.get("pciClass", "")[:4], theirs["class"])
        # numa_node -1 (no affinity) is local to every node, as the kernel's local_cpus says.
        numa_node = int(d.get("numaNode", -1))
        t.check(bus + " NUMA nodes", fmt_set({numa_node} if numa_node >= 0 else all_nodes), fmt_set(theirs["nodeset"]))
    t.finish(["hwloc: " + w for w in hw["warnings"]])


# ------------------------------------------------------------------------------------------------
# lspci
# ------------------------------------------------------------------------------------------------

def compare_lspci(inv, host_dir):
    lspci = shutil.which("lspci")
    if not lspci:
        skip("lspci is not installed (Debian package pciutils; scripts/setup installs it)")
    t = Table("lspci")
    pci_dir = os.path.join(host_dir, "sys", "bus", "pci")
    functions, links = {}, {}
    notes = []
    if os.path.isdir(os.path.join(pci_dir, "devices")):
        r = run([lspci, "-A", "linux-sysfs", "-O", "sysfs.path=" + pci_dir, "-vmm", "-nn", "-D"])
        if r.returncode != 0:
            raise SystemExit("lspci failed (exit %d): %s" % (r.returncode, r.stderr.strip()))
        notes += ["lspci: " + line for line in r.stderr.splitlines() if line.strip()]
        links, note = lspci_links(lspci, pci_dir)
        notes += [note] if note else []
        for block in r.stdout.strip().split("\n\n"):
            fields = dict(line.split(":\t", 1) for line in block.splitlines() if ":\t" in line)
            if "Slot" not in fields:
                continue
            ids = {k: (re.search(r"\[([0-9a-f]{4})\]\s*$", fields.get(k, "")) or [None, "?"])[1]
                   for k in ("Class", "Vendor", "Device")}
            functions[fields["Slot"].lower()] = dict(ids, ProgIf=fields.get("ProgIf", "00"),
                                                     NUMANode=fields.get("NUMANode"))
    else:
        notes.append("the tree has no sys/bus/pci: no PCI bus for either reader")
    t.check("PCI functions scanned", devplace_pci_count(inv), len(functions))
    for bus, d in sorted(devplace_devices(inv).items()):
        theirs = functions.get(bus)
        if theirs is None:
            t.check(bus, "present", "absent")
            continue
        t.check(bus + " vendor:device", "%s:%s" % (d.get("vendorId"), d.get("deviceId")),
                "%s:%s" % (theirs["Vendor"], theirs["Device"]))
        t.check(bus + " class", d.get("pciClass", ""), theirs["Class"] + theirs["ProgIf"])
        # lspci prints NUMANode only for a node >= 0
        t.check(bus + " NUMA node", int(d.get("numaNode", -1)), int(theirs["NUMANode"] or -1))
        # The PCIe link: devplace's sysfs counters against LnkCap / LnkSta of the function's
        # PCI Express capability in its config space; compared where either side has one.
        ours = devplace_link(d)
        if ours or bus in links:
            t.check(bus + " PCIe link (LnkCap; LnkSta)", ours or "none", links.get(bus, "none"))
    t.finish(notes)


def gts(text):
    """A link speed in GT/s as both readers can be compared: "16.0 GT/s PCIe" and "16GT/s" -> "16"."""
    m = re.match(r"\s*([0-9.]+)\s*GT/s", text or "")
    return "%g" % float(m.group(1)) if m else "?"


def devplace_link(d):
    counters = {c.get("name"): c.get("value", "") for c in d.get("healthCounters", [])}
    if not any(k in counters for k in ("max_link_width", "current_link_width", "max_link_speed", "current_link_speed")):
        return None
    return "max x%s %s GT/s; current x%s %s GT/s" % (
        counters.get("max_link_width", "?"), gts(counters.get("max_link_speed")),
        counters.get("current_link_width", "?"), gts(counters.get("current_link_speed")))


def lspci_links(lspci, pci_dir):
    """({bus id: "max xW S GT/s; current xW S GT/s"} from `lspci -vv`'s LnkCap and LnkSta lines, a note
    when lspci -vv could not read the tree)."""
    r = run([lspci, "-A", "linux-sysfs", "-O", "sysfs.path=" + pci_dir, "-vv", "-D"])
    if r.returncode != 0:  # a tree without the irq and resource files -vv reads: no link seen
        return {}, "lspci -vv read no link (exit %d: %s)" % (r.returncode, r.stderr.strip().splitlines()[-1:])
    out, bus, cap = {}, None, None
    for line in r.stdout.splitlines():
        m = re.match(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) ", line)
        if m:
            bus, cap = m.group(1).lower(), None
            continue
        m = re.search(r"(LnkCap|LnkSta):\s.*?Speed ([0-9.]+GT/s)[^,]*, Width x(\d+)", line)
        if bus and m:
            if m.group(1) == "LnkCap":
                cap = "max x%s %s GT/s" % (m.group(3), gts(m.group(2)))
            else:
                out[bus] = "%s; current x%s %s GT/s" % (cap or "max ?", m.group(3), gts(m.group(2)))
    return out, None


# ------------------------------------------------------------------------------------------------
# ROCm SMI (in a private mount namespace)
# ------------------------------------------------------------------------------------------------

ROCM_SMI_SONAME = "librocm_smi64.so.1"


class ProcessInfo(ctypes.Structure):
    # rsmi_process_info_t (rocm_smi.h, ROCm 5.x)
    _fields_ = [("process_id", ctypes.c_uint32), ("pasid", ctypes.c_uint32), ("vram_usage", ctypes.c_uint64),
                ("sdma_usage", ctypes.c_uint64), ("cu_occupancy", ctypes.c_uint32)]


class ErrorCount(ctypes.Structure):
    # rsmi_error_count_t (rocm_smi.h, ROCm 5.x), with room for the deferred count later versions add
    _fields_ = [("correctable_err", ctypes.c_uint64), ("uncorrectable_err", ctypes.c_uint64),
                ("spare", ctypes.c_uint64 * 2)]


# rsmi_gpu_block_t: the RAS blocks whose error counts rsmi_dev_ecc_count_get reads (the others answer
# RSMI_STATUS_NOT_SUPPORTED), by the name of the amdgpu file it reads, ras/<name>_err_count.
RSMI_RAS_BLOCKS = {"umc": 0x1, "sdma": 0x2, "gfx": 0x4, "mmhub": 0x8, "pcie_bif": 0x20, "hdp": 0x40, "xgmi_wafl": 0x80}
RSMI_RAS_ERR_STATE_ENABLED = 6


def rocm_smi_ras(lib, i):
    """A device's RAS reading: the enabled-blocks mask, and per block its state and error counts."""
    mask = ctypes.c_uint64()
    ras = {"enabled_status": lib.rsmi_dev_ecc_enabled_get(i, ctypes.byref(mask)), "enabled": mask.value, "blocks": {}}
    for name, bit in RSMI_RAS_BLOCKS.items():
        count, state = ErrorCount(), ctypes.c_int()
        status = lib.rsmi_dev_ecc_count_get(i, ctypes.c_uint64(bit), ctypes.byref(count))
        state_status = lib.rsmi_dev_ecc_status_get(i, ctypes.c_uint64(bit), ctypes.byref(state))
        ras["blocks"][name] = {"status": status, "ue": count.uncorrectable_err, "ce": count.correctable_err,
                               "enabled": state_status == 0 and state.value == RSMI_RAS_ERR_STATE_ENABLED}
    return ras


def rocm_smi_child():
    """Runs inside the namespace: ROCm SMI's reading as JSON on stdout."""
    lib = ctypes.CDLL(ROCM_SMI_SONAME)
    out = {"init": lib.rsmi_init(ctypes.c_uint64(0)), "devices": [], "processes": []}
    if out["init"] != 0:
        print(json.dumps(out))
        return
    n = ctypes.c_uint32(0)
    out["num_status"] = lib.rsmi_num_monitor_devices(ctypes.byref(n))
    for i in range(n.value):
        bdf, total, used, uid = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        dev = {"index": i}
        dev["pci_status"] = lib.rsmi_dev_pci_id_get(i, ctypes.byref(bdf))
        b = bdf.value
        dev["bus_id"] = "%04x:%02x:%02x.%x" % (b >> 32 & 0xffff, b >> 8 & 0xff, b >> 3 & 0x1f, b & 0x7)
        if lib.rsmi_dev_memory_total_get(i, 0, ctypes.byref(total)) == 0:  # RSMI_MEM_TYPE_VRAM
            dev["vram_total"] = total.value
        if lib.rsmi_dev_memory_usage_get(i, 0, ctypes.byref(used)) == 0:
            dev["vram_used"] = used.value
        if lib.rsmi_dev_unique_id_get(i, ctypes.byref(uid)) == 0:
            dev["unique_id"] = uid.value
        name = ctypes.create_string_buffer(256)
        if lib.rsmi_dev_name_get(i, name, ctypes.c_size_t(len(name))) == 0:
            dev["name"] = name.value.decode("utf-8", "replace")
        dev["ras"] = rocm_smi_ras(lib, i)
        out["devices"].append(dev)
    count = ctypes.c_uint32(0)
    out["proc_status"] = lib.rsmi_compute_process_info_get(None, ctypes.byref(count))
    if out["proc_status"] == 0 and count.value:
        procs = (ProcessInfo * count.value)()
        lib.rsmi_compute_process_info_get(procs, ctypes.byref(count))
        for p in procs[:count.value]:
            info = ProcessInfo()
            status = lib.rsmi_compute_process_info_by_pid_get(p.process_id, ctypes.byref(info))
            gpus = (ctypes.c_uint32 * 64)()
            ngpus = ctypes.c_uint32(64)
            gstatus = lib.rsmi_compute_process_gpus_get(p.process_id, gpus, ctypes.byref(ngpus))
            out["processes"].append({
                "pid": p.process_id, "vram": info.vram_usage if status == 0 else None, "status": status,
                "gpus": [out["devices"][g]["bus_id"] if g < len(out["devices"]) else "index %d" % g
                         for g in gpus[:ngpus.value]] if gstatus == 0 else None})
    lib.rsmi_shut_down()
    print(json.dumps(out))


def in_namespace(host_dir, argv):
    """argv run with the tree's sys/{class,bus,module} over /sys's in a private mount namespace, or None
    when no namespace can be made here."""
    mounts = [d for d in ("class", "bus", "module") if os.path.isdir(os.path.join(host_dir, "sys", d))]
    script = 'tree=$1; shift; for d in %s; do mount --bind "$tree/sys/$d" "/sys/$d" || exit 125; done; exec "$@"' % (
        " ".join(mounts))
    unshare = shutil.which("unshare")
    if not unshare:
        return None, "unshare is not installed (util-linux)"
    reasons = []
    for how in (["-m"], ["-r", "-m"]):  # as root; else in a user namespace of our own
        r = run([unshare] + how + ["sh", "-c", script, "sh", host_dir] + argv)
        if r.returncode in (125,) or (r.returncode != 0 and "unshare failed" in r.stderr):
            reasons.append("unshare %s: %s" % (" ".join(how), r.stderr.strip().splitlines()[-1:] or "mount failed"))
            continue
        return r, None
    return None, "; ".join(str(x) for x in reasons)


def compare_ras(t, bus, mine, ras):
    """devplace's amdgpu RAS counters (ras/features, ras/<block>_err_count ue and ce) against ROCm SMI's
    rsmi_dev_ecc_enabled_get, rsmi_dev_ecc_status_get and rsmi_dev_ecc_count_get; compared where
    either side has a reading."""
    counters = {c.get("name"): c for c in mine.get("healthCounters", [])}
    if ras is None:
        return
    features = counters.get("ras/features")
    if features or ras["enabled_status"] == 0:
        t.check(bus + " RAS enabled blocks (rsmi_dev_ecc_enabled_get)", features.get("value") if features else "none",
                "0x%x" % ras["enabled"] if ras["enabled_status"] == 0 else "none (status %d)" % ras["enabled_status"])
    for block, theirs in sorted(ras["blocks"].items()):
        name = "ras/%s_err_count" % block
        ue, ce = counters.get(name + " ue"), counters.get(name + " ce")
        if not (ue or ce or theirs["status"] == 0):
            continue
        t.check("%s %s ue, ce (rsmi_dev_ecc_count_get)" % (bus, block),
                "%s, %s" % (ue.get("value") if ue else "none", ce.get("value") if ce else "none"),
                "%d, %d" % (theirs["ue"], theirs["ce"]) if theirs["status"] == 0 else "none (status %d)" % theirs["status"])
        if features:
            mask = int(features.get("value", "0"), 16) if features.get("effect") != "HEALTH_UNSPECIFIED" else 0
            t.check("%s %s RAS on (rsmi_dev_ecc_status_get)" % (bus, block), bool(mask & RSMI_RAS_BLOCKS[block]),
                    theirs["enabled"])
    faulty = any(v["status"] == 0 and v["ue"] > 0 for v in ras["blocks"].values())
    health = mine.get("health", "HEALTH_UNSPECIFIED")
    t.check(bus + " FAULT (ROCm SMI: an uncorrectable error counted)",
            "HEALTH_FAULT" if health == "HEALTH_FAULT" else "not FAULT", "HEALTH_FAULT" if faulty else "not FAULT")


def compare_rocm_smi(probe, host_dir, processes):
    try:
        ctypes.CDLL(ROCM_SMI_SONAME)
    except OSError as e:
        skip("ROCm SMI is not installed (%s; Debian package librocm-smi64-1, scripts/setup installs it)" % e)
    me = os.path.abspath(__file__)
    smi, why = in_namespace(host_dir, [sys.executable, me, "--rocm_smi_child"])
    if smi is None:
        skip("no private mount namespace here (%s): ROCm SMI reads only /sys" % why)
    if smi.returncode != 0:
        print("ROCm SMI's reader exited %d (an abort is an assertion inside the library):" % smi.returncode)
        print(smi.stdout + smi.stderr)
        sys.exit(1)
    reading = json.loads(smi.stdout.strip().splitlines()[-1])
    dp, why = in_namespace(host_dir, [probe, "--host_root=" + host_dir, "--json"] +
                           library_flags(probe, keep=("rocm_smi_library",)))
    if dp is None or dp.returncode != 0:
        raise SystemExit("devplace-probe in the namespace failed: %s" % (why or dp.stderr))
    inv = json.loads(dp.stdout)
    t = Table("ROCm SMI")
    t.check("rsmi_init", 0, reading["init"])
    amd = {bus: d for bus, d in devplace_devices(inv).items() if d["row"] == "ROW_CUDA_AMD"}
    devs = {d["bus_id"]: d for d in reading["devices"]}
    t.check("AMD GPUs", len(amd), len(devs))
    notes = []
    if not processes:
        t.check("bus ids", fmt_set(amd), fmt_set(devs))
        cli, _ = in_namespace(host_dir, ["rocm-smi", "--showbus", "--json"]) if shutil.which("rocm-smi") else (None, "")
        if cli is None:
            notes.append("the rocm-smi CLI is not installed: only the library was asked")
        else:
            text = cli.stdout[cli.stdout.find("{"):] if "{" in cli.stdout else "{}"
            buses = {v["PCI Bus"].lower() for k, v in json.loads(text).items() if k.startswith("card") and "PCI Bus" in v}
            t.check("bus ids (rocm-smi --showbus --json)", fmt_set(amd), fmt_set(buses))
        for bus in sorted(set(amd) | set(devs)):
            mine, theirs = amd.get(bus, {}), devs.get(bus, {})
            if mine.get("name"):
                t.check(bus + " name", mine["name"], theirs.get("name", ""))
            else:
                notes.append("%s: devplace has no name (no product_name in sysfs); ROCm SMI says %r" %
                             (bus, theirs.get("name", "")))
            t.check(bus + " unique id", mine.get("uuid", ""),
                    "GPU-%016x" % theirs["unique_id"] if "unique_id" in theirs else "")
            total = int(mine.get("memoryTotalBytes", 0))
            t.check(bus + " VRAM total", total, theirs.get("vram_total"))
            used = total - int(mine["memoryFreeBytes"]) if "memoryFreeBytes" in mine else None
            t.check(bus + " VRAM used", used, theirs.get("vram_used"))
            compare_ras(t, bus, mine, theirs.get("ras"))
    else:
        devplace_procs, smi_procs, unknown = {}, {}, []
        for bus, d in sorted(amd.items()):
            usage = d.get("usage", {})
            if not usage.get("processesKnown"):
                unknown.append(bus)
            for p in usage.get("processes", []):
                devplace_procs.setdefault(str(p.get("pid", 0)), []).append([bus, int(p.get("usedMemoryBytes", 0))])
        if reading.get("proc_status", 0) != 0:  # ROCm SMI could not list them: unknown, as devplace says
            smi_procs = "unknown on " + ", ".join(sorted(devs))
        for p in reading["processes"]:
            gpus = p["gpus"] or []
            for bus in gpus:  # a process on several GPUs: ROCm SMI sums its VRAM over them
                smi_procs.setdefault(str(p["pid"]), []).append([bus, p["vram"] if len(gpus) == 1 else None])
        t.check("compute processes {pid: [[bus id, VRAM bytes]]}",
                "unknown on " + ", ".join(unknown) if unknown else json.dumps(devplace_procs, sort_keys=True),
                smi_procs if isinstance(smi_procs, str) else json.dumps(smi_procs, sort_keys=True))
    notes.append("ROCm SMI numbers devices in DRM card order: " +
                 ", ".join("%d=%s" % (d["index"], d["bus_id"]) for d in reading["devices"]))
    t.finish(notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", help="the devplace-probe binary")
    ap.add_argument("--host_dir", help="the fixture host tree")
    ap.add_argument("--reader", choices=["hwloc", "lspci", "rocm_smi", "rocm_smi_processes"])
    ap.add_argument("--rocm_smi_child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rocm_smi_child:
        rocm_smi_child()
        return
    if not (args.probe and args.host_dir and args.reader):
        ap.error("--probe, --host_dir and --reader are required")
    host_dir = os.path.abspath(args.host_dir)
    print("host %s, reader %s" % (os.path.basename(host_dir), args.reader))
    if args.reader in ("rocm_smi", "rocm_smi_processes"):
        compare_rocm_smi(args.probe, host_dir, args.reader == "rocm_smi_processes")
    inv = devplace_inventory(args.probe, host_dir)
    if args.reader == "hwloc":
        compare_hwloc(inv, host_dir)
    else:
        compare_lspci(inv, host_dir)


if __name__ == "__main__":
    main()
