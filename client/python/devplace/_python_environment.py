"""The job's Python packages, read from package metadata: the Python peer of libdevplace's
client/python_environment.cc (ReadPythonEnvironment, ``devplace resolve --python_env``). It owns
:func:`job_environment`, which lists the distributions of :data:`JOB_PYTHON_PACKAGES` found on a
path (this interpreter's ``sys.path`` by default) without importing any of them, for
``ResolveDeviceRequest.job_environment``, and :func:`normalize_name`, PEP 503's comparison of
distribution names. tests/python/test_job_environment.py checks that it and the CLI's
``--python_env`` agree on every fixture environment.
"""

from __future__ import annotations

import os
import re
import sys
from typing import List, Optional

from ._placement_env import JOB_PYTHON_PACKAGES
from .v1 import devplace_pb2

__all__ = ["JOB_PYTHON_PACKAGES", "job_environment", "normalize_name"]


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them ("Torch_NPU" -> "torch-npu")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def job_environment(path: Optional[List[str]] = None) -> devplace_pb2.JobEnvironment:
    """The job's Python packages that decide an answer, read with ``importlib.metadata``.

    Never imports torch, a plug-in, transformers or accelerate: only their installed metadata
    (``*.dist-info`` / ``*.egg-info``) is read, so this stays fast. Looks for the distributions of
    :data:`JOB_PYTHON_PACKAGES` (generated from libdevplace's ``JobPythonPackages()``, the list
    ``devplace resolve --python_env`` reads) on ``path`` (default: this interpreter's ``sys.path``),
    the first of each name winning as it does for ``import``. The daemon turns them into the
    request's runtime backends and library versions (rules V-JOB-BUILD, V-JOB-VERSION).
    """
    from importlib import metadata  # Python >= 3.8

    wanted = set(JOB_PYTHON_PACKAGES)
    found = devplace_pb2.JobEnvironment()
    where = sys.executable if path is None else os.pathsep.join(path)
    found.source = f"importlib.metadata of {where}"
    seen = set()
    for dist in metadata.distributions(**({} if path is None else {"path": list(path)})):
        name = dist.metadata["Name"] or ""
        key = normalize_name(name)
        if key in wanted and key not in seen:
            seen.add(key)
            found.packages.add(name=name, version=dist.version or "")
    return found
