"""Builds the devplace wheel and sdist offline with setuptools' PEP 517 hooks (no pip, no network).

Usage: build_dist.py PACKAGE_DIR PYPROJECT README OUT_DIR

PACKAGE_DIR is the importable ``devplace`` package the build wrote (hand-written modules, generated
stubs, ``_placement_env.py``, ``__version__``). It is staged with PYPROJECT and README in a fresh
directory next to OUT_DIR, so that no egg-info or build/ lands in the importable tree; OUT_DIR then
holds exactly ``devplace-<version>-py3-none-any.whl`` and ``devplace-<version>.tar.gz``.
"""

import contextlib
import io
import os
import shutil
import sys


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__.strip().splitlines()[2])
    package, pyproject, readme, out = (os.path.abspath(a) for a in argv[1:])
    stage = out + ".stage"
    for d in (stage, out):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(out)
    shutil.copytree(package, os.path.join(stage, "devplace"), ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(pyproject, os.path.join(stage, "pyproject.toml"))
    shutil.copy(readme, os.path.join(stage, "README.md"))
    os.chdir(stage)
    import setuptools.build_meta as backend  # after chdir: the backend reads ./pyproject.toml
    log = io.StringIO()  # setuptools' progress lines, shown only when the build fails
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            wheel = backend.build_wheel(out)
            sdist = backend.build_sdist(out)
    except BaseException:
        sys.stderr.write(log.getvalue())
        raise
    shutil.rmtree(stage)
    print(f"build_dist: {os.path.join(out, wheel)}\nbuild_dist: {os.path.join(out, sdist)}")


if __name__ == "__main__":
    main(sys.argv)
