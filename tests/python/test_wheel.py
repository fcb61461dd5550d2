"""The wheel and sdist (client/python/pyproject.toml) as a user installs them: the wheel carries the
generated stubs and the project's version, pip installs it offline into a fresh venv of Debian's
python3, and the client's own tests pass from inside that venv against the real devplaced; a venv
without grpcio gets an ImportError that says what to install."""

import ast
import os
import re
import tarfile
import unittest
import zipfile

from devplace_testing import BINARY_DIR, HERE, SOURCE_DIR, TempDir, clean_env, run

DEBIAN_PYTHON = "/usr/bin/python3"
DIST = os.path.join(BINARY_DIR, "client", "python", "dist")
PACKAGE_FILES = ["devplace/__init__.py", "devplace/_client.py", "devplace/_connect_diagnosis.py",
                 "devplace/_device_metadata.py", "devplace/_grpc_connection.py", "devplace/_pick.py",
                 "devplace/_placement_env.py", "devplace/_python_environment.py", "devplace/_read.py",
                 "devplace/_resolution.py", "devplace/_resolve_options.py",
                 "devplace/_target.py", "devplace/errors.py", "devplace/py.typed", "devplace/v1/__init__.py",
                 "devplace/v1/devplace_pb2.py", "devplace/v1/devplace_pb2_grpc.py"]
# What the build writes into the package (protoc, devplace_py_gen); every other file comes from the source tree.
GENERATED_FILES = ["devplace/_placement_env.py", "devplace/v1/devplace_pb2.py", "devplace/v1/devplace_pb2_grpc.py"]
# The client's tests that need only the package, the daemon and the CLI (not cmake --install).
VENV_TESTS = ["test_api", "test_rpcs", "test_errors", "test_environment", "test_semantics"]


def project_version():
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        return re.search(r"project\(devplace VERSION ([0-9.]+)", f.read()).group(1)


def venv_env(extra=None):
    """The child environment without the build tree on PYTHONPATH: only the venv's own packages."""
    env = clean_env(extra)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    return env


class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.version = project_version()
        cls.wheel = os.path.join(DIST, f"devplace-{cls.version}-py3-none-any.whl")
        cls.sdist = os.path.join(DIST, f"devplace-{cls.version}.tar.gz")

    def make_venv(self, dir, name, system_site_packages):
        venv = dir.file(name)
        args = [DEBIAN_PYTHON, "-m", "venv"] + (["--system-site-packages"] if system_site_packages else []) + [venv]
        made = run(args, env=venv_env(), timeout=120)
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        python = os.path.join(venv, "bin", "python")
        pip = [python, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "--no-cache-dir"]
        if not system_site_packages:
            pip.append("--no-deps")  # offline: grpcio and protobuf are exactly what this venv must lack
        installed = run(pip + [self.wheel], env=venv_env(), timeout=180)
        self.assertEqual(installed.returncode, 0, installed.stdout + installed.stderr)
        return venv, python

    def test_package_files_are_the_source_trees_and_the_generated(self):
        # A module added to client/python/devplace but not to client/python/CMakeLists.txt's `sources`
        # would be missing from the build tree, the wheel and the install: this list names them all.
        package = os.path.join(SOURCE_DIR, "client", "python")
        written = sorted(os.path.relpath(os.path.join(d, f), package)
                         for d, dirs, fs in os.walk(os.path.join(package, "devplace"))
                         for f in fs if "__pycache__" not in d and not f.endswith(".pyc"))
        self.assertEqual(sorted(written + GENERATED_FILES), PACKAGE_FILES)

    def test_wheel_holds_the_stubs_version_and_dependencies(self):
        self.assertEqual(sorted(os.listdir(DIST)), sorted([os.path.basename(self.wheel), os.path.basename(self.sdist)]))
        with zipfile.ZipFile(self.wheel) as z:
            names = z.namelist()
            self.assertEqual(sorted(n for n in names if n.startswith("devplace/")), PACKAGE_FILES)
            metadata = z.read(f"devplace-{self.version}.dist-info/METADATA").decode()
            init = z.read("devplace/__init__.py").decode()
        self.assertIn(f"\nVersion: {self.version}\n", metadata)
        self.assertIn("\nRequires-Python: >=3.9\n", metadata)
        # "grpcio (>=1.51)" or "grpcio>=1.51", as the setuptools release writes it.
        requires = sorted(re.sub(r"[ ()]", "", r) for r in re.findall(r"^Requires-Dist: (.*)$", metadata, re.M))
        self.assertEqual(requires, ["grpcio>=1.51", "protobuf<6,>=4.21.12"])
        self.assertIn(f'__version__ = "{self.version}"', init)
        # requires-python >= 3.9: every module of the wheel parses as Python 3.9 (no match, no 3.10+ syntax).
        with zipfile.ZipFile(self.wheel) as z:
            for name in PACKAGE_FILES:
                if name.endswith(".py"):
                    ast.parse(z.read(name).decode(), name, feature_version=(3, 9))
        with tarfile.open(self.sdist) as t:
            members = [m.split("/", 1)[1] for m in t.getnames() if "/" in m]
        for f in PACKAGE_FILES + ["pyproject.toml", "README.md"]:
            self.assertIn(f, members)

    def test_client_tests_pass_in_a_venv_with_the_wheel(self):
        with TempDir() as dir:
            venv, python = self.make_venv(dir, "venv", system_site_packages=True)
            where = run([python, "-c", "import devplace; print(devplace.__file__); print(devplace.__version__)"],
                        env=venv_env(), cwd="/")
            self.assertEqual(where.returncode, 0, where.stderr)
            site = os.path.join(venv, "lib")
            self.assertTrue(where.stdout.splitlines()[0].startswith(site + os.sep), where.stdout)
            self.assertEqual(where.stdout.splitlines()[1], self.version)
            # The client's tests, from inside the venv: devplace is the installed wheel's (no PYTHONPATH).
            tests = run([python, "-m", "unittest"] + VENV_TESTS, env=venv_env(), cwd=HERE, timeout=900)
            self.assertEqual(tests.returncode, 0, tests.stdout + tests.stderr)
            self.assertRegex(tests.stderr, r"\nRan [1-9][0-9]* tests in .*\n\nOK")

    def test_venv_without_grpcio_says_what_to_install(self):
        with TempDir() as dir:
            _, python = self.make_venv(dir, "bare", system_site_packages=False)
            imported = run([python, "-c", "import devplace"], env=venv_env(), cwd="/")
            self.assertNotEqual(imported.returncode, 0)
            last = imported.stderr.strip().splitlines()[-1]
            self.assertTrue(last.startswith("ImportError: devplace needs the grpcio package, which this Python ("
                                            f"{python}) cannot import (No module named 'grpc'): "
                                            "pip install 'grpcio>=1.51' 'protobuf>=4.21.12,<6'"), last)


if __name__ == "__main__":
    unittest.main()
