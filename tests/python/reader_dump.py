"""The Python client's readers of the job's files, one call, its result printed as lines of
tests/client/reader_table.txt (source, device or package lines, problem lines; or error), the peer of
tests/client/reader_dump.cc; tests/python/test_readers.py runs it once per case to bound its time and
memory. Usage: reader_dump.py [--time_ms=N] [--total=N] dra DIR | env DIR | path ENTRY..."""

import os
import sys

import devplace
from devplace import _device_metadata, _python_environment


def main(argv):
    args = [os.fsencode(a) for a in argv[1:]]
    time_ms = total = None
    while args and args[0].startswith(b"--"):
        key, _, value = args.pop(0).partition(b"=")
        if key == b"--time_ms":
            time_ms = int(value)
        elif key == b"--total":
            total = int(value)
    reader = args[0].decode()
    module = _device_metadata if reader == "dra" else _python_environment
    seconds, file_bytes, total_bytes, entries = module._LIMITS
    module._LIMITS = (seconds if time_ms is None else time_ms / 1000, file_bytes,
                      total_bytes if total is None else total, entries)
    out = []
    try:
        if reader == "dra":
            a = devplace.device_allocation(os.fsdecode(args[1]))
            a.SerializeToString()  # every message must serialize: the daemon gets exactly these bytes
            out.append(f"source {a.source}")
            for d in a.devices:
                kv = "; ".join(f"{k}={v}" for k, v in sorted(d.attributes.items(), key=lambda i: i[0].encode()))
                out.append(f"device {d.claim} | {'template' if d.from_template else 'claim'} | {d.request} | {d.driver} | "
                           f"{d.pool} | {d.name} | {kv}")
            out.extend(f"problem {p}" for p in a.problems)
        else:
            env = devplace.job_environment(os.fsdecode(args[1]) if reader == "env"
                                           else [os.fsdecode(p) for p in args[1:]])
            env.SerializeToString()
            out.append(f"source {env.source}")
            out.extend(f"package {p.name} | {p.version}" for p in env.packages)
            out.extend(f"problem {p}" for p in env.problems)
    except devplace.Error as e:
        out = [f"error {e.code.name} {e.message}"]
    sys.stdout.buffer.write("".join(line + "\n" for line in out).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
