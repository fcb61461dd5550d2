#!/usr/bin/python3
"""A fork server for oracle.py: one process per release pair imports torch once (the slow part of an oracle's start,
seconds on a loaded machine), then forks one child per batch of scenarios. Each child runs oracle.py unmodified, as
its own process would: the batch's job on stdin, its environment (USE_TORCH_XLA, ...) set, the stand-in packages
written, and Accelerate and Transformers imported afresh, so what they read from the environment or the installed
packages at import is read per batch, as before. Only torch (and what `import torch` imports) is shared, imported
before any batch's environment is set: torch reads none of the variables the rules read.

Protocol (compare.OracleServer): one job per stdin line (oracle.py's JSON job), answered by the child's stdout lines,
then one line {"_end": <exit status>, "stderr": <the child's last stderr line>}.
"""
import io
import json
import os
import runpy
import sys
import tempfile
import traceback

import torch  # noqa: F401  (Debian's python3-torch: shared by every child)
import torch.distributed  # noqa: F401

ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle.py")


def serve_one(job):
    """Forks a child that runs oracle.py on `job`; copies its stdout through and ends with the _end line."""
    out = sys.stdout.buffer
    with tempfile.TemporaryFile() as err:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                os.close(r)
                os.dup2(w, 1)
                os.dup2(err.fileno(), 2)
                sys.stdin = io.StringIO(job)
                sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
                sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), line_buffering=True)
                runpy.run_path(ORACLE, run_name="__main__")
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        os.close(w)
        with os.fdopen(r, "rb") as child:
            for line in child:
                out.write(line)
        _, wstatus = os.waitpid(pid, 0)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        out.write((json.dumps({"_end": os.waitstatus_to_exitcode(wstatus), "stderr": lines[-1] if lines else ""})
                   + "\n").encode())
        out.flush()


def main():
    for line in sys.stdin:
        if line.strip():
            serve_one(line)


if __name__ == "__main__":
    main()
