#!/usr/bin/python3
"""Resolves with the Python client in this process's environment, once per request, and writes each
answer as `devplace --json resolve` prints it (the protobuf JSON mapping, default-valued fields
included) to OUTDIR/py-<i>.out, or "CODE: message" to OUTDIR/py-<i>.err, with the exit status the
CLI would have (0; 2 for INVALID_ARGUMENT, a bad value; 1 for the other errors) in OUTDIR/py-<i>.rc.
Arguments: ADDRESS OUTDIR REQUESTS, REQUESTS a JSON list of [workload, {keyword arguments of
Client.resolve}]."""

import json
import os
import sys

from google.protobuf import json_format

import devplace


def main() -> int:
    address, out, requests = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with devplace.Client(address) as client:
        for i, (workload, kwargs) in enumerate(requests):
            # The CLI describes no Python environment unless --python/--python_env is given; the
            # Python client describes its own interpreter when torch is installed there. Compare
            # like with like: the parity of job descriptions is test_job_environment's.
            kwargs.setdefault("job_environment", None)
            base = os.path.join(out, f"py-{i}")
            answer, error, rc = "", "", 0
            try:
                resolution = client.resolve(workload, **kwargs)
                answer = json.dumps(json_format.MessageToDict(resolution.response, including_default_value_fields=True))
            except devplace.ResolveError as e:
                error, rc = str(e) + "\n", 2 if isinstance(e, devplace.InvalidArgumentError) else 1
            for ext, text in ((".out", answer), (".err", error), (".rc", f"{rc}\n")):
                with open(base + ext, "w") as f:
                    f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
